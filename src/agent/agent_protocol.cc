#include "agent/agent_protocol.h"

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <set>

#include "common/json_object.h"

namespace bmas {
namespace {

// The deepest nesting of arrays and objects in `text`, counted outside strings; stops counting
// once it passes `limit`. Runs before the parser, so a deep input never reaches it.
int NestingDepth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// Whether `s` (no NUL inside) is UTF-8 as RapidJSON validates it. The parser checks the
// request's bytes, but an escape such as \udc55 (a lone surrogate) decodes to bytes that are
// not UTF-8, so a request could not be rendered back as it was read.
bool IsUtf8(const std::string& s) {
  rapidjson::StringStream in(s.c_str());
  rapidjson::StringBuffer sink;
  while (in.Tell() < s.size()) {
    if (!rapidjson::UTF8<>::Validate(in, sink)) return false;
  }
  return true;
}

// A string value; InvalidArgument for another type, a NUL inside (which execve would cut) or
// an escape that decodes to something other than UTF-8.
Result<std::string> Text(const rapidjson::Value& v, std::string_view name) {
  if (!v.IsString()) return InvalidArgument(fmt::format("{} is not a string", name));
  std::string s(v.GetString(), v.GetStringLength());
  if (s.find('\0') != std::string::npos)
    return InvalidArgument(fmt::format("{} holds a NUL", name));
  if (!IsUtf8(s)) return InvalidArgument(fmt::format("{} is not UTF-8", name));
  return s;
}

Result<std::vector<std::string>> StringList(const rapidjson::Value& v, const char* name) {
  if (!v.IsArray()) return InvalidArgument(fmt::format("{} is not an array", name));
  if (v.Size() > kMaxAgentListItems) {
    return InvalidArgument(fmt::format("{} has more than {} items", name, kMaxAgentListItems));
  }
  std::vector<std::string> out;
  for (const auto& item : v.GetArray()) {
    if (!item.IsString()) return InvalidArgument(fmt::format("{} holds a non-string", name));
    auto text = Text(item, name);
    if (!text) return text.error();
    out.push_back(std::move(*text));
  }
  return out;
}

}  // namespace

Result<AgentRequest> ParseAgentRequest(std::string_view text) {
  if (text.size() > kMaxAgentMessage) {
    return InvalidArgument(fmt::format("a request is at most {} bytes", kMaxAgentMessage));
  }
  if (NestingDepth(text, kMaxAgentDepth) > kMaxAgentDepth) {
    return InvalidArgument(fmt::format("a request nests at most {} deep", kMaxAgentDepth));
  }
  rapidjson::Document d;
  d.Parse<rapidjson::kParseIterativeFlag | rapidjson::kParseValidateEncodingFlag>(text.data(),
                                                                                  text.size());
  if (d.HasParseError() || !d.IsObject()) {
    return InvalidArgument("a request is a JSON object with op and job");
  }
  AgentRequest r;
  std::set<std::string_view> seen;
  bool has_op = false, has_job = false;
  for (const auto& m : d.GetObject()) {
    const std::string_view key(m.name.GetString(), m.name.GetStringLength());
    if (!seen.insert(key).second) return InvalidArgument(fmt::format("repeated key {}", key));
    const rapidjson::Value& v = m.value;
    if (key == "op" || key == "cwd" || key == "action" || key == "key_id") {
      auto text = Text(v, key);
      if (!text) return text.error();
      (key == "op" ? r.op : key == "cwd" ? r.cwd : key == "action" ? r.action : r.key_id) =
          std::move(*text);
      has_op = has_op || key == "op";
    } else if (key == "job") {
      if (!v.IsInt64()) return InvalidArgument("job is not an integer");
      r.job = v.GetInt64();
      has_job = true;
    } else if (key == "since") {
      if (!v.IsInt64()) return InvalidArgument("since is not an integer");
      r.since = v.GetInt64();
    } else if (key == "seconds") {
      // A number past double's range reads as infinite, which could not be rendered back.
      if (!v.IsNumber() || !std::isfinite(v.GetDouble()) || v.GetDouble() < 0) {
        return InvalidArgument("seconds is not a finite number of seconds, 0 or more");
      }
      r.seconds = v.GetDouble();
    } else if (key == "login") {
      if (!v.IsBool()) return InvalidArgument("login is not true or false");
      r.login = v.GetBool();
    } else if (key == "rows" || key == "cols") {
      if (!v.IsInt() || v.GetInt() < 1 || v.GetInt() > kMaxTerminalSide) {
        return InvalidArgument(
            fmt::format("{} is not a whole number from 1 to {}", key, kMaxTerminalSide));
      }
      (key == "rows" ? r.rows : r.cols) = v.GetInt();
    } else if (key == "argv" || key == "env") {
      auto list = StringList(v, key == "argv" ? "argv" : "env");
      if (!list) return list.error();
      (key == "argv" ? r.argv : r.env) = std::move(*list);
    } else {
      return InvalidArgument(fmt::format("unknown key {}", key));
    }
  }
  if (!has_op || !has_job) return InvalidArgument("a request is a JSON object with op and job");
  // A job's command runs as its batch script does: no login shell, no terminal of its own.
  if (r.job != 0 && (r.login || r.rows > 0 || r.cols > 0)) {
    return InvalidArgument("a job's command gets no login shell or terminal of its own");
  }
  return r;
}

std::string RenderAgentRequest(const AgentRequest& r) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  auto list = [&](const char* key, const std::vector<std::string>& items) {
    w.Key(key);
    w.StartArray();
    for (const std::string& s : items) w.String(s.c_str(), static_cast<unsigned>(s.size()));
    w.EndArray();
  };
  w.StartObject();
  w.Key("op");
  w.String(r.op.c_str(), static_cast<unsigned>(r.op.size()));
  Member(w, "job", r.job);
  if (!r.cwd.empty()) {
    w.Key("cwd");
    w.String(r.cwd.c_str(), static_cast<unsigned>(r.cwd.size()));
  }
  if (!r.argv.empty()) list("argv", r.argv);
  if (!r.env.empty()) list("env", r.env);
  if (r.op == "bound" || r.op == "released") {
    w.Key("seconds");
    w.Double(r.seconds);
  }
  if (r.login) {
    Member(w, "login", true);
  }
  if (r.rows > 0) {
    Member(w, "rows", r.rows);
  }
  if (r.cols > 0) {
    Member(w, "cols", r.cols);
  }
  if (!r.action.empty()) {
    w.Key("action");
    w.String(r.action.c_str(), static_cast<unsigned>(r.action.size()));
  }
  if (!r.key_id.empty()) {
    w.Key("key_id");
    w.String(r.key_id.c_str(), static_cast<unsigned>(r.key_id.size()));
  }
  if (r.op == "usage" || r.op == "idle") {
    Member(w, "since", r.since);
  }
  w.EndObject();
  return buf.GetString();
}

std::vector<std::string> FilterUserEnvironment(const std::vector<std::string>& env) {
  // glibc's list for AT_SECURE programs (sysdeps/generic/unsecvars.h), plus any LD_*.
  static constexpr std::array<std::string_view, 18> kDropped = {
      "GCONV_PATH",      "GETCONF_DIR",  "GLIBC_TUNABLES",   "HOSTALIASES",
      "LOCALDOMAIN",     "LOCPATH",      "MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST",
      "MALLOC_PERTURB_", "MALLOC_TRACE", "MALLOC_TOP_PAD_",  "MALLOC_MMAP_MAX_",
      "NIS_PATH",        "NLSPATH",      "RESOLV_HOST_CONF", "RES_OPTIONS",
      "TMPDIR",          "TZDIR"};
  std::vector<std::string> out;
  for (const std::string& e : env) {
    const size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    const std::string_view name(e.data(), eq);
    if (name.starts_with("LD_") || name.starts_with("MALLOC_")) continue;
    if (std::find(kDropped.begin(), kDropped.end(), name) != kDropped.end()) continue;
    out.push_back(e);
  }
  return out;
}

}  // namespace bmas
