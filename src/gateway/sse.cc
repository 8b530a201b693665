#include "gateway/sse.h"

#include <charconv>
#include <cstring>

#include <simdjson.h>

namespace bmas::gateway {

void SseSplitter::Append(std::string_view bytes) {
  if (overflowed_) return;
  if (Rest().size() + bytes.size() > kMaxEventBytes && Rest().find("\n\n") == std::string::npos &&
      bytes.find("\n\n") == std::string::npos) {
    overflowed_ = true;
    buffer_.clear();
    consumed_ = 0;
    return;
  }
  buffer_.append(bytes);
}

std::string_view SseSplitter::Next() {
  size_t end = buffer_.find("\n\n", consumed_);
  if (end == std::string::npos) {
    // Compact what was consumed, keeping the partial event.
    if (consumed_ > 0) {
      buffer_.erase(0, consumed_);
      consumed_ = 0;
    }
    return {};
  }
  std::string_view event = std::string_view(buffer_).substr(consumed_, end + 2 - consumed_);
  consumed_ = end + 2;
  return event;
}

namespace {

// Scratch kept per thread from one answer to the next, so that a read allocates nothing;
// dropped after a document past 1 MiB, so that it does not stay.
constexpr size_t kKeepScratch = size_t{1} << 20;
thread_local std::string padded;
thread_local simdjson::ondemand::parser answer_parser;

// Copies `json` into `padded` with simdjson's padding after it.
void Pad(std::string_view json) {
  if (padded.capacity() < json.size() + simdjson::SIMDJSON_PADDING) {
    padded.reserve(json.size() + simdjson::SIMDJSON_PADDING);
  }
  padded.assign(json);
}

bool IsJsonSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view TrimJsonSpace(std::string_view s) {
  while (!s.empty() && IsJsonSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsJsonSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Where the root's "usage" object starts when it is the root's last member, as in the whole
// answers and usage chunks of vLLM and bmas engine: `...,"usage":{...}}`; npos otherwise. A
// quote after ',' or '{' cannot be inside a string (it would be escaped) nor close one (a key
// cannot follow a string), so `,"usage":` there is a key; the caller checks that one object
// follows it, which the last brace then closes: the root's.
size_t TrailingUsage(std::string_view json) {
  constexpr std::string_view kKey = "\"usage\"";
  json = TrimJsonSpace(json);
  if (!json.ends_with('}') || json.size() < kKey.size() + 2) return std::string_view::npos;
  // Back from the end, quote by quote (memrchr finds each).
  size_t key = json.size() - kKey.size();
  while (const void* quote = memrchr(json.data(), '"', key)) {
    key = static_cast<const char*>(quote) - json.data();
    if (json.substr(key, kKey.size()) == kKey) break;
  }
  if (json.substr(key, kKey.size()) != kKey) return std::string_view::npos;
  const std::string_view before = TrimJsonSpace(json.substr(0, key));
  if (!before.ends_with(',') && !before.ends_with('{')) return std::string_view::npos;
  std::string_view value = TrimJsonSpace(json.substr(key + kKey.size()));
  if (!value.starts_with(':')) return std::string_view::npos;
  value = TrimJsonSpace(value.substr(1));
  return value.starts_with('{') ? static_cast<size_t>(value.data() - json.data())
                                : std::string_view::npos;
}

// The index after the string that starts at text[i] (a quote); npos if it does not end.
size_t SkipString(std::string_view text, size_t i) {
  while (const void* quote = memchr(text.data() + i + 1, '"', text.size() - i - 1)) {
    i = static_cast<const char*>(quote) - text.data();
    size_t backslashes = 0;
    while (text[i - 1 - backslashes] == '\\') ++backslashes;
    if (backslashes % 2 == 0) return i + 1;  // not escaped
  }
  return std::string_view::npos;
}

size_t SkipSpace(std::string_view text, size_t i) {
  while (i < text.size() && IsJsonSpace(text[i])) ++i;
  return i;
}

// ReadUsage of `text`, an object and the root's closing brace after it, in one pass over its
// bytes: its members that are token counts, the nesting of the rest. `parsed` false when the
// object does not end right before the root's brace, or a count is not an integer.
std::optional<TokenUsage> ScanUsage(std::string_view text, bool& parsed) {
  parsed = false;
  std::optional<int64_t> prompt, completion, input, output;
  int depth = 0;
  size_t i = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      break;
    } else if (c == '"') {
      const size_t end = SkipString(text, i);
      if (end == std::string_view::npos) return std::nullopt;
      const std::string_view name = text.substr(i + 1, end - i - 2);
      i = end - 1;
      std::optional<int64_t>* count = depth != 1              ? nullptr
                                      : name == "prompt_tokens" ? &prompt
                                      : name == "completion_tokens" ? &completion
                                      : name == "input_tokens"      ? &input
                                      : name == "output_tokens"     ? &output
                                                                    : nullptr;
      size_t colon = SkipSpace(text, end);
      if (count == nullptr || colon >= text.size() || text[colon] != ':') continue;  // a value
      const size_t digits = SkipSpace(text, colon + 1);
      int64_t n = 0;
      const auto [next, ec] = std::from_chars(text.data() + digits, text.data() + text.size(), n);
      const size_t after = SkipSpace(text, next - text.data());
      if (ec != std::errc() || after >= text.size() || (text[after] != ',' && text[after] != '}')) {
        return std::nullopt;  // not an integer: the whole parse decides
      }
      if (!*count) *count = n;  // the first of repeated keys, as simdjson's find_field
      i = after - 1;
    }
  }
  // The usage object's brace, then only the root's.
  if (depth != 0 || i >= text.size() || text[i] != '}' || TrimJsonSpace(text.substr(i + 1)) != "}") {
    return std::nullopt;
  }
  parsed = true;
  if (prompt && completion) return TokenUsage{*prompt, *completion};
  if (input && output) return TokenUsage{*input, *output};
  return std::nullopt;
}

}  // namespace

std::optional<TokenUsage> ReadUsage(std::string_view json) {
  bool parsed = false;
  const size_t trailing = TrailingUsage(json);
  if (trailing != std::string_view::npos) {
    std::optional<TokenUsage> u = ScanUsage(TrimJsonSpace(json).substr(trailing), parsed);
    if (parsed) return u;
  }
  return ReadUsageOnDemand(json);
}

std::optional<TokenUsage> ReadUsageOnDemand(std::string_view json) {
  struct Shrink {
    ~Shrink() {
      if (padded.capacity() > kKeepScratch) std::string().swap(padded);
      if (answer_parser.capacity() > kKeepScratch) answer_parser = simdjson::ondemand::parser();
    }
  } shrink;
  // On demand: only the path to the usage object is parsed, not a whole DOM of the answer (its
  // choices and their text); stage 1 still checks the whole text's strings and UTF-8.
  Pad(json);

  simdjson::ondemand::document doc;
  simdjson::ondemand::object root, usage, response;
  if (answer_parser.iterate(padded.data(), padded.size(), padded.capacity()).get(doc) ||
      doc.get_object().get(root)) {
    return std::nullopt;
  }
  if (root.find_field_unordered("usage").get_object().get(usage) &&
      (root.find_field_unordered("response").get_object().get(response) ||
       response.find_field_unordered("usage").get_object().get(usage))) {
    return std::nullopt;
  }
  TokenUsage u;
  auto read = [&](std::string_view prompt, std::string_view completion) {
    return !usage.find_field_unordered(prompt).get_int64().get(u.prompt_tokens) &&
           !usage.find_field_unordered(completion).get_int64().get(u.completion_tokens);
  };
  if (read("prompt_tokens", "completion_tokens") || read("input_tokens", "output_tokens")) return u;
  return std::nullopt;
}

std::string_view SseEventData(std::string_view event) {
  constexpr std::string_view kEvent = "event: ", kData = "data: ";
  if (event.starts_with(kEvent)) {
    const size_t line = event.find('\n');
    event = line == std::string_view::npos ? std::string_view() : event.substr(line + 1);
  }
  if (!event.starts_with(kData)) return {};
  std::string_view data = event.substr(kData.size());
  while (!data.empty() && (data.back() == '\n' || data.back() == '\r')) data.remove_suffix(1);
  return data;
}

SseEventKind ClassifySseEvent(simdjson::dom::parser& parser, std::string_view event,
                              std::string* text_out) {
  const std::string_view data = SseEventData(event);
  if (data.empty()) return SseEventKind::kOther;
  if (data == "[DONE]") return SseEventKind::kDone;
  simdjson::dom::element doc;
  if (parser.parse(data.data(), data.size()).get(doc)) return SseEventKind::kOther;
  std::string_view type;
  if (!doc["type"].get_string().get(type) && type.starts_with("response.")) {
    // A Responses stream's typed events: one delta per token, as vLLM streams them.
    if (type == "response.completed" || type == "response.incomplete" ||
        type == "response.failed") {
      return SseEventKind::kResponseEnd;
    }
    std::string_view delta;
    if (type != "response.output_text.delta" || doc["delta"].get_string().get(delta)) {
      return SseEventKind::kOther;
    }
    if (text_out != nullptr) text_out->append(delta);
    return SseEventKind::kContent;
  }
  simdjson::dom::array choices;
  if (doc["choices"].get_array().get(choices)) return SseEventKind::kOther;
  if (choices.size() == 0) {
    simdjson::dom::object usage;
    return doc["usage"].get_object().get(usage) ? SseEventKind::kOther : SseEventKind::kUsage;
  }
  // vLLM streams one token per chunk; the chat stream opens with a chunk that only names the
  // role (empty content), which carries no token.
  simdjson::dom::element first = choices.at(0);
  simdjson::dom::object delta;
  if (!first["delta"].get_object().get(delta)) {
    std::string_view role, content;
    const bool has_role = !delta["role"].get_string().get(role);
    const bool has_content = !delta["content"].get_string().get(content) && !content.empty();
    if (has_role && !has_content) return SseEventKind::kOther;
    if (text_out != nullptr && has_content) text_out->append(content);
    return SseEventKind::kContent;
  }
  std::string_view text;
  if (!first["text"].get_string().get(text)) {
    if (text_out != nullptr) text_out->append(text);
    return SseEventKind::kContent;
  }
  return SseEventKind::kOther;
}

}  // namespace bmas::gateway
