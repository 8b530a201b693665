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

std::optional<TokenUsage> ReadUsage(simdjson::dom::parser& parser, std::string_view json) {
  simdjson::dom::element doc;
  if (parser.parse(json.data(), json.size()).get(doc)) return std::nullopt;
  simdjson::dom::object usage;
  if (doc["usage"].get_object().get(usage)) return std::nullopt;
  TokenUsage u;
  if (usage["prompt_tokens"].get_int64().get(u.prompt_tokens) ||
      usage["completion_tokens"].get_int64().get(u.completion_tokens)) {
    return std::nullopt;
  }
  return u;
}

SseEventKind ClassifySseEvent(simdjson::dom::parser& parser, std::string_view event,
                              std::string* text_out) {
  constexpr std::string_view kData = "data: ";
  if (event.substr(0, kData.size()) != kData) return SseEventKind::kOther;
  std::string_view data = event.substr(kData.size());
  while (!data.empty() && (data.back() == '\n' || data.back() == '\r')) data.remove_suffix(1);
  if (data == "[DONE]") return SseEventKind::kDone;
  simdjson::dom::element doc;
  if (parser.parse(data.data(), data.size()).get(doc)) return SseEventKind::kOther;
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
