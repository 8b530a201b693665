#include "gateway/sse.h"

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

std::optional<TokenUsage> ReadUsage(std::string_view json) {
  // On demand: only the path to the usage object is parsed, not a whole DOM of the answer (its
  // choices and their text); stage 1 still checks the whole text's strings and UTF-8. One
  // parser and padded copy per thread, kept from one answer to the next so that a read
  // allocates nothing; dropped after a document past 1 MiB, so that it does not stay.
  constexpr size_t kKeep = size_t{1} << 20;
  thread_local simdjson::ondemand::parser parser;
  thread_local std::string padded;
  if (padded.capacity() < json.size() + simdjson::SIMDJSON_PADDING) {
    padded.reserve(json.size() + simdjson::SIMDJSON_PADDING);
  }
  padded.assign(json);
  struct Shrink {
    ~Shrink() {
      if (padded.capacity() > kKeep) std::string().swap(padded);
      if (parser.capacity() > kKeep) parser = simdjson::ondemand::parser();
    }
  } shrink;

  simdjson::ondemand::document doc;
  simdjson::ondemand::object root, usage, response;
  if (parser.iterate(padded.data(), padded.size(), padded.capacity()).get(doc) ||
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
