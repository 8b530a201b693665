#pragma once

// What `bmas node list` shows of each node: Slurm's state and GPUs, the jobs running there
// (training and replicas apart) and why it is drained. Pure: Slurm's answers in, rows out.

#include <functional>
#include <string>
#include <vector>

#include "slurm/slurm_json.h"

namespace bmas::slurm {

struct NodeRow {
  std::string name;
  std::string address;
  std::string state;    // Slurm's state, with "+drain" when the DRAIN flag is set: "mixed+drain"
  bool drained = false;  // no new job starts there (IsDrainedInSlurm)
  int gpus = 0;
  int gpus_used = 0;
  int jobs = 0;          // running or ending there, replicas included
  int replicas = 0;      // of those, inference replicas (the service account's bmas-replica jobs)
  std::string reason;    // Slurm's reason for a drain or a down node
  std::vector<std::string> partitions;
};

// Tells an inference replica's job (autoscale/replica_job.h knows their names).
using IsReplicaJob = std::function<bool(const JobInfo&)>;

// One row per node, in Slurm's order.
std::vector<NodeRow> NodeRows(const std::vector<NodeInfo>& nodes, const std::vector<JobInfo>& jobs,
                              const IsReplicaJob& is_replica);

// The running jobs on `node` that are not inference replicas (which move by themselves when
// the node is drained): what `bmas node drain --requeue` requeues.
std::vector<int64_t> JobsToRequeue(const std::vector<JobInfo>& jobs, const std::string& node,
                                   const IsReplicaJob& is_replica);

}  // namespace bmas::slurm
