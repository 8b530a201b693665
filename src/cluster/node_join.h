#pragma once

// `bmas node join TOKEN` on a node (docs/cluster-join.md): the node's own key and CSR, the
// checked TLS exchange with the controller's join service, the files it answers with, and
// munged, a configless slurmd, LXD (with its peers' certificates in <config_dir>/lxd-peers/) and
// the agent, and the default workspace image from the node's cache. A node that had joined asks
// again for its LXD peers only. Each step is undone when a later one fails, and the error names
// the step. The daemons are behind NodeDaemons (daemon/node_daemons.h has the real
// ones), so the steps are tested without them.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cluster/join_token.h"
#include "cluster/node_files.h"
#include "common/result.h"

namespace bmas::cluster {

// Where a node keeps what a join gives it.
struct NodePaths {
  // bmas.toml, ca.crt, node.crt, node.key; replica.crt and replica.key, what inference replicas
  // here serve TLS with (from the replica CA, cluster/cluster_files.h)
  std::string config_dir = "/etc/bmas";
  std::string munge_key = "/etc/munge/munge.key";
  std::string munge_run_dir = "/run/munge";  // munged's socket, pid, log and seed
  std::string run_dir = "/run/bmas";         // what the join started, and its daemons' output
  std::string state_dir = "/var/lib/bmas";   // the agent's state dir (its socket is in it)
  // The agent's operator secret: the controller's (daemon/secret.h's path in state_dir).
  std::string OperatorSecret() const { return state_dir + "/run/operator.secret"; }
  // Where the default workspace image is imported from when LXD has none (`bmas image build`'s
  // cache: copy the controller's file here).
  std::string image_cache = "/var/cache/bmas/images";
};

// The daemons a join starts, by the names NodeDaemons::StopJoined takes, in start order.
inline constexpr const char* kJoinDaemons[] = {"munged", "slurmd", "agent"};

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
  // Whether the agent a join started still runs.
  virtual bool AgentRunning(const NodePaths& paths) = 0;
  // Starts `bmas agent` with `config` (the node's bmas.toml) and waits until its socket answers.
  virtual Result<void> StartAgent(const NodePaths& paths, const std::string& config) = 0;
  // Starts LXD as `bmas --config CONFIG --state-dir STATE lxd up` does (idempotent: what runs
  // is kept) and brings its trust store to <node_dir>/lxd-peers/. Returns what it says it did.
  virtual Result<std::string> StartLxd(const NodePaths& paths, const std::string& config) = 0;
  // Puts the default workspace image into the LXD that CONFIG names when it has none, from
  // paths.image_cache only (never a build). What it did; NotFound naming the file and the fix
  // when the cache does not hold it.
  virtual Result<std::string> ImportDefaultImage(const NodePaths& paths,
                                                 const std::string& config) = 0;
  // Stops what this object started (a failed join's undo).
  virtual void StopStarted() = 0;
  // Stops `daemon` (one of kJoinDaemons) if a join, this one or an earlier, started it and it
  // still runs; true when it stopped one. Daemons the join did not start are left alone.
  virtual Result<bool> StopJoined(const NodePaths& paths, const std::string& daemon) = 0;
};

struct NodeJoinOptions {
  std::string host;      // this node's host name
  std::string address;   // its address on the controller's network; "" = the one routed there
  bool dynamic = false;  // slurmd -Z: a dynamic node, its resources from the inventory
  NodePaths paths;
  std::chrono::milliseconds timeout = std::chrono::seconds(20);
  // The account the controller's inference replicas run as here (daemon/service_account.h):
  // it alone may read the replica key, <config_dir>/replica.key, and it owns
  // <state_dir>/replicas, the replica jobs' working directory.
  std::string replica_account = "bmas";
};

struct NodeJoinReport {
  bool already_joined = false;       // nothing fetched: the node had joined this cluster
  std::vector<std::string> written;  // files written or replaced
  std::vector<std::string> started;  // daemons started
  std::string lxd;  // what `lxd up` said ("" when the cluster's bmas.toml sets no [lxd] listen)
  std::string image;  // what became of the default workspace image ("" when LXD was not started)
  std::vector<std::string> removed;  // peers' certificates the controller no longer hands out
  std::vector<std::string> notes;    // what did not stop the join but the admin should know
};

// The node's <config_dir>/lxd-peers/HOST.crt for each peer certificate a join reply carries
// (0644: certificates are public). Hosts that cannot name a file are refused.
Result<std::vector<NodeFile>> LxdPeerFiles(const std::map<std::string, std::string>& peers,
                                                  const std::string& config_dir);

// Whether a node with this bmas.toml serves its LXD to peers ([lxd] listen is set): the join
// starts LXD there.
bool ServesLxd(const std::string& bmas_toml);

// What the node's bmas.toml is made of: the controller's, with [cluster.slurm] slurmrestd_ca set
// to `ca_path` (the node's 0644 copy of the cluster CA), so that users' commands on the node
// check an https slurmrestd against a file they can read, and, when the controller's [store] url
// names PostgreSQL, [store] url set to that server as cluster/node_store.h says. Errors name
// what cannot be read.
Result<std::string> NodeBmasToml(const std::string& controller_toml, const std::string& ca_path);

// The port a node's agent serves its metrics on, off loopback over TLS with the node's certificate
// (`[agent] listen` of a joined node), unless the controller's bmas.toml gives another.
inline constexpr uint16_t kAgentPort = 9400;

// `node_toml` (NodeBmasToml's) with the node's agent listening on `address` (the node's address on
// the controller's network) at kAgentPort, or the port of the controller's `[agent] listen` when
// it names one, with the node's certificate, key and CA in `config_dir`: so that the dashboard
// and Prometheus on the controller reach it over TLS.
Result<std::string> WithAgentListener(const std::string& node_toml, const std::string& address,
                                      const std::string& config_dir);

// Joins this node. REQUIRES: root. The error's message starts with the step that failed.
Result<NodeJoinReport> JoinNode(const JoinToken& token, const NodeJoinOptions& options,
                                NodeDaemons& daemons, int64_t unix_now);

// The slurm.conf that a configless slurmd keeps in its spool dir once it has fetched it.
std::string FetchedSlurmConf(const std::string& spool_dir);

// The local address this host uses to reach `address` (no packet is sent).
Result<std::string> SourceAddressFor(const std::string& address, uint16_t port);

}  // namespace bmas::cluster
