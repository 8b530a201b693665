#pragma once

// A cluster brought up on the test bed as an admin does it (docs/cluster-join.md), for tests
// and benchmarks: an inventory of the bed's hosts, `bmas cluster init` in mgs1 with munged and
// slurmctld there, the join service (`bmas cluster serve`), and `bmas node join TOKEN` in a
// node. Every path of a host is under <dir>/node, its own.

#include <chrono>
#include <string>

#include "common/process.h"
#include "common/result.h"
#include "net_bed.h"

namespace bmas::testbed {

struct JoinOptions {
  std::string bmas;        // the bmas binary
  int gpus_per_node = 0;   // fake GPUs per node (NetBed::MakeFakeGpus); 0: none
  bool dynamic = false;    // `cluster init --dynamic-nodes`, `node join --dynamic`
};

class BedJoin {
 public:
  BedJoin(NetBed& bed, JoinOptions options);

  // The inventory (<dir>/inventory.toml) and, when asked, the nodes' fake GPUs.
  Result<void> WriteInventory();
  // `bmas cluster init` in mgs1, then munged and slurmctld there (waits for `scontrol ping`);
  // its output, which ends with the join line.
  Result<CommandOutput> InitController();
  // The token of `bmas node join TOKEN` in `init_output`; "" when it has none.
  static std::string Token(const std::string& init_output);
  // `bmas cluster serve` in mgs1; waits until it holds the join port.
  Result<void> StartJoinService();
  // `bmas node join TOKEN` in `host` as root.
  Result<CommandOutput> Join(const std::string& host, const std::string& token) const;
  // `bmas ARGS` in `host` as `user` (root when ""), with the host's own state dir.
  Result<CommandOutput> Bmas(const std::string& host, std::vector<std::string> args,
                             const std::string& user = "") const;
  // Waits up to `timeout` until sinfo in mgs1 shows `node` idle; the last sinfo output when not.
  std::string WaitIdle(const std::string& node,
                       std::chrono::seconds timeout = std::chrono::seconds(30)) const;

  const std::string& inventory() const { return inventory_; }
  const std::string& node_dir() const { return node_; }  // <dir>/node

 private:
  NetBed& bed_;
  JoinOptions options_;
  std::string node_;
  std::string inventory_;
};

}  // namespace bmas::testbed
