#pragma once

// What the layout policy (core/mig_relayout.h) is given, read from the inventory (its GPU nodes
// in their present layouts) and Slurm's jobs. Pure.

#include <map>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/mig_relayout.h"
#include "slurm/gpu_layouts.h"
#include "slurm/slurm_json.h"

namespace bmas::slurm {

// GPUs whose layout follows demand, by group, in the layout of their active node (`active`:
// group -> node, gpu_layouts.h), busy when a job runs (or starts, or ends) there. Pending jobs:
// a job on slices asks for `gpus` of its profile, a job of whole GPUs for kWholeGpu; jobs on
// shards and jobs without GPUs ask for nothing the layouts change. Free elsewhere: each node's
// whole GPUs and slices less what running jobs hold there, on every node but standby layout
// nodes and idle active ones, whose capacity is the policy's to choose.
RelayoutInput RelayoutInputOf(const Cluster& cluster, const std::vector<JobInfo>& jobs,
                              const std::map<std::string, std::string>& active,
                              const std::map<std::string, SavedLayout>& saved);

// The layout settings for `cluster`: the layouts of its first GPU group. REQUIRES: all GPUs of
// a cluster whose layout follows demand share one list (one [[cluster.nodes.gpus.flexible]]
// kind).
RelayoutSettings RelayoutSettingsOf(const Cluster& cluster);

}  // namespace bmas::slurm
