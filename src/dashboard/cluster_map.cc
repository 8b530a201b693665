#include "dashboard/cluster_map.h"

#include <algorithm>

#include "core/mig.h"
#include "core/mig_relayout.h"

namespace bmas::dashboard {
namespace {

// A free GPU's cell on a node in `h`'s condition.
const char* FreeGpuState(const NodeHealth& h, bool reserved) {
  if (h.status == "drained" || h.status == "draining") return "drained";
  if (h.status != "up") return "down";
  return reserved ? "reserved" : "idle";
}

void ApplyTelemetry(const NodeTelemetry* t, NodeCell& cell) {
  if (t == nullptr || !t->up) return;
  cell.telemetry = true;
  for (const GpuTelemetryRow& r : t->gpus) {
    for (GpuCell& g : cell.gpus) {
      if (g.index != r.index) continue;
      g.util = static_cast<int>(r.util);
      g.mem_used_mb = r.mem_used_mb;
      g.mem_total_mb = r.mem_total_mb;
    }
  }
}

// On a node with MIG layouts a cell is one of Slurm's gpu gres: a whole GPU or a slice.
void Hold(GpuCell& g, const JobInfo& j, const std::string& gres_type = "") {
  g.state = IsInferenceJob(j) ? "inference" : "training";
  if (IsMigProfileName(gres_type)) g.slice = gres_type;
  g.job_id = j.id;
  g.user = j.user;
  g.job_name = j.name;
  g.partition = j.partition;
}

}  // namespace

bool IsInferenceJob(const JobInfo& job) {
  return job.partition == "inference" || job.name.rfind("bmas-inference", 0) == 0;
}

std::vector<NodeCell> BuildClusterMap(const ClusterState& s) {
  std::vector<NodeCell> map;
  if (s.nodes.empty()) {
    // No Slurm: the agents' nodes, each GPU held by the job its processes belong to.
    for (const NodeTelemetry& t : s.telemetry) {
      NodeCell cell;
      cell.name = t.node;
      for (const GpuTelemetryRow& r : t.gpus) {
        GpuCell g;
        g.index = r.index;
        g.state = r.job_id != 0 ? "training" : "idle";
        g.job_id = r.job_id;
        g.user = r.user;
        cell.gpus.push_back(std::move(g));
      }
      ApplyTelemetry(&t, cell);
      cell.health = DescribeNode(NodeInfo{}, &t);
      map.push_back(std::move(cell));
    }
    return map;
  }
  for (const NodeInfo& n : s.nodes) {
    // A layout a GPU is not in now: not a machine, and its GPU is on the active layout's node.
    if (n.reason.starts_with(kStandbyLayoutReason)) continue;
    NodeCell cell;
    cell.name = n.name;
    cell.state = n.state;
    cell.reason = n.reason;
    const NodeTelemetry* agent = AgentOf(s.telemetry, n);
    cell.health = DescribeNode(n, agent);
    const bool reserved = s.mode.research && std::find(s.mode.nodes.begin(), s.mode.nodes.end(),
                                                       n.name) != s.mode.nodes.end();
    for (int i = 0; i < n.gpus; ++i) {
      GpuCell g;
      g.index = i;
      g.state = FreeGpuState(cell.health, reserved);
      cell.gpus.push_back(std::move(g));
    }
    // Jobs with GPU indexes from Slurm first; then jobs Slurm gave no indexes for take the
    // first free GPUs (their count shared out over their nodes).
    std::vector<const JobInfo*> unindexed;
    for (const JobInfo& j : s.jobs) {
      if (!HoldsGpus(j.state) || j.gpus <= 0) continue;
      if (std::find(j.nodes.begin(), j.nodes.end(), n.name) == j.nodes.end()) continue;
      bool indexed = false;
      for (const NodeGpus& a : j.gpu_alloc) {
        if (a.node != n.name) continue;
        indexed = true;
        for (int i : a.indexes) {
          if (i >= 0 && i < static_cast<int>(cell.gpus.size())) Hold(cell.gpus[i], j, a.type);
        }
      }
      if (!indexed) unindexed.push_back(&j);
    }
    // Jobs on shards of a shared GPU: several on one GPU, which names the first.
    for (const JobInfo& j : s.jobs) {
      if (!HoldsGpus(j.state) || j.shards <= 0) continue;
      for (const NodeGpus& a : j.shard_alloc) {
        if (a.node != n.name) continue;
        for (int i : a.indexes) {
          if (i < 0 || i >= static_cast<int>(cell.gpus.size())) continue;
          GpuCell& g = cell.gpus[i];
          if (g.sharers++ == 0) Hold(g, j);
          g.shards += j.shards;
        }
      }
    }
    for (const JobInfo* j : unindexed) {
      int want = j->gpus / std::max<int>(1, static_cast<int>(j->nodes.size()));
      for (GpuCell& g : cell.gpus) {
        if (want == 0) break;
        if (g.job_id != 0) continue;
        Hold(g, *j);
        --want;
      }
    }
    ApplyTelemetry(agent, cell);
    map.push_back(std::move(cell));
  }
  return map;
}

}  // namespace bmas::dashboard
