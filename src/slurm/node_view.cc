#include "slurm/node_view.h"

#include <algorithm>

#include "slurm/job_state.h"
#include "slurm/node_drain.h"

namespace bmas::slurm {
namespace {

bool OnNode(const JobInfo& j, const std::string& node) {
  return (HoldsGpus(j.state) || j.state == JobState::kCompleting) &&
         std::find(j.nodes.begin(), j.nodes.end(), node) != j.nodes.end();
}

}  // namespace

std::vector<NodeRow> NodeRows(const std::vector<NodeInfo>& nodes, const std::vector<JobInfo>& jobs,
                              const IsReplicaJob& is_replica) {
  std::vector<NodeRow> rows;
  for (const NodeInfo& n : nodes) {
    NodeRow r;
    r.name = n.name;
    r.address = n.address;
    r.drained = IsDrainedInSlurm(n);
    const bool flag = std::find(n.state_flags.begin(), n.state_flags.end(), "DRAIN") !=
                      n.state_flags.end();
    r.state = n.state + (flag && n.state.find("drain") == std::string::npos ? "+drain" : "");
    r.gpus = n.gpus;
    r.gpus_used = n.gpus_used;
    r.reason = n.reason;
    r.partitions = n.partitions;
    for (const JobInfo& j : jobs) {
      if (!OnNode(j, n.name)) continue;
      ++r.jobs;
      r.replicas += is_replica(j);
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

std::vector<int64_t> JobsToRequeue(const std::vector<JobInfo>& jobs, const std::string& node,
                                   const IsReplicaJob& is_replica) {
  std::vector<int64_t> out;
  for (const JobInfo& j : jobs) {
    if (j.state == JobState::kRunning && OnNode(j, node) && !is_replica(j)) {
      out.push_back(j.id);
    }
  }
  return out;
}

}  // namespace bmas::slurm
