// libFuzzer target: the gateway's SSE relay parser (src/gateway/sse.h): splitting a backend's
// bytes into events at arbitrary read boundaries, and classifying each event; and stream
// resumption (src/gateway/resume.h) learning from those events and rewriting them as a second
// backend's; and ReadUsage's scan of a trailing usage object against simdjson's reading of the
// same JSON. Links bmas_gateway_parse.

#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "gateway/resume.h"
#include "gateway/sse.h"

namespace {

// Whether no object in `e` repeats a key (ReadUsage's scan takes a repeated key's first value;
// simdjson on demand, searching on from the last key it found, may take another).
bool UniqueKeys(simdjson::dom::element e) {
  if (simdjson::dom::array a; !e.get_array().get(a)) {
    for (simdjson::dom::element x : a) {
      if (!UniqueKeys(x)) return false;
    }
  } else if (simdjson::dom::object o; !e.get_object().get(o)) {
    std::set<std::string_view> keys;
    for (auto [key, value] : o) {
      if (!keys.insert(key).second || !UniqueKeys(value)) return false;
    }
  }
  return true;
}

// ReadUsage's scan of a trailing usage object must read what simdjson reads, for any JSON
// object without repeated keys.
void CheckUsage(simdjson::dom::parser& parser, std::string_view json) {
  if (json.empty()) return;  // an event without data: a null pointer simdjson would copy from
  simdjson::dom::element doc;
  if (parser.parse(json.data(), json.size()).get(doc) || !doc.is_object() || !UniqueKeys(doc)) {
    return;
  }
  const auto scanned = bmas::gateway::ReadUsage(json);
  const auto parsed = bmas::gateway::ReadUsageOnDemand(json);
  if (scanned.has_value() != parsed.has_value() ||
      (scanned && (scanned->prompt_tokens != parsed->prompt_tokens ||
                   scanned->completion_tokens != parsed->completion_tokens))) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static simdjson::dom::parser parser;
  if (size == 0) return 0;
  // The first byte picks the read size, so that events straddle reads in every way.
  const size_t step = 1 + data[0] % 64;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  bmas::gateway::SseSplitter splitter;
  const bool chat = (data[0] & 0x80) != 0;
  bmas::gateway::StreamResume resume(
      chat ? R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100000})"
           : R"({"model":"m","prompt":"p","max_tokens":100000})",
      chat);
  std::string joined, text;
  for (size_t at = 0; at < bytes.size(); at += step) {
    splitter.Append(bytes.substr(at, step));
    for (std::string_view e = splitter.Next(); !e.empty(); e = splitter.Next()) {
      if (e.size() < 2 || e.substr(e.size() - 2) != "\n\n") std::abort();
      text.clear();
      if (bmas::gateway::ClassifySseEvent(parser, e, &text) == bmas::gateway::SseEventKind::kContent) {
        resume.LearnIdentity(e);
        resume.OnToken(text);
        // Cut after three tokens: what follows is rewritten as the next backend's.
        if (resume.tokens() == 3) (void)resume.NextBody();
      }
      if (resume.resumptions() > 0) (void)resume.Rewrite(e);
      CheckUsage(parser, bmas::gateway::SseEventData(e));
      joined.append(e);
    }
  }
  // The bytes as a whole answer's body.
  CheckUsage(parser, bytes);
  // The body for the next backend is a JSON object, or an error.
  if (auto body = resume.NextBody(); body && (body->empty() || body->front() != '{')) std::abort();
  // Without overflow, the events and the rest are exactly the bytes given.
  if (!splitter.overflowed() && joined + std::string(splitter.Rest()) != bytes) std::abort();
  return 0;
}
