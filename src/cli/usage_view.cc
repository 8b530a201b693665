#include "cli/usage_view.h"

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <map>

namespace bmas {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

// Per user: finished jobs and their GPU-hours beside the gateway's tokens, for users with
// either. A table, or a JSON array of {user, jobs, gpu_hours, gpu_seconds, prompt_tokens,
// completion_tokens}.
std::string PerUserUsage(const std::vector<UsageRow>& tokens, const std::vector<JobUsageRow>& jobs,
                         bool json) {
  struct Row {
    int64_t jobs = 0, gpu_seconds = 0, prompt_tokens = 0, completion_tokens = 0;
  };
  std::map<std::string, Row> by_user;
  for (const UsageRow& u : tokens) {
    by_user[u.user].prompt_tokens += u.prompt_tokens;
    by_user[u.user].completion_tokens += u.completion_tokens;
  }
  for (const JobUsageRow& j : jobs) {
    by_user[j.user].jobs += j.jobs;
    by_user[j.user].gpu_seconds += j.gpu_seconds;
  }
  if (json) {
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartArray();
    for (const auto& [user, r] : by_user) {
      w.StartObject();
      w.Key("user");
      w.String(user.c_str());
      w.Key("jobs");
      w.Int64(r.jobs);
      w.Key("gpu_hours");
      w.Double(static_cast<double>(r.gpu_seconds) / 3600.0);
      w.Key("gpu_seconds");
      w.Int64(r.gpu_seconds);
      w.Key("prompt_tokens");
      w.Int64(r.prompt_tokens);
      w.Key("completion_tokens");
      w.Int64(r.completion_tokens);
      w.EndObject();
    }
    w.EndArray();
    return std::string(buf.GetString()) + "\n";
  }
  std::string out = fmt::format("{:<16} {:>6} {:>10} {:>14} {:>17}\n", "USER", "JOBS",
                                "GPU_HOURS", "PROMPT_TOKENS", "COMPLETION_TOKENS");
  for (const auto& [user, r] : by_user) {
    out += fmt::format("{:<16} {:>6} {:>10.3f} {:>14} {:>17}\n", user, r.jobs,
                       static_cast<double>(r.gpu_seconds) / 3600.0, r.prompt_tokens,
                       r.completion_tokens);
  }
  return out;
}

void TokenRowJson(Writer& w, const UsageRow& u) {
  w.StartObject();
  w.Key("user");
  w.String(u.user.c_str());
  w.Key("model");
  w.String(u.model.c_str());
  w.Key("backend");
  w.String(u.backend.c_str());
  w.Key("requests");
  w.Int64(u.requests);
  w.Key("prompt_tokens");
  w.Int64(u.prompt_tokens);
  w.Key("completion_tokens");
  w.Int64(u.completion_tokens);
  w.EndObject();
}

bool Int(const rapidjson::Value& o, const char* key, int64_t* out) {
  if (!o.HasMember(key) || !o[key].IsInt64()) return false;
  *out = o[key].GetInt64();
  return true;
}

bool Text(const rapidjson::Value& o, const char* key, std::string* out) {
  if (!o.HasMember(key) || !o[key].IsString()) return false;
  *out = std::string(o[key].GetString(), o[key].GetStringLength());
  return true;
}

}  // namespace

std::string FormatUsage(const UsageView& v, bool json, bool per_user) {
  if (per_user) return PerUserUsage(v.tokens, v.jobs, json);
  if (json) {
    rapidjson::StringBuffer buf;
    Writer w(buf);
    w.StartArray();
    for (const UsageRow& u : v.tokens) TokenRowJson(w, u);
    w.EndArray();
    return std::string(buf.GetString()) + "\n";
  }
  std::string out = fmt::format("{:<16} {:<36} {:<28} {:>9} {:>14} {:>17}\n", "USER", "MODEL",
                                "BACKEND", "REQUESTS", "PROMPT_TOKENS", "COMPLETION_TOKENS");
  for (const UsageRow& u : v.tokens) {
    out += fmt::format("{:<16} {:<36} {:<28} {:>9} {:>14} {:>17}\n", u.user, u.model, u.backend,
                       u.requests, u.prompt_tokens, u.completion_tokens);
  }
  if (!v.jobs.empty()) out += "\n" + PerUserUsage(v.tokens, v.jobs, false);
  return out;
}

std::string UsageReplyJson(const UsageView& v) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("tokens");
  w.StartArray();
  for (const UsageRow& u : v.tokens) TokenRowJson(w, u);
  w.EndArray();
  w.Key("jobs");
  w.StartArray();
  for (const JobUsageRow& j : v.jobs) {
    w.StartObject();
    w.Key("user");
    w.String(j.user.c_str());
    w.Key("jobs");
    w.Int64(j.jobs);
    w.Key("gpu_seconds");
    w.Int64(j.gpu_seconds);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return buf.GetString();
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
  return v;
}

}  // namespace bmas
