// libFuzzer target: the gateway's reading of a completion request body and its rewrite for
// usage metering (src/gateway/request.h). Links bmas_gateway_parse.

#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gateway/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static simdjson::dom::parser parser;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto fields = bmas::gateway::ParseCompletionBody(parser, body);
  if (!fields) return 0;
  if (fields->model.empty() && fields->prompt_chars < 0) std::abort();
  // The rewrite must give a body the gateway reads the same way, with include_usage set (or,
  // where RapidJSON refuses what simdjson took, the body unchanged).
  const std::string rewritten = bmas::gateway::WithIncludeUsage(body);
  auto again = bmas::gateway::ParseCompletionBody(parser, rewritten);
  if (!again || again->model != fields->model || again->stream != fields->stream ||
      again->prompt_chars != fields->prompt_chars ||
      (rewritten != body && !again->client_wants_usage)) {
    std::abort();
  }
  return 0;
}
