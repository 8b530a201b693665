#pragma once

// Layouts that follow demand: which idle re-partitionable GPU should take which MIG layout,
// given what waits in the queue. Pure: the caller reads the queue and the GPUs, passes the time,
// and applies the decisions (NVML, then Slurm's view of the GPU's node). A simulator (bmas plan)
// runs the same function.
//
// The rule. Each pending job that has waited at least `min_wait_s` asks for k slices of one
// profile on one GPU, or for one whole GPU (profile kWholeGpu). Requests are served oldest first,
// each wholly or not at all. Free capacity on GPUs that do not re-partition (or on busy ones
// that do) serves first, then idle re-partitionable GPUs held in their layout. What is left is
// unmet. Each other idle re-partitionable GPU, in turn (those changed longest ago first), takes
// the candidate layout that serves the most slices of unmet requests; ties keep its present
// layout, then take the layout with fewer instances (less to create). Its layout changes only
// when the best candidate serves strictly more than the present one. A GPU changed less than
// `hold_s` ago, or holding any job, never changes. So a GPU with a job is never re-partitioned,
// an empty queue changes nothing, and two GPUs are not both re-laid for one job. (Free capacity
// elsewhere is taken as one pool: a request of k slices counts as served when k are free
// anywhere, though Slurm needs them on one node.)

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bmas {

// How Slurm's reason for a standby layout node starts (DOWN and drained, no slurmd): the node of
// a layout a GPU is not in now (core/cluster.h's FlexibleGpus). Views leave such nodes out.
inline constexpr std::string_view kStandbyLayoutReason = "bmas: standby MIG layout";

// The profile name a whole GPU (MIG off) goes by in demand and layouts: an empty layout.
inline constexpr const char* kWholeGpu = "whole";

// A GPU whose layout may change: its own Slurm node (so that re-partitioning it moves no other
// job's gres indexes; docs/mig-relayout-slurm.md).
struct FlexGpu {
  std::string node;                 // its Slurm node
  int gpu = 0;                      // its index on the host
  std::vector<std::string> layout;  // present profiles; empty = whole (MIG off)
  bool busy = false;                // a job holds it or one of its slices
  int64_t changed_at = 0;           // unix seconds of its last change; 0 = never
};

// Pending demand: one entry per pending job (or wanted replica).
struct PendingSlices {
  std::string profile;    // "1g.10gb", ..., or kWholeGpu
  int count = 1;          // slices (or whole GPUs) on one node
  int64_t since = 0;      // unix seconds it has waited since
};

struct RelayoutInput {
  std::vector<FlexGpu> gpus;
  std::vector<PendingSlices> pending;
  // Free instances of each profile (kWholeGpu for whole GPUs) elsewhere: on GPUs that do not
  // re-partition and on busy re-partitionable ones.
  std::map<std::string, int> free_elsewhere;
};

struct RelayoutSettings {
  // The layouts a re-partitionable GPU may take, each checked against the model's tables by the
  // inventory (an empty one = whole GPU).
  std::vector<std::vector<std::string>> candidates;
  int64_t min_wait_s = 30;  // a job that waited less may still start on what exists
  int64_t hold_s = 300;     // a GPU keeps a new layout at least this long
};

struct RelayoutDecision {
  std::string node;
  int gpu = 0;
  std::vector<std::string> from;
  std::vector<std::string> to;
  std::string why;  // "2 pending 1g.10gb jobs waited 45 s or more; no free 1g.10gb elsewhere"
};

std::vector<RelayoutDecision> DecideRelayouts(const RelayoutSettings& settings,
                                              const RelayoutInput& input, int64_t now);

// "3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb", or "whole" for an empty layout.
std::string LayoutText(const std::vector<std::string>& layout);

// The other way: "whole", or profiles joined by '+', each perhaps "Nx" times ("7x1g.10gb",
// "3g.40gb + 2g.20gb + 2x1g.10gb"). Checks the form only (core/mig.h checks the tables).
Result<std::vector<std::string>> ParseLayoutText(std::string_view text);

}  // namespace bmas
