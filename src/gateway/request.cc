#include "gateway/request.h"

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <string_view>
#include <vector>

namespace bmas::gateway {

namespace {
// Enough for cache_aware routing to hash a long system prompt and the question after it.
constexpr size_t kLeadBytes = 16384;

// A message's role and content: routing's lead and the prompt's size.
void AddMessage(std::string_view role, std::string_view content, CompletionFields& f) {
  if (!role.empty()) f.lead.append(role).append("\n");
  f.prompt_chars += static_cast<int64_t>(content.size());
  if (f.lead.size() < kLeadBytes) f.lead.append(content.substr(0, kLeadBytes)).append("\n");
}

// Messages {"role", "content"}; content is a string or a list of parts {"type", "text"}.
void AddMessages(simdjson::dom::array messages, CompletionFields& f) {
  for (simdjson::dom::element m : messages) {
    std::string_view role, content;
    simdjson::dom::array parts;
    if (m["role"].get_string().get(role)) role = {};
    if (!m["content"].get_string().get(content)) {
      AddMessage(role, content, f);
    } else if (!m["content"].get_array().get(parts)) {
      std::string text;
      for (simdjson::dom::element part : parts) {
        if (!part["text"].get_string().get(content)) text.append(content);
      }
      AddMessage(role, text, f);
    } else if (!role.empty()) {
      f.lead.append(role).append("\n");
    }
  }
}

// The least key (in byte order) that `obj` gives more than once, or nullopt. A request has a
// handful of keys: those are compared pairwise on the stack, allocating nothing.
std::optional<std::string_view> RepeatedKey(simdjson::dom::object obj) {
  constexpr size_t kFew = 16;
  std::optional<std::string_view> least;
  if (obj.size() <= kFew) {
    std::array<std::string_view, kFew> seen;
    size_t n = 0;
    for (auto field : obj) {
      if (std::find(seen.begin(), seen.begin() + n, field.key) != seen.begin() + n) {
        if (!least || field.key < *least) least = field.key;
      }
      seen[n++] = field.key;
    }
    return least;
  }
  std::vector<std::string_view> keys;
  keys.reserve(obj.size());
  for (auto field : obj) keys.push_back(field.key);
  std::sort(keys.begin(), keys.end());
  if (auto dup = std::adjacent_find(keys.begin(), keys.end()); dup != keys.end()) least = *dup;
  return least;
}

// The members ParseCompletionBody reads, found in one pass over the request's object (each
// look-up by key is a pass of its own); a member the request lacks is NO_SUCH_FIELD.
struct Members {
  using Member = simdjson::simdjson_result<simdjson::dom::element>;
  Member model{simdjson::NO_SUCH_FIELD}, stream{simdjson::NO_SUCH_FIELD},
      stop{simdjson::NO_SUCH_FIELD}, stream_options{simdjson::NO_SUCH_FIELD},
      prompt{simdjson::NO_SUCH_FIELD}, messages{simdjson::NO_SUCH_FIELD},
      instructions{simdjson::NO_SUCH_FIELD}, input{simdjson::NO_SUCH_FIELD};
  // max_tokens, max_completion_tokens, max_output_tokens: the first that is positive counts.
  std::array<Member, 3> max_tokens{Member{simdjson::NO_SUCH_FIELD}, Member{simdjson::NO_SUCH_FIELD},
                                   Member{simdjson::NO_SUCH_FIELD}};

