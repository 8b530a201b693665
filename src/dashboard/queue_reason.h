#pragma once

// Why a pending job waits, in words a student reads at a glance, and about when it would start:
// "waiting for 8 GPUs on whole nodes; nodes oss[01-02] are reserved for research by alice
// since 2026-11-24T14:00:00 (until lab mode); about 12 min (when running jobs reach their time
// limits)". Pure.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dashboard/state.h"

namespace bmas::dashboard {

// What every pending job's estimate needs, worked out once per state: the free GPUs, when
// running jobs end, and each partition's pending jobs in submission order. A page of 1,000
// pending jobs costs one pass over the state, not one per job.
class QueueOutlook {
 public:
  explicit QueueOutlook(const ClusterState& s);

  // Seconds from `now` until the job could start if every running job used its whole time
  // limit and the pending jobs submitted before it in its partition went first; 0 when GPUs
  // are free for it now. nullopt when that cannot be said: a running job it waits for has no
  // time limit, or it waits for something other than GPUs (a limit, a hold, a dependency).
  std::optional<int64_t> EstimateStartSeconds(const JobInfo& job, int64_t now) const;

  // The whole sentence for a pending job.
  std::string Explain(const JobInfo& job, int64_t now) const;

 private:
  // GPUs asked for by the pending jobs of the job's partition submitted before it.
  int GpusAhead(const JobInfo& job) const;

  const ClusterState& s_;
  int free_ = 0;
  int max_gpus_per_node_ = 0;
  std::vector<std::pair<int64_t, int>> ends_;  // (expected end or INT64_MAX, GPUs), sorted
  // Per partition: ((submit time, id), GPUs asked by it and every earlier one), sorted.
  std::map<std::string, std::vector<std::pair<std::pair<int64_t, int64_t>, int>>> pending_;
};

// One-off forms of QueueOutlook's (each builds an outlook of `s`).
std::optional<int64_t> EstimateStartSeconds(const JobInfo& job, const ClusterState& s,
                                            int64_t now);
std::string PendingExplanation(const JobInfo& job, const ClusterState& s, int64_t now);

}  // namespace bmas::dashboard
