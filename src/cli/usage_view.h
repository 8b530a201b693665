#pragma once

// What `bmas usage` prints, from the store's rows, and the JSON the agent sends a user who
// asks for their own usage (the store is root's). Pure: no store, no sockets.

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "store/store.h"

namespace bmas {

struct UsageView {
  std::vector<UsageRow> tokens;   // per (user, model, backend)
  std::vector<JobUsageRow> jobs;  // per user: finished Slurm jobs
};

// `bmas usage`'s output: with `per_user`, one row (or JSON object) per user with jobs,
// GPU-hours and tokens; else the token rows (a table, then the per-user table when there are
// jobs; or a JSON array of {user, model, backend, requests, prompt_tokens, completion_tokens}).
std::string FormatUsage(const UsageView& v, bool json, bool per_user);

// The agent's reply to a usage request: {"tokens": [...], "jobs": [{user, jobs, gpu_seconds}]}.
std::string UsageReplyJson(const UsageView& v);

// Reads UsageReplyJson's text back; InvalidArgument when it is not that shape.
Result<UsageView> ParseUsageReply(std::string_view text);

}  // namespace bmas