  explicit Members(simdjson::dom::object obj) {
    for (auto [key, value] : obj) {
      Member* member = key == "model"                   ? &model
                       : key == "prompt"                ? &prompt
                       : key == "messages"              ? &messages
                       : key == "stream"                ? &stream
                       : key == "max_tokens"            ? &max_tokens[0]
                       : key == "max_completion_tokens" ? &max_tokens[1]
                       : key == "max_output_tokens"     ? &max_tokens[2]
                       : key == "stop"                  ? &stop
                       : key == "stream_options"        ? &stream_options
                       : key == "input"                 ? &input
                       : key == "instructions"          ? &instructions
                                                        : nullptr;
      if (member != nullptr && member->error()) *member = Member(simdjson::dom::element(value));
    }
  }
};

}  // namespace

Result<CompletionFields> ParseCompletionBody(simdjson::dom::parser& parser, std::string_view body) {
  simdjson::dom::element doc;
  if (auto err = parser.parse(body.data(), body.size()).get(doc)) {
    return InvalidArgument(
        fmt::format("the request body is not valid JSON: {}", simdjson::error_message(err)));
  }
  simdjson::dom::object obj;
  if (doc.get_object().get(obj)) return InvalidArgument("the request body must be a JSON object");
  // simdjson keeps every copy of a repeated key; a lookup finds the first.
  if (std::optional<std::string_view> dup = RepeatedKey(obj)) {
    return InvalidArgument(fmt::format("the request body gives the key '{}' more than once", *dup),
                           std::string(*dup));
  }

  CompletionFields f;
  Members m(obj);
  std::string_view model;
  if (m.model.get_string().get(model)) {
    return InvalidArgument("'model' is required and must be a string", "model");
  }
  f.model = std::string(model);
  simdjson::dom::element e;
  if (!m.stream.get(e) && !e.is_null()) {
    bool stream;
    if (e.get_bool().get(stream)) return InvalidArgument("'stream' must be a boolean", "stream");
    f.stream = stream;
  }
  if (!m.stop.get(e) && !e.is_null() && !e.is_string()) {
    simdjson::dom::array stops;
    if (e.get_array().get(stops)) {
      return InvalidArgument("'stop' must be a string or an array of strings", "stop");
    }
    if (stops.size() > kMaxStopStrings) {
      return InvalidArgument(fmt::format("'stop' may hold at most {} strings; {} were given",
                                         kMaxStopStrings, stops.size()),
                             "stop");
    }
    for (simdjson::dom::element s : stops) {
      if (!s.is_string()) {
        return InvalidArgument("'stop' must be a string or an array of strings", "stop");
      }
    }
  }
  for (Members::Member& max_tokens : m.max_tokens) {
    int64_t n = 0;
    if (!max_tokens.get_int64().get(n) && n > 0) {
      f.max_tokens = n;
      break;
    }
  }
  bool include_usage = false;
  if (!m.stream_options["include_usage"].get_bool().get(include_usage)) {
    f.client_wants_usage = include_usage;
  }
  std::string_view text;
  simdjson::dom::array messages;
  if (!m.prompt.get_string().get(text)) {
    f.lead = std::string(text.substr(0, kLeadBytes));
    f.prompt_chars = static_cast<int64_t>(text.size());
  } else if (!m.messages.get_array().get(messages)) {
    AddMessages(messages, f);
  } else {
    // The Responses API: instructions, then input (one user message, or messages).
    if (!m.instructions.get_string().get(text)) AddMessage("system", text, f);
    if (!m.input.get_string().get(text)) {
      AddMessage("user", text, f);
    } else if (!m.input.get_array().get(messages)) {
      AddMessages(messages, f);
    }
  }
  return f;
}

void CharsPerToken::Learn(int64_t chars, int64_t tokens) {
  if (chars <= 0 || tokens <= 0) return;
  chars_ += static_cast<double>(chars);
  tokens_ += static_cast<double>(tokens);
  // Halved now and then: the sums stay exact in a double, and recent replies weigh more.
  if (tokens_ > 1e12) {
    chars_ /= 2;
    tokens_ /= 2;
  }
}

int64_t CharsPerToken::Estimate(int64_t chars) const {
  return static_cast<int64_t>(
             std::ceil(static_cast<double>(std::max<int64_t>(chars, 0)) / ratio())) +
         1;
}

std::string WithIncludeUsage(std::string_view body) {
  rapidjson::Document d;
  d.Parse(body.data(), body.size());
  if (d.HasParseError() || !d.IsObject()) return std::string(body);
  auto& alloc = d.GetAllocator();
  // EraseMember keeps the other members in order (RemoveMember moves the last one into the gap).
  auto so = d.FindMember("stream_options");
  if (so != d.MemberEnd() && !so->value.IsObject()) {
    d.EraseMember(so);
    so = d.MemberEnd();
  }
  if (so == d.MemberEnd()) {
    d.AddMember("stream_options", rapidjson::Value(rapidjson::kObjectType), alloc);
    so = d.FindMember("stream_options");
  }
  auto usage = so->value.FindMember("include_usage");
  if (usage != so->value.MemberEnd()) {
    usage->value.SetBool(true);
  } else {
    so->value.AddMember("include_usage", true, alloc);
  }
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  d.Accept(w);
  return std::string(buf.GetString(), buf.GetSize());
}

namespace {

// `name;dur=` and the milliseconds with three decimals, from whole microseconds in integers:
// std::to_chars of a double with a precision was half of the header's cost, and fmt's
// format-string parse more still (G1's profiles).
char* AppendDuration(char* out, std::string_view name, double seconds) {
  const double us = std::round(std::clamp(seconds, 0.0, 1e9) * 1e6);
  const uint64_t n = static_cast<uint64_t>(us);
  out = std::copy(name.begin(), name.end(), out);
  out = std::copy_n(";dur=", 5, out);
  out = std::to_chars(out, out + 24, n / 1000).ptr;
  const unsigned frac = static_cast<unsigned>(n % 1000);
  *out++ = '.';
  *out++ = static_cast<char>('0' + frac / 100);
  *out++ = static_cast<char>('0' + frac / 10 % 10);
  *out++ = static_cast<char>('0' + frac % 10);
  return out;
}

}  // namespace

ServerTimingText ServerTiming(double total_s, double queue_s, double upstream_s) {
  const double gateway_s = std::max(0.0, total_s - queue_s - upstream_s);
  ServerTimingText text;
  char* out = AppendDuration(text.data.data(), "gw", gateway_s);
  out = std::copy_n(", ", 2, out);
  out = AppendDuration(out, "queue", queue_s);
  out = std::copy_n(", ", 2, out);
  out = AppendDuration(out, "upstream", upstream_s);
  text.size = static_cast<size_t>(out - text.data.data());
  return text;
}

}  // namespace bmas::gateway
