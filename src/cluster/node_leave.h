#pragma once

// `bmas node leave [--force]` on a node (docs/cluster-join.md): a join undone. It refuses while
// the node runs jobs that a drain has not let go of, then stops what a join started (the agent,
// slurmd, munged), deletes a dynamic node from Slurm, and removes the files the join wrote. LXD
// and its workspaces are left alone. Running it again, or on a node that never joined, does
// nothing.

#include <string>
#include <vector>

#include "cluster/node_join.h"
#include "common/result.h"

namespace bmas::cluster {

// What Slurm says of a node.
struct NodeInSlurm {
  bool known = false;    // Slurm has a node of this name
  bool drained = false;  // DRAIN is in its state
  bool dynamic = false;  // it registered itself (slurmd -Z)
  int jobs = 0;          // jobs running there now, replicas included
  int replicas = 0;      // of those, inference replicas
};

// The cluster's Slurm as a node sees it: its commands, run as root with `slurm_conf` (the
// configuration slurmd fetched).
class NodeSlurm {
 public:
  virtual ~NodeSlurm() = default;
  virtual Result<NodeInSlurm> Look(const std::string& slurm_conf, const std::string& host) = 0;
  // Deletes the dynamic node `host` from Slurm (`scontrol delete nodename=HOST`).
  virtual Result<void> Delete(const std::string& slurm_conf, const std::string& host) = 0;
};

// Whether `host` may leave, given what Slurm said of it: an error that names what to do first
// (drain it, wait for its jobs), unless `force`.
Result<void> DecideLeave(const std::string& host, const Result<NodeInSlurm>& seen, bool force);

struct NodeLeaveOptions {
  std::string host;    // this node's name in Slurm
  bool force = false;  // leave even with jobs running, or with Slurm out of reach
  NodePaths paths;
};

struct NodeLeaveReport {
  bool was_joined = false;           // the node had a bmas.toml from a join
  std::vector<std::string> stopped;  // daemons stopped
  std::vector<std::string> removed;  // files removed
  bool deleted_from_slurm = false;   // a dynamic node, deleted
  // What is left for the admin to do on the controller ("" when nothing), one line.
  std::string admin_step;
};

// Takes this node out of its cluster. REQUIRES: root. The error's message starts with the step
// that failed; a refusal changes nothing.
Result<NodeLeaveReport> LeaveNode(const NodeLeaveOptions& options, NodeDaemons& daemons,
                                  NodeSlurm& slurm);

}  // namespace bmas::cluster
