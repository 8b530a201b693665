#pragma once

// `bmas node join TOKEN` on a node (docs/cluster-join.md): the node's own key and CSR, the
// checked TLS exchange with the controller's join service, the files it answers with, and
// munged and a configless slurmd. Each step is undone when a later one fails, and the error
// names the step. The daemons are behind NodeDaemons, so the steps are tested without them.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cluster/join_token.h"
#include "common/result.h"

namespace bmas::cluster {

// Where a node keeps what a join gives it.
struct NodePaths {
  std::string config_dir = "/etc/bmas";  // bmas.toml, ca.crt, node.crt, node.key
  std::string munge_key = "/etc/munge/munge.key";
  std::string munge_run_dir = "/run/munge";  // munged's socket, pid, log and seed
  std::string run_dir = "/run/bmas";         // what the join started, and its daemons' output
};

// The node's daemons, started by a join.
class NodeDaemons {
 public:
  virtual ~NodeDaemons() = default;
  // Whether munged answers on its default socket.
  virtual bool MungeRunning() = 0;
  virtual Result<void> StartMunge(const NodePaths& paths) = 0;
  // Whether the slurmd a join started still runs.
  virtual bool SlurmdRunning(const NodePaths& paths) = 0;
  // Starts slurmd with `args` (after the program) and waits until it has its configuration.
  virtual Result<void> StartSlurmd(const NodePaths& paths, const std::vector<std::string>& args,
                                   const std::string& conf_cache) = 0;
  // Stops what this object started (a failed join's undo).
  virtual void StopStarted() = 0;
};

// munged and slurmd as processes of this host (setpriv to munge's account for munged).
std::unique_ptr<NodeDaemons> NewProcessNodeDaemons();

struct NodeJoinOptions {
  std::string host;      // this node's host name
  std::string address;   // its address on the controller's network; "" = the one routed there
  bool dynamic = false;  // slurmd -Z: a dynamic node, its resources from the inventory
  NodePaths paths;
  std::chrono::milliseconds timeout = std::chrono::seconds(20);
};

struct NodeJoinReport {
  bool already_joined = false;       // nothing fetched: the node had joined this cluster
  std::vector<std::string> written;  // files written or replaced
  std::vector<std::string> started;  // daemons started
};

// Joins this node. REQUIRES: root. The error's message starts with the step that failed.
Result<NodeJoinReport> JoinNode(const JoinToken& token, const NodeJoinOptions& options,
                                NodeDaemons& daemons, int64_t unix_now);

// The local address this host uses to reach `address` (no packet is sent).
Result<std::string> SourceAddressFor(const std::string& address, uint16_t port);

}  // namespace bmas::cluster
