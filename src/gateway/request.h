#pragma once

// The gateway's reading of a completion request body: only what authentication-free
// validation, routing, queuing and metering need (the backend validates the rest), and the
// rewrite that asks the backend for a usage chunk. Pure functions; no I/O.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace simdjson::dom {
class parser;
}

namespace bmas::gateway {

// The paths the gateway serves as completions: authenticated, limited, queued, relayed and
// metered alike.
inline constexpr std::string_view kCompletionsPath = "/v1/completions";
inline constexpr std::string_view kChatCompletionsPath = "/v1/chat/completions";
inline constexpr std::string_view kResponsesPath = "/v1/responses";

// The OpenAI API's bound on `stop`: at most this many strings.
inline constexpr size_t kMaxStopStrings = 4;

struct CompletionFields {
  std::string model;
  bool stream = false;
  bool client_wants_usage = false;  // stream_options.include_usage was true
  // The leading text (prompt, or messages in order; Responses: instructions as a system
  // message, then input as messages): routing.
  std::string lead;
  int64_t prompt_chars = 0;  // bytes of prompt text, for a token estimate
  // The most output tokens the client allows (max_tokens, max_completion_tokens or, for
  // Responses, max_output_tokens), when it gives a positive integer: shared limits reserve it.
  std::optional<int64_t> max_tokens;
};

// Reads a /v1/completions, /v1/chat/completions or /v1/responses body. Errors (kInvalidArgument,
// with the field in `param`): not JSON, not an object, a top-level key given twice (a backend would
// read the last copy, the gateway the first), `model` missing, `stream` not a boolean, `stop` not a
// string or an array of at most kMaxStopStrings strings. `parser` is reused scratch.
Result<CompletionFields> ParseCompletionBody(simdjson::dom::parser& parser, std::string_view body);

// A model's prompt characters per token, learnt from its backends' usage replies, for the
// token estimate of a prompt whose usage never comes (a cut stream). Pure; not thread-safe.
class CharsPerToken {
 public:
  static constexpr double kDefault = 4;  // until a reply is seen

  // A reply: a prompt of `chars` bytes was `tokens` tokens. Ignored unless both are positive.
  void Learn(int64_t chars, int64_t tokens);
  double ratio() const { return tokens_ > 0 ? chars_ / tokens_ : kDefault; }
  // Tokens in a prompt of `chars` bytes, rounded up, plus one (the least a prompt costs).
  int64_t Estimate(int64_t chars) const;

 private:
  double chars_ = 0, tokens_ = 0;
};

// The value of the Server-Timing header the gateway puts on a relayed response (W3C Server
// Timing; milliseconds to the microsecond): `gw`, the gateway's own time (what is left of
// `total_s` after the other two), `queue`, the wait for admission in the fair queue, and
// `upstream`, from asking the backend for a connection to its whole answer (a stream: to its
// header). "gw;dur=0.081, queue;dur=0.000, upstream;dur=12.502". Written in place: no
// allocation a request.
struct ServerTimingText {
  std::array<char, 128> data;  // 3 names, durations of at most 13 digits and 3 decimals
  size_t size = 0;
  std::string_view view() const { return {data.data(), size}; }
};
ServerTimingText ServerTiming(double total_s, double queue_s, double upstream_s);

// `body` with stream_options.include_usage set to true, every other member kept in its order.
// REQUIRES: ParseCompletionBody(body) succeeded.
std::string WithIncludeUsage(std::string_view body);

}  // namespace bmas::gateway
