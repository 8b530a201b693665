#include "cli/usage_view.h"

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <map>
#include <utility>

#include "cli/reply_read.h"
#include "common/json_object.h"

namespace bmas {
namespace {

using reply::Int;
using reply::Text;

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

// Per user: finished jobs, their GPU-hours and the GPU-hours idle-GPU policing saw wasted,
// beside the gateway's tokens, for users with any. A table, or a JSON array of {user, jobs,
// gpu_hours, gpu_seconds, wasted_gpu_hours, wasted_gpu_seconds, prompt_tokens,
// completion_tokens}.
std::string PerUserUsage(const UsageView& v, bool json) {
  struct Row {
    int64_t jobs = 0, gpu_seconds = 0, wasted_gpu_seconds = 0, prompt_tokens = 0,
            completion_tokens = 0;
  };
  std::map<std::string, Row> by_user;
  for (const UsageRow& u : v.tokens) {
    by_user[u.user].prompt_tokens += u.prompt_tokens;
    by_user[u.user].completion_tokens += u.completion_tokens;
  }
  for (const JobUsageRow& j : v.jobs) {
    by_user[j.user].jobs += j.jobs;
    by_user[j.user].gpu_seconds += j.gpu_seconds;
  }
  for (const auto& [user, seconds] : v.wasted_gpu_seconds) {
    by_user[user].wasted_gpu_seconds += seconds;
  }
  if (json) {
    return JsonObjectArray(by_user, [](JsonWriter& w, const auto& row) {
      const auto& [user, r] = row;
      Member(w, "user", user);
      Member(w, "jobs", r.jobs);
      w.Key("gpu_hours");
      w.Double(static_cast<double>(r.gpu_seconds) / 3600.0);
      Member(w, "gpu_seconds", r.gpu_seconds);
      w.Key("wasted_gpu_hours");
      w.Double(static_cast<double>(r.wasted_gpu_seconds) / 3600.0);
      Member(w, "wasted_gpu_seconds", r.wasted_gpu_seconds);
      Member(w, "prompt_tokens", r.prompt_tokens);
      Member(w, "completion_tokens", r.completion_tokens);
    }) + "\n";
  }
  std::string out = fmt::format("{:<16} {:>6} {:>10} {:>17} {:>14} {:>17}\n", "USER", "JOBS",
                                "GPU_HOURS", "WASTED_GPU_HOURS", "PROMPT_TOKENS",
                                "COMPLETION_TOKENS");
  for (const auto& [user, r] : by_user) {
    out += fmt::format("{:<16} {:>6} {:>10.3f} {:>17.3f} {:>14} {:>17}\n", user, r.jobs,
                       static_cast<double>(r.gpu_seconds) / 3600.0,
                       static_cast<double>(r.wasted_gpu_seconds) / 3600.0, r.prompt_tokens,
                       r.completion_tokens);
  }
  return out;
}

void TokenRowMembers(Writer& w, const UsageRow& u) {
  Member(w, "user", u.user);
  Member(w, "model", u.model);
  Member(w, "backend", u.backend);
  Member(w, "requests", u.requests);
  Member(w, "prompt_tokens", u.prompt_tokens);
  Member(w, "completion_tokens", u.completion_tokens);
}

}  // namespace

std::map<std::string, int64_t> WastedGpuSecondsByUser(const std::vector<IdleRecord>& records) {
  std::map<std::pair<std::string, int64_t>, int64_t> by_job;  // (user, job): the largest
  for (const IdleRecord& r : records) {
    int64_t& most = by_job[{r.user, r.job}];
    most = std::max(most, r.wasted_gpu_seconds);
  }
  std::map<std::string, int64_t> by_user;
  for (const auto& [key, seconds] : by_job) by_user[key.first] += seconds;
  return by_user;
}

Result<UsageView> ReadUsageView(Store& store, const std::optional<std::string>& user,
                                int64_t since) {
  UsageView view;
  auto rows = store.QueryUsage(user, since);
  if (!rows) return rows.error();
  auto jobs = store.QueryJobUsage(user, since);
  if (!jobs) return jobs.error();
  auto idle = store.QueryIdle(user, since);
  if (!idle) return idle.error();
  view.tokens = std::move(*rows);
  view.jobs = std::move(*jobs);
  view.wasted_gpu_seconds = WastedGpuSecondsByUser(*idle);
  return view;
}

std::string FormatUsage(const UsageView& v, bool json, bool per_user) {
  if (per_user) return PerUserUsage(v, json);
  if (json) return JsonObjectArray(v.tokens, TokenRowMembers) + "\n";
  std::string out = fmt::format("{:<16} {:<36} {:<28} {:>9} {:>14} {:>17}\n", "USER", "MODEL",
                                "BACKEND", "REQUESTS", "PROMPT_TOKENS", "COMPLETION_TOKENS");
  for (const UsageRow& u : v.tokens) {
    out += fmt::format("{:<16} {:<36} {:<28} {:>9} {:>14} {:>17}\n", u.user, u.model, u.backend,
                       u.requests, u.prompt_tokens, u.completion_tokens);
  }
  if (!v.jobs.empty() || !v.wasted_gpu_seconds.empty()) out += "\n" + PerUserUsage(v, false);
  return out;
}

std::string UsageReplyJson(const UsageView& v) {
  return JsonObject([&](JsonWriter& w) {
    ObjectsMember(w, "tokens", v.tokens, [&](const UsageRow& u) { TokenRowMembers(w, u); });
    ObjectsMember(w, "jobs", v.jobs, [&](const JobUsageRow& j) {
      Member(w, "user", j.user);
      Member(w, "jobs", j.jobs);
      Member(w, "gpu_seconds", j.gpu_seconds);
    });
    ObjectsMember(w, "wasted", v.wasted_gpu_seconds, [&](const auto& row) {
      Member(w, "user", row.first);
      Member(w, "wasted_gpu_seconds", row.second);
    });
  });
}

Result<UsageView> ParseUsageReply(std::string_view text) {
  rapidjson::Document d;
  d.Parse(text.data(), text.size());
  const Error bad = InvalidArgument(
      fmt::format("the agent's usage reply is not {{tokens, jobs}}: {}", text.substr(0, 200)));
  if (d.HasParseError() || !d.IsObject() || !d.HasMember("tokens") || !d["tokens"].IsArray() ||
      !d.HasMember("jobs") || !d["jobs"].IsArray()) {
    return bad;
  }
  UsageView v;
  for (const auto& o : d["tokens"].GetArray()) {
    UsageRow u;
    if (!o.IsObject() || !Text(o, "user", &u.user) || !Text(o, "model", &u.model) ||
        !Text(o, "backend", &u.backend) || !Int(o, "requests", &u.requests) ||
        !Int(o, "prompt_tokens", &u.prompt_tokens) ||
        !Int(o, "completion_tokens", &u.completion_tokens)) {
      return bad;
    }
    v.tokens.push_back(std::move(u));
  }
  for (const auto& o : d["jobs"].GetArray()) {
    JobUsageRow j;
    if (!o.IsObject() || !Text(o, "user", &j.user) || !Int(o, "jobs", &j.jobs) ||
        !Int(o, "gpu_seconds", &j.gpu_seconds)) {
      return bad;
    }
    v.jobs.push_back(std::move(j));
  }
  // An agent older than wasted GPU-hours sends none.
  if (d.HasMember("wasted")) {
    if (!d["wasted"].IsArray()) return bad;
    for (const auto& o : d["wasted"].GetArray()) {
      std::string user;
      int64_t seconds = 0;
      if (!o.IsObject() || !Text(o, "user", &user) || !Int(o, "wasted_gpu_seconds", &seconds)) {
        return bad;
      }
      v.wasted_gpu_seconds[user] += seconds;
    }
  }
  return v;
}

}  // namespace bmas
