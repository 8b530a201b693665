#include "cli/idle_view.h"

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <ctime>

#include "cli/reply_read.h"
#include "common/json_object.h"

namespace bmas {
namespace {

using reply::Int;
using reply::Text;

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

int64_t LocalDay(int64_t unix_seconds, int64_t utc_offset_s) {
  const int64_t local = unix_seconds + utc_offset_s;
  return local >= 0 ? local / 86400 : (local - 86399) / 86400;
}

// "14:02" in local time, or "2025-03-04 14:02" when that is not `now`'s local day.
std::string ClockTime(int64_t unix_seconds, int64_t now, int64_t utc_offset_s) {
  const std::time_t local = static_cast<std::time_t>(unix_seconds + utc_offset_s);
  std::tm tm{};
  gmtime_r(&local, &tm);
  char buf[32];
  const bool same_day = LocalDay(unix_seconds, utc_offset_s) == LocalDay(now, utc_offset_s);
  std::strftime(buf, sizeof buf, same_day ? "%H:%M" : "%Y-%m-%d %H:%M", &tm);
  return buf;
}

void Str(Writer& w, const char* key, const std::string& v) {
  w.Key(key);
  w.String(v.c_str(), static_cast<rapidjson::SizeType>(v.size()));
}

void Int(Writer& w, const char* key, int64_t v) {
  w.Key(key);
  w.Int64(v);
}

}  // namespace

std::optional<JobIdleStatus> IdleStatusOf(const std::vector<IdleRecord>& records, int64_t job_id,
                                          int64_t start_time, bool ended, int64_t cancel_after_s,
                                          int64_t now) {
  const IdleRecord* cancel = nullptr;
  const IdleRecord* warn = nullptr;
  for (const IdleRecord& r : records) {
    if (r.job != job_id || (start_time > 0 && r.at < start_time)) continue;
    if (r.kind == "cancel" && (cancel == nullptr || r.at > cancel->at)) cancel = &r;
    if (r.kind == "warn" && (warn == nullptr || r.at > warn->at)) warn = &r;
  }
  if (cancel != nullptr) return JobIdleStatus{*cancel, 0};
  if (warn == nullptr || ended) return std::nullopt;
  const int64_t cancel_at = warn->idle_since + cancel_after_s;
  if (now > cancel_at + kStaleWarningGraceS) return std::nullopt;
  return JobIdleStatus{*warn, cancel_at};
}

std::string IdleNote(const JobIdleStatus& s, int64_t now, int64_t utc_offset_s) {
  if (s.record.kind == "cancel") {
    const int64_t idle_s = std::max<int64_t>(0, s.record.at - s.record.idle_since);
    return fmt::format("cancelled: GPUs idle for {} min", (idle_s + 30) / 60);
  }
  return fmt::format("idle GPUs since {}: cancelled at {} unless used",
                     ClockTime(s.record.idle_since, now, utc_offset_s),
                     ClockTime(s.cancel_at, now, utc_offset_s));
}

std::string IdleStatusJson(const std::optional<JobIdleStatus>& status, int64_t now,
                           int64_t utc_offset_s) {
  if (!status) return "null";
  const IdleRecord& r = status->record;
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  Str(w, "kind", r.kind);
  Int(w, "since", r.idle_since);
  Int(w, "at", r.at);
  if (r.kind == "warn") Int(w, "cancel_at", status->cancel_at);
  w.Key("wasted_gpu_hours");
  w.Double(static_cast<double>(r.wasted_gpu_seconds) / 3600.0);
  Str(w, "reason", r.reason);
  Str(w, "note", IdleNote(*status, now, utc_offset_s));
  w.EndObject();
  return buf.GetString();
}

std::string IdleReplyJson(const std::vector<IdleRecord>& records) {
  return JsonObject([&](JsonWriter& w) {
    ObjectsMember(w, "idle", records, [&](const IdleRecord& r) {
      Int(w, "job", r.job);
      Str(w, "user", r.user);
      Str(w, "partition", r.partition);
      Str(w, "kind", r.kind);
      Int(w, "at", r.at);
      Int(w, "idle_since", r.idle_since);
      Int(w, "gpus", r.gpus);
      Int(w, "wasted_gpu_seconds", r.wasted_gpu_seconds);
      Str(w, "reason", r.reason);
    });
  });
}

Result<std::vector<IdleRecord>> ParseIdleReply(std::string_view text) {
  rapidjson::Document d;
  d.Parse(text.data(), text.size());
  const Error bad = InvalidArgument(
      fmt::format("the agent's idle reply is not {{idle: [...]}}: {}", text.substr(0, 200)));
  if (d.HasParseError() || !d.IsObject() || !d.HasMember("idle") || !d["idle"].IsArray()) {
    return bad;
  }
  std::vector<IdleRecord> records;
  for (const auto& o : d["idle"].GetArray()) {
    IdleRecord r;
    int64_t gpus = 0;
    if (!o.IsObject() || !Int(o, "job", &r.job) || !Text(o, "user", &r.user) ||
        !Text(o, "partition", &r.partition) || !Text(o, "kind", &r.kind) ||
        !Int(o, "at", &r.at) || !Int(o, "idle_since", &r.idle_since) ||
        !Int(o, "gpus", &gpus) || !Int(o, "wasted_gpu_seconds", &r.wasted_gpu_seconds) ||
        !Text(o, "reason", &r.reason)) {
      return bad;
    }
    r.gpus = static_cast<int>(gpus);
    records.push_back(std::move(r));
  }
  return records;
}

}  // namespace bmas
