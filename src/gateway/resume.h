#pragma once

// Resuming a stream whose replica went away (Slurm preempted it, or it died) on another one,
// so that the client sees one unbroken stream. Pure: bodies and events in, bodies and events
// out.
//
// The gateway keeps the text relayed so far. The next replica gets the request again with
// that text as the start of its answer:
//   completions: prompt + text so far;
//   chat: the text as a final assistant message, with vLLM's `continue_final_message: true`
//         and `add_generation_prompt: false`;
// and max_tokens (or max_completion_tokens) less the tokens already sent. Its events are then
// rewritten: the chat stream's opening role-only chunk is dropped, each chunk takes the first
// replica's id and created time, and the usage chunk counts the prompt as the client sent it
// and every token the client received.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace bmas::gateway {

class StreamResume {
 public:
  // `body`: the JSON body first sent upstream; `chat`: a /v1/chat/completions request.
  StreamResume(std::string body, bool chat) : body_(std::move(body)), chat_(chat) {}

  // A content event was relayed to the client: `text` is what it carried.
  void OnToken(std::string_view text) {
    text_.append(text);
    ++tokens_;
  }
  // The id and created time of the first replica's stream, from one of its chunks.
  void LearnIdentity(std::string_view event);

  // The body for the next replica, or why the stream cannot be resumed (n > 1, echo, a prompt
  // that is not one string, no tokens left). Called when a stream was cut; counts a
  // resumption and remembers the tokens sent before it.
  Result<std::string> NextBody();

  // An event of a resumed replica's stream, as the client must see it ("" = drop it).
  std::string Rewrite(std::string_view event) const;

  int64_t tokens() const { return tokens_; }
  // Tokens the client had received when the current replica was given the request.
  int64_t tokens_before() const { return tokens_before_; }
  int resumptions() const { return resumptions_; }
  const std::string& text() const { return text_; }

 private:
  const std::string body_;
  const bool chat_;
  std::string text_;
  int64_t tokens_ = 0;
  int64_t tokens_before_ = 0;
  int resumptions_ = 0;
  std::string id_;       // "" until learned
  int64_t created_ = 0;
};

}  // namespace bmas::gateway
