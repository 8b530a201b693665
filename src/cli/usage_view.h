#pragma once

// What `bmas usage` prints, from the store's rows, and the JSON the agent sends a user who
// asks for their own usage (the store is root's). Pure but for ReadUsageView, which reads the
// rows from a store; no sockets.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "store/store.h"

namespace bmas {

struct UsageView {
  std::vector<UsageRow> tokens;   // per (user, model, backend)
  std::vector<JobUsageRow> jobs;  // per user: finished Slurm jobs
  // Per user: GPU-seconds idle-GPU policing saw wasted (WastedGpuSecondsByUser).
  std::map<std::string, int64_t> wasted_gpu_seconds;
};

// Per user, the GPU-seconds their jobs left idle, from idle-GPU policing's records: per job
// the largest wasted_gpu_seconds of its records (a warning and then a cancellation of the
// same job count once, as the cancellation's), summed over the user's jobs.
std::map<std::string, int64_t> WastedGpuSecondsByUser(const std::vector<IdleRecord>& records);

// The rows `bmas usage` shows from `since` (unix seconds), of `user` or of all: root's `bmas
// usage`, and the agent's answer to a user who asks for their own.
Result<UsageView> ReadUsageView(Store& store, const std::optional<std::string>& user,
                                int64_t since);

// `bmas usage`'s output: with `per_user`, one row (or JSON object) per user with jobs,
// GPU-hours, wasted GPU-hours and tokens; else the token rows (a table, then the per-user table
// when there are jobs or wasted GPU-hours; or a JSON array of {user, model, backend, requests,
// prompt_tokens, completion_tokens}).
std::string FormatUsage(const UsageView& v, bool json, bool per_user);

// The agent's reply to a usage request: {"tokens": [...], "jobs": [{user, jobs, gpu_seconds}],
// "wasted": [{user, wasted_gpu_seconds}]}.
std::string UsageReplyJson(const UsageView& v);

// Reads UsageReplyJson's text back (an older agent's, without "wasted", too); InvalidArgument
// when it is not that shape.
Result<UsageView> ParseUsageReply(std::string_view text);

}  // namespace bmas
