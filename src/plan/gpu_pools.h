#pragma once

// The GPUs the planner's model of Slurm schedules, as Slurm sees them: each node's whole GPUs,
// and its MIG slices of each profile, are separate pools (gres types), and a job takes GPUs of
// one pool. GPUs whose layout follows demand are one Slurm node per layout (core/cluster.h);
// only one of a GPU's layout nodes, its active one, has GPUs at a time. Pure.

#include <string>
#include <vector>

#include "core/cluster.h"

namespace bmas::plan {

struct GpuPool {
  int node = 0;          // index in cluster.nodes
  std::string type;      // "" = whole GPUs, else a MIG profile ("1g.10gb")
  int capacity = 0;      // GPUs or slices while its node is active
  double gpu_equivalents = 1;  // one unit's share of a GPU: compute slices / 7 for a slice
};

// The pools of every node, node by node (a node's whole GPUs first, then its profiles in the
// order its layouts name them). Shared GPUs (shards) are in none: the planner does not model
// them.
std::vector<GpuPool> GpuPoolsOf(const Cluster& cluster);

// A GPU whose layout follows demand: its layout nodes (indices in cluster.nodes) by layout
// index, and each one's layout (empty = whole).
struct FlexGroup {
  std::string name;  // "oss01-gpu3"
  std::vector<int> nodes;
  std::vector<std::vector<std::string>> layouts;
};

std::vector<FlexGroup> FlexGroupsOf(const Cluster& cluster);

}  // namespace bmas::plan
