#include "loadgen_wire.h"

#include <fmt/core.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <stdexcept>

namespace bmas::loadgen {

// Parses "http://host[:port][/prefix]". The request path is the prefix, "/v1" (unless the
// prefix already ends with it), then "/completions" or "/chat/completions".
// Throws std::invalid_argument on a URL it cannot use.
Target ParseTarget(std::string_view url, std::string_view endpoint) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) {
    throw std::invalid_argument(fmt::format("--url must start with http:// (got '{}')", url));
  }
  url.remove_prefix(kScheme.size());
  size_t slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  std::string prefix(slash == std::string_view::npos ? "" : url.substr(slash));
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();

  Target target;
  target.host_header = std::string(authority);
  std::string_view host = authority;
  std::string_view port = "80";
  if (authority.starts_with('[')) {  // [v6 address]:port
    size_t close = authority.find(']');
    if (close == std::string_view::npos) throw std::invalid_argument("bad IPv6 host in --url");
    host = authority.substr(1, close - 1);
    if (authority.size() > close + 1) {
      if (authority[close + 1] != ':') throw std::invalid_argument("bad port in --url");
      port = authority.substr(close + 2);
    }
  } else if (size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty() || port.empty()) throw std::invalid_argument("--url needs a host and port");
  target.host = std::string(host);
  target.port = std::string(port);
  if (!prefix.ends_with("/v1")) prefix += "/v1";
  target.path = prefix + (endpoint == "chat" ? "/chat/completions" : "/completions");
  return target;
}

// `words` random lowercase words of 2-4 letters separated by spaces. With bmas's tokenizer
// (and most BPE vocabularies) that is about one token per word. Different seeds give prompts
// that differ from the first word, so they share no cacheable prefix.
std::string MakePrompt(uint64_t seed, int words) {
  SplitMix64 rng(seed);
  std::string text;
  text.reserve(static_cast<size_t>(words) * 5);
  for (int i = 0; i < words; ++i) {
    if (i > 0) text += ' ';
    uint64_t r = rng.Next();
    int length = 2 + static_cast<int>(r % 3);
    r /= 3;
    for (int k = 0; k < length; ++k, r /= 26) text += static_cast<char>('a' + r % 26);
  }
  return text;
}

// `system_prompt` (chat only; may be null) comes before the user message `prompt`.
std::string BuildRequestBody(const Options& options, std::string_view prompt,
                             const std::string* system_prompt) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> writer(out);
  auto string = [&writer](std::string_view s) {
    writer.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  };
  writer.StartObject();
  writer.Key("model");
  string(options.model);
  if (options.endpoint == "chat") {
    writer.Key("messages");
    writer.StartArray();
    if (system_prompt != nullptr) {
      writer.StartObject();
      writer.Key("role");
      writer.String("system");
      writer.Key("content");
      string(*system_prompt);
      writer.EndObject();
    }
    writer.StartObject();
    writer.Key("role");
    writer.String("user");
    writer.Key("content");
    string(prompt);
    writer.EndObject();
    writer.EndArray();
  } else {
    writer.Key("prompt");
    string(prompt);
  }
  writer.Key("max_tokens");
  writer.Int(options.max_tokens);
  writer.Key("stream");
  writer.Bool(!options.no_stream);
  if (!options.no_stream) {
    writer.Key("stream_options");
    writer.StartObject();
    writer.Key("include_usage");
    writer.Bool(true);
    writer.EndObject();
  }
  writer.EndObject();
  return std::string(out.GetString(), out.GetSize());
}

// Parses one JSON chunk. Small chunks parse without touching the heap.
ParsedChunk ParseChunk(std::string_view json) {
  using Allocator = rapidjson::MemoryPoolAllocator<>;
  char value_buffer[4096];
  char parse_buffer[1024];
  Allocator value_allocator(value_buffer, sizeof value_buffer);
  Allocator parse_allocator(parse_buffer, sizeof parse_buffer);
  rapidjson::GenericDocument<rapidjson::UTF8<>, Allocator, Allocator> doc(
      &value_allocator, sizeof parse_buffer, &parse_allocator);

  ParsedChunk chunk;
  doc.Parse(json.data(), json.size());
  std::string_view preview = json.substr(0, 200);
  if (doc.HasParseError() || !doc.IsObject()) {
    chunk.error = fmt::format("response is not a JSON object: {}", preview);
    return chunk;
  }
  if (auto error = doc.FindMember("error"); error != doc.MemberEnd() && !error->value.IsNull()) {
    const auto& e = error->value;
    auto message = e.IsObject() ? e.FindMember("message") : e.MemberEnd();
    if (e.IsObject() && message != e.MemberEnd() && message->value.IsString()) {
      chunk.error = fmt::format("server error: {}", message->value.GetString());
    } else {
      chunk.error = fmt::format("server error: {}", preview);
    }
    return chunk;
  }
  if (auto choices = doc.FindMember("choices");
      choices != doc.MemberEnd() && choices->value.IsArray() && !choices->value.Empty() &&
      choices->value[0].IsObject()) {
    const auto& choice = choices->value[0];
    auto non_empty_string = [](const auto& object, const char* key) {
      auto it = object.FindMember(key);
      return it != object.MemberEnd() && it->value.IsString() && it->value.GetStringLength() > 0;
    };
    if (non_empty_string(choice, "text")) chunk.has_token = true;
    if (auto delta = choice.FindMember("delta"); delta != choice.MemberEnd() &&
                                                 delta->value.IsObject() &&
                                                 non_empty_string(delta->value, "content")) {
      chunk.has_token = true;
    }
    if (auto message = choice.FindMember("message"); message != choice.MemberEnd() &&
                                                     message->value.IsObject() &&
                                                     non_empty_string(message->value, "content")) {
      chunk.has_token = true;
    }
  }
  if (auto usage = doc.FindMember("usage"); usage != doc.MemberEnd() && usage->value.IsObject()) {
    const auto& u = usage->value;
    if (auto it = u.FindMember("completion_tokens"); it != u.MemberEnd() && it->value.IsInt64()) {
      chunk.completion_tokens = it->value.GetInt64();
    }
    if (auto it = u.FindMember("prompt_tokens"); it != u.MemberEnd() && it->value.IsInt64()) {
      chunk.prompt_tokens = it->value.GetInt64();
    }
  }
  return chunk;
}

}  // namespace bmas::loadgen
