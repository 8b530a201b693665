#pragma once

// The gateway's reading of a backend's SSE stream: splitting bytes into events, and telling
// which events carry generated text (metering) or the usage chunk. Pure; no I/O.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace simdjson::dom {
class parser;
}

namespace bmas::gateway {

// Splits a byte stream of SSE events ("...\n\n") as it arrives.
class SseSplitter {
 public:
  // The most bytes of one event; a longer one is an error (overflowed()).
  static constexpr size_t kMaxEventBytes = size_t{1} << 20;

  void Append(std::string_view bytes);
  // The next complete event including its terminating blank line ("\n\n", as vLLM frames
  // events), or an empty view. The view is valid until the next call to Next() or Append().
  std::string_view Next();
  // Bytes received but not yet a complete event.
  std::string_view Rest() const { return std::string_view(buffer_).substr(consumed_); }
  // An event grew past kMaxEventBytes: what is left of the stream is dropped.
  bool overflowed() const { return overflowed_; }

 private:
  std::string buffer_;
  size_t consumed_ = 0;
  bool overflowed_ = false;
};

enum class SseEventKind {
  kDone,         // data: [DONE]
  kUsage,        // the usage chunk: "choices":[] and "usage"
  kContent,      // a chunk that carries generated text (one token, as vLLM streams); in a
                 // Responses stream, response.output_text.delta
  kResponseEnd,  // a Responses stream's last event (response.completed, .incomplete or
                 // .failed): it ends the stream and carries the usage in response.usage
  kOther,        // the role-only first chat chunk, an error event, anything else
};

struct TokenUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// usage.prompt_tokens and usage.completion_tokens of a JSON response or chunk, or nullopt. A
// Response object's usage.input_tokens and usage.output_tokens count as those, and so does the
// Response a Responses stream's last event carries (its "response"). Reads only the path to
// the usage (simdjson on demand): a text whose structure breaks after its usage still gives it.
// When the usage is the root's last member (as engines write it), only that object is read,
// by a scan of its bytes: the text before it is not checked.
// Thread-safe (its scratch is per thread).
std::optional<TokenUsage> ReadUsage(std::string_view json);
// ReadUsage without the scan of a trailing usage object: simdjson on demand, always. For a JSON
// object whose keys are not repeated, the two give the same answer (the fuzz target
// sse_relay checks it).
std::optional<TokenUsage> ReadUsageOnDemand(std::string_view json);

// The JSON of an event: its "data: " line, after an "event: TYPE" line if it has one.
std::string_view SseEventData(std::string_view event);

// What one complete event (as SseSplitter::Next returns it) is. `parser` is reused scratch.
// For a kContent event, its generated text is appended to `text_out` when given.
SseEventKind ClassifySseEvent(simdjson::dom::parser& parser, std::string_view event,
                              std::string* text_out = nullptr);

}  // namespace bmas::gateway
