#pragma once

// The OpenAI request and response shapes `bmas engine` speaks, as vLLM speaks them.
// JSON library types stay inside openai_api.cc.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "engine/scheduler.h"
#include "engine/tokenizer.h"

namespace bmas::engine {

enum class Endpoint { kCompletions, kChatCompletions, kResponses };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  // The prompt, or the chat template applied to messages (Responses: to the instructions as a
  // system message, then the input).
  std::string prompt_text;
  std::vector<TokenId> prompt_tokens;
  std::optional<int> max_tokens;    // max_tokens, max_completion_tokens or max_output_tokens
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  std::vector<std::string> stop;
  int priority = 0;
  std::optional<uint64_t> seed;
  // Output token i is SampleToken(sample_seed, i). From `seed`, else from the prompt's tokens;
  // a continued chat message the engine itself generated resumes where it stopped (see
  // ApplyChatTemplate).
  uint64_t sample_seed = 0;
  bool echo = false;                // completions: the prompt is prepended to the text
};

// Reusable JSON parser; one per thread.
class RequestParser {
 public:
  RequestParser();
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Parses and validates a request body. Errors (400) name the offending field.
  Result<CompletionRequest> Parse(std::string_view body, Endpoint endpoint);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// How a rendered chat ends, from vLLM's `add_generation_prompt` and `continue_final_message`.
enum class ChatEnding {
  kGenerationPrompt,  // a new assistant header follows the last message (the default)
  kNone,              // add_generation_prompt: false
  kContinueFinal,     // continue_final_message: the last message is left open
};

// The chat template: each message becomes "<|ROLE|>\n" CONTENT "\n", and the prompt ends
// with "<|assistant|>\n" (each marker is one token). With kContinueFinal the last message has
// no "\n" after its content, so the prompt ends with the text the model is to continue.
std::string ApplyChatTemplate(const std::vector<std::pair<std::string, std::string>>& messages,
                              ChatEnding ending = ChatEnding::kGenerationPrompt);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
};

// Pieces of responses. `id` is "cmpl-...", "chatcmpl-..." or "resp_...".
struct ResponseContext {
  Endpoint endpoint;
  std::string id;
  std::string model;
  int64_t created;  // unix seconds
};

// The whole (non-streaming) response body.
std::string CompletionResponseJson(const ResponseContext& ctx, std::string_view text,
                                   FinishReason reason, std::string_view stop_reason,
                                   const Usage& usage);

// Appends one SSE event "data: {chunk}\n\n" carrying `text` (and the role on the first chat
// chunk); `reason` is kNone except on the last chunk.
void AppendStreamChunk(const ResponseContext& ctx, std::string_view text, bool first,
                       FinishReason reason, std::string_view stop_reason, std::string& out);

// Appends the final usage event (choices empty).
void AppendUsageChunk(const ResponseContext& ctx, const Usage& usage, std::string& out);

// "data: [DONE]\n\n"
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// The Responses API (/v1/responses). The reply is a Response object whose one output item is
// an assistant message ("msg_" and the response id's digits) with one output_text part. A
// length finish makes it "incomplete" (incomplete_details.reason "max_output_tokens"), as
// OpenAI's API reports it; any other finish, "completed".

// The whole (non-streaming) Response object.
std::string ResponseObjectJson(const ResponseContext& ctx, std::string_view text,
                               FinishReason reason, const Usage& usage);

// The typed SSE events of a streamed Response ("event: TYPE\ndata: {...}\n\n"), each with its
// `type` and `sequence_number`. One per stream; Begin, then Delta per token, then End.
class ResponseEvents {
 public:
  explicit ResponseEvents(const ResponseContext& ctx) : ctx_(ctx) {}

  // response.created, response.in_progress, response.output_item.added and
  // response.content_part.added.
  void Begin(std::string& out);
  // response.output_text.delta carrying `text`.
  void Delta(std::string_view text, std::string& out);
  // response.output_text.done, response.content_part.done, response.output_item.done, then
  // response.completed (or response.incomplete after a length finish) with the usage.
  void End(std::string_view text, FinishReason reason, const Usage& usage, std::string& out);

 private:
  const ResponseContext& ctx_;
  int sequence_number_ = 0;
};

struct ModelCard {
  std::string id;
  int64_t created;
  int max_model_len;
  int max_num_seqs;
  std::string profile;
};

std::string ModelsJson(const ModelCard& card);

}  // namespace bmas::engine
