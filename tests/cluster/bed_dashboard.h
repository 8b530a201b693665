#pragma once

// The dashboard on the test bed's controller, as README "The dashboard" runs it on a cluster:
// `bmas dashboard` in mgs1, listening on the bridge, reading Slurm through the controller's
// slurmrestd and each node's agent over TLS (https://NODE:9400, the cluster CA of the
// inventory's [agent] ca), and a user's view of it: /api/cluster read with their API key by
// curl in mgs1, as that user.

#include <rapidjson/document.h>

#include <string>
#include <utility>
#include <vector>

#include "bed_cluster.h"
#include "common/daemon_process.h"
#include "common/result.h"
#include "net_bed.h"

namespace bmas::testbed {

class BedDashboard {
 public:
  static constexpr const char* kListen = "10.200.0.1:8080";  // mgs1, on the bridge

  // `cluster` has written its inventory and initialised the controller; `bmas` is root's binary.
  BedDashboard(NetBed& bed, const BedCluster& cluster, std::string bmas)
      : bed_(bed), cluster_(cluster), bmas_(std::move(bmas)) {}

  // `bmas user add USER` and `bmas key create USER` in mgs1 as root: the user's API key.
  Result<std::string> KeyFor(const std::string& user) const;

  // `bmas dashboard` in mgs1 as a daemon of the bed, reading the agents of `nodes`, refreshing
  // every half second.
  Result<DaemonProcess> Start(const std::vector<std::string>& nodes);

  // /api/cluster as `user` reads it with `key`. Its text goes to `raw` (curl's error when it
  // failed); a body that is not JSON gives an empty object.
  rapidjson::Document Map(const std::string& user, const std::string& key,
                          std::string& raw) const;

  // The end of the dashboard's log, for failure messages.
  std::string LogTail() const { return bed_.LogTail("dashboard"); }

 private:
  NetBed& bed_;
  const BedCluster& cluster_;
  std::string bmas_;
};

// The node called `name` in a /api/cluster document; a null value when it has none.
const rapidjson::Value& MapNode(const rapidjson::Value& map, const std::string& name);

}  // namespace bmas::testbed
