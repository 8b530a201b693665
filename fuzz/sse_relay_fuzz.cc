// libFuzzer target: the gateway's SSE relay parser (src/gateway/sse.h): splitting a backend's
// bytes into events at arbitrary read boundaries, and classifying each event. Links
// bmas_gateway_parse.

#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gateway/sse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static simdjson::dom::parser parser;
  if (size == 0) return 0;
  // The first byte picks the read size, so that events straddle reads in every way.
  const size_t step = 1 + data[0] % 64;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  bmas::gateway::SseSplitter splitter;
  std::string joined;
  for (size_t at = 0; at < bytes.size(); at += step) {
    splitter.Append(bytes.substr(at, step));
    for (std::string_view e = splitter.Next(); !e.empty(); e = splitter.Next()) {
      if (e.size() < 2 || e.substr(e.size() - 2) != "\n\n") std::abort();
      (void)bmas::gateway::ClassifySseEvent(parser, e);
      joined.append(e);
    }
  }
  // Without overflow, the events and the rest are exactly the bytes given.
  if (!splitter.overflowed() && joined + std::string(splitter.Rest()) != bytes) std::abort();
  return 0;
}
