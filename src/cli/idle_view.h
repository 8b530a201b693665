#pragma once

// What idle-GPU policing (idle/idle_policy.h) did to a job, as `bmas jobs` and `bmas job show`
// show it, and the agent's reply that carries a user's own idle records (the store is root's).
// Pure: records, times and the [idle] settings go in; no store, no clock.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "store/store.h"

namespace bmas {

// The idle record that stands for one run of a job, and when a warned job will be cancelled.
struct JobIdleStatus {
  IdleRecord record;      // kind "cancel", or the latest "warn"
  int64_t cancel_at = 0;  // warn: idle_since + the cancel limit; cancel: 0
};

// How long after its cancel time a warning without a cancellation still stands. Past it the
// job must have used its GPUs again (the agent samples every few seconds), so it is not shown.
constexpr int64_t kStaleWarningGraceS = 10 * 60;

// The status of the job `job_id` that started at `start_time` (unix seconds; 0: not started),
// from `records` (any order, any jobs): its cancellation when there is one, else its latest
// warning while the job has not ended (`ended`) and its cancel time (idle_since +
// `cancel_after_s`) is less than kStaleWarningGraceS behind `now`. Records made before the job
// started belong to an earlier run of the same id and are ignored. nullopt: nothing to show.
std::optional<JobIdleStatus> IdleStatusOf(const std::vector<IdleRecord>& records, int64_t job_id,
                                          int64_t start_time, bool ended, int64_t cancel_after_s,
                                          int64_t now);

// The words for the REASON column and `bmas job show`, in local time (`utc_offset_s` east of
// UTC; a time on another day than `now` carries its date):
//   warn:   "idle GPUs since 14:02: cancelled at 16:02 unless used"
//   cancel: "cancelled: GPUs idle for 120 min"
std::string IdleNote(const JobIdleStatus& status, int64_t now, int64_t utc_offset_s);

// The `idle` member of a job in `bmas jobs --json`: "null", or {"kind", "since", "at",
// "cancel_at" (warn only), "wasted_gpu_hours", "reason", "note"}, times in unix seconds.
std::string IdleStatusJson(const std::optional<JobIdleStatus>& status, int64_t now,
                           int64_t utc_offset_s);

// The agent's reply to a user's request for their own idle records: {"idle": [{job, user,
// partition, kind, at, idle_since, gpus, wasted_gpu_seconds, reason}]}.
std::string IdleReplyJson(const std::vector<IdleRecord>& records);

// Reads IdleReplyJson's text back; InvalidArgument when it is not that shape.
Result<std::vector<IdleRecord>> ParseIdleReply(std::string_view text);

}  // namespace bmas
