#include "plan/gpu_pools.h"

#include <algorithm>

#include "core/mig.h"

namespace bmas::plan {

std::vector<GpuPool> GpuPoolsOf(const Cluster& cluster) {
  std::vector<GpuPool> pools;
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    const GpuSpec& gpus = cluster.nodes[i].gpus;
    const int node = static_cast<int>(i);
    pools.push_back(GpuPool{.node = node, .capacity = WholeGpuCount(gpus)});
    auto model = FindMigGpuModel(gpus.type, gpus.memory_gb);
    std::vector<std::string> seen;
    for (const MigLayout& layout : gpus.mig_layouts) {
      for (const std::string& profile : layout.profiles) {
        if (std::find(seen.begin(), seen.end(), profile) != seen.end()) continue;
        seen.push_back(profile);
        const MigProfile* p = model ? FindMigProfile(**model, profile) : nullptr;
        pools.push_back(GpuPool{
            .node = node,
            .type = profile,
            .capacity = MigSliceCount(gpus, profile),
            .gpu_equivalents = p != nullptr ? static_cast<double>(p->compute_slices) / kMigComputeSlices
                                            : 1.0 / kMigComputeSlices});
      }
    }
  }
  return pools;
}

std::vector<FlexGroup> FlexGroupsOf(const Cluster& cluster) {
  std::vector<FlexGroup> groups;
  for (const std::string& name : GpuGroups(cluster)) {
    FlexGroup g{.name = name};
    for (const Node* n : LayoutNodesOf(cluster, name)) {
      g.nodes.push_back(static_cast<int>(n - cluster.nodes.data()));
      g.layouts.push_back(GpuNodeLayout(*n));
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace bmas::plan
