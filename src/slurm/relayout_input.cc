#include "slurm/relayout_input.h"

#include <algorithm>

#include "core/mig.h"
#include "slurm/job_state.h"

namespace bmas::slurm {
namespace {

// What a job's allocation type counts as: a profile, or a whole GPU.
std::string Kind(const std::string& type) { return IsMigProfileName(type) ? type : kWholeGpu; }

bool OnNode(const JobInfo& j, const std::string& node) {
  return std::find(j.nodes.begin(), j.nodes.end(), node) != j.nodes.end();
}

bool Holds(JobState s) {
  return s == JobState::kRunning || s == JobState::kConfiguring || s == JobState::kCompleting ||
         s == JobState::kSuspended;
}

}  // namespace

RelayoutInput RelayoutInputOf(const Cluster& cluster, const std::vector<JobInfo>& jobs,
                              const std::map<std::string, std::string>& active,
                              const std::map<std::string, SavedLayout>& saved) {
  RelayoutInput in;
  std::vector<std::string> no_capacity;  // standby layout nodes and idle active ones
  for (const Node& n : cluster.nodes) {
    if (n.gpu_group.empty()) continue;
    const auto it = active.find(n.gpu_group);
    if (it == active.end() || it->second != n.name) {
      no_capacity.push_back(n.name);
      continue;
    }
    FlexGpu g;
    g.node = n.gpu_group;
    g.gpu = n.gpus.first_index;
    g.layout = GpuNodeLayout(n);
    g.busy = std::any_of(jobs.begin(), jobs.end(),
                         [&](const JobInfo& j) { return Holds(j.state) && OnNode(j, n.name); });
    if (auto s = saved.find(n.gpu_group); s != saved.end()) g.changed_at = s->second.changed_at;
    if (!g.busy) no_capacity.push_back(n.name);
    in.gpus.push_back(std::move(g));
  }
  for (const JobInfo& j : jobs) {
    if (j.state != JobState::kPending || j.gpus <= 0 || j.shards > 0) continue;
    in.pending.push_back(PendingSlices{Kind(j.gpu_type), j.gpus, j.submit_time});
  }
  for (const Node& n : cluster.nodes) {
    if (std::find(no_capacity.begin(), no_capacity.end(), n.name) != no_capacity.end()) continue;
    std::map<std::string, int> free;
    if (const int whole = WholeGpuCount(n.gpus); whole > 0) free[kWholeGpu] += whole;
    for (const MigSlice& s : MigSlicesOf(n.gpus)) ++free[std::string(s.placement.profile->name)];
    for (const JobInfo& j : jobs) {
      if (!Holds(j.state)) continue;
      for (const NodeGpus& a : j.gpu_alloc) {
        if (a.node == n.name) free[Kind(a.type)] -= static_cast<int>(a.indexes.size());
      }
    }
    for (const auto& [kind, count] : free) {
      if (count > 0) in.free_elsewhere[kind] += count;
    }
  }
  return in;
}

RelayoutSettings RelayoutSettingsOf(const Cluster& cluster) {
  RelayoutSettings s;
  const std::vector<std::string> groups = GpuGroups(cluster);
  if (groups.empty()) return s;
  for (const Node* n : LayoutNodesOf(cluster, groups.front())) {
    s.candidates.push_back(GpuNodeLayout(*n));
  }
  return s;
}

}  // namespace bmas::slurm
