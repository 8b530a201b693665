// Fuzzes the engine's parser of OpenAI request bodies (/v1/completions, /v1/chat/completions
// and /v1/responses), which reads whatever an API client sends.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/openai_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bmas::engine::RequestParser parser;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  (void)parser.Parse(body, bmas::engine::Endpoint::kCompletions);
  (void)parser.Parse(body, bmas::engine::Endpoint::kChatCompletions);
  (void)parser.Parse(body, bmas::engine::Endpoint::kResponses);
  return 0;
}
