#pragma once

// Why a pending job waits, in words a student reads at a glance, and about when it would start:
// "waiting for 8 GPUs on whole nodes; nodes oss[01-02] are reserved for research by alice
// since 2026-11-24T14:00:00; about 12 min (when running jobs reach their time limits)". Pure.

#include <cstdint>
#include <optional>
#include <string>

#include "dashboard/state.h"

namespace bmas::dashboard {

// Seconds from `now` until the job could start if every running job used its whole time limit
// and the pending jobs submitted before it in its partition went first; 0 when GPUs are free
// for it now. nullopt when that cannot be said: a running job it waits for has no time limit,
// or it waits for something other than GPUs (a limit, a hold, a dependency).
std::optional<int64_t> EstimateStartSeconds(const JobInfo& job, const ClusterState& s,
                                            int64_t now);

// The whole sentence for a pending job.
std::string PendingExplanation(const JobInfo& job, const ClusterState& s, int64_t now);

}  // namespace bmas::dashboard
