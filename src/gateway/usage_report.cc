#include "gateway/usage_report.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <map>
#include <optional>

#include "common/json_object.h"

namespace bmas::gateway {

std::string UsageReportJson(const std::string& user, int64_t since,
                            const std::vector<UsageRow>& rows, const UserLimits& limits) {
  std::map<std::string, UsageRow> by_model;  // backends are operator data: summed over them
  UsageRow total;
  for (const UsageRow& row : rows) {
    UsageRow& m = by_model[row.model];
    for (UsageRow* sum : {&m, &total}) {
      sum->requests += row.requests;
      sum->prompt_tokens += row.prompt_tokens;
      sum->completion_tokens += row.completion_tokens;
    }
  }
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  auto counts = [&w](const UsageRow& r) {
    Member(w, "requests", r.requests);
    Member(w, "prompt_tokens", r.prompt_tokens);
    Member(w, "completion_tokens", r.completion_tokens);
    Member(w, "total_tokens", r.prompt_tokens + r.completion_tokens);
  };
  auto limit = [&w](const char* name, const std::optional<int64_t>& v) {
    w.Key(name);
    if (v)
      w.Int64(*v);
    else
      w.Null();
  };
  w.StartObject();
  Member(w, "object", "usage");
  w.Key("user");
  w.String(user.c_str(), static_cast<rapidjson::SizeType>(user.size()));
  Member(w, "since", since);
  counts(total);
  w.Key("models");
  w.StartArray();
  for (const auto& [model, r] : by_model) {
    w.StartObject();
    w.Key("model");
    w.String(model.c_str(), static_cast<rapidjson::SizeType>(model.size()));
    counts(r);
    w.EndObject();
  }
  w.EndArray();
  w.Key("limits");
  w.StartObject();
  w.Key("weight");
  w.Double(limits.weight);
  limit("rpm", limits.rpm);
  limit("tpm", limits.tpm);
  limit("tokens_per_day", limits.tokens_per_day);
  limit("max_concurrent", limits.max_concurrent);
  w.EndObject();
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace bmas::gateway
