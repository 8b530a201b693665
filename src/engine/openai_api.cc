#include "engine/openai_api.h"

#include <fmt/format.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <simdjson.h>

#include <algorithm>
#include <span>

#include "common/json_object.h"
#include "engine/kv_cache.h"

namespace bmas::engine {

namespace dom = simdjson::dom;

struct RequestParser::Impl {
  dom::parser parser;
};

RequestParser::RequestParser() : impl_(std::make_unique<Impl>()) {}
RequestParser::~RequestParser() = default;

namespace {

// A field's value; a missing or null field is absent.
std::optional<dom::element> Field(dom::object object, std::string_view key) {
  dom::element e;
  if (object.at_key(key).get(e) != simdjson::SUCCESS || e.is_null()) return std::nullopt;
  return e;
}

Error TypeError(std::string_view key, std::string_view expected) {
  return InvalidArgument(fmt::format("'{}' must be {}", key, expected), std::string(key));
}

Result<int64_t> IntField(const dom::element& e, std::string_view key) {
  int64_t v;
  if (e.is_int64() && e.get_int64().get(v) == simdjson::SUCCESS) return v;
  return TypeError(key, "an integer");
}

Result<bool> BoolField(const dom::element& e, std::string_view key) {
  bool v;
  if (e.get_bool().get(v) == simdjson::SUCCESS) return v;
  return TypeError(key, "a boolean");
}

Result<std::string_view> StringField(const dom::element& e, std::string_view key) {
  std::string_view v;
  if (e.get_string().get(v) == simdjson::SUCCESS) return v;
  return TypeError(key, "a string");
}

// Message content: a string, or an array of parts {"type": T, "text": ...} with T one of
// `part_types` (chat: "text"; Responses: "input_text", or "output_text" in assistant turns).
Result<std::string> MessageContent(const dom::element& e, std::string_view key,
                                   std::initializer_list<std::string_view> part_types) {
  std::string_view s;
  if (e.get_string().get(s) == simdjson::SUCCESS) return std::string(s);
  dom::array parts;
  if (e.get_array().get(parts) != simdjson::SUCCESS) {
    return TypeError(key, "a string or an array of content parts");
  }
  std::string text;
  for (dom::element part : parts) {
    dom::object p;
    std::string_view type, t;
    if (part.get_object().get(p) != simdjson::SUCCESS || p["type"].get_string().get(type) ||
        std::find(part_types.begin(), part_types.end(), type) == part_types.end() ||
        p["text"].get_string().get(t)) {
      return InvalidArgument(
          fmt::format("'{}' parts must be {{\"type\": \"{}\", \"text\": ...}}; bmas engine "
                      "simulates a text model",
                      key, *part_types.begin()),
          std::string(key));
    }
    text += t;
  }
  return text;
}

using Messages = std::vector<std::pair<std::string, std::string>>;

// A list of messages {"role", "content"} named `field`, appended to `out` as (role, content).
// A Responses input item may say "type": "message"; no other item type is simulated.
Result<void> ParseMessages(dom::array arr, std::string_view field,
                           std::initializer_list<std::string_view> part_types, Messages& out) {
  size_t index = 0;
  for (dom::element m : arr) {
    std::string key = fmt::format("{}[{}]", field, index++);
    dom::object mo;
    if (m.get_object().get(mo) != simdjson::SUCCESS) return TypeError(key, "an object");
    std::string_view type;
    if (auto t = Field(mo, "type"); t && (t->get_string().get(type) || type != "message")) {
      return InvalidArgument(
          fmt::format("'{}.type' must be \"message\": bmas engine takes messages "
                      "{{\"role\", \"content\"}} and no other input items",
                      key),
          key + ".type");
    }
    auto role = Field(mo, "role");
    if (!role) return InvalidArgument(fmt::format("'{}.role' is required", key), key + ".role");
    auto role_name = StringField(*role, key + ".role");
    if (!role_name) return role_name.error();
    std::string content;
    if (auto c = Field(mo, "content")) {
      auto text = MessageContent(*c, key + ".content", part_types);
      if (!text) return text.error();
      content = std::move(*text);
    }
    out.emplace_back(std::string(*role_name), std::move(content));
  }
  return {};
}

// A Responses request's conversation: `instructions` as a system message, then `input` (a
// string is one user message).
Result<Messages> ResponsesMessages(dom::object obj) {
  Messages parsed;
  if (auto e = Field(obj, "instructions")) {
    auto v = StringField(*e, "instructions");
    if (!v) return v.error();
    parsed.emplace_back("system", std::string(*v));
  }
  auto input = Field(obj, "input");
  if (!input) {
    return InvalidArgument(
        "'input' is required: a string, or a list of messages {\"role\", \"content\"}", "input");
  }
  std::string_view text;
  dom::array arr;
  if (input->get_string().get(text) == simdjson::SUCCESS) {
    parsed.emplace_back("user", std::string(text));
  } else if (input->get_array().get(arr) == simdjson::SUCCESS) {
    if (arr.size() == 0) return InvalidArgument("'input' must not be empty", "input");
    if (auto ok = ParseMessages(arr, "input", {"input_text", "output_text"}, parsed); !ok) {
      return ok.error();
    }
  } else {
    return TypeError("input", "a string or a list of messages");
  }
  return parsed;
}

}  // namespace

namespace {

// The seed output tokens are sampled from. A continued message that is exactly what the
// engine generated for the prompt before it (the chat up to the open assistant header) resumes
// that generation at the next position, so an interrupted request resent with its partial
// answer produces what the uninterrupted one would have; any other prompt seeds from its tokens.
uint64_t SampleSeed(const CompletionRequest& req, const std::optional<std::string>& continued) {
  if (continued) {
    // The prompt ends "\n" CONTENT, and a newline is a piece of its own, so the tokens before
    // the content are the tokens of the text before it.
    std::string_view before(req.prompt_text.data(), req.prompt_text.size() - continued->size());
    const std::vector<TokenId> prefix(req.prompt_tokens.begin(),
                                      req.prompt_tokens.begin() + CountTokens(before));
    const uint64_t base = req.seed.value_or(HashBlock(0, prefix));
    if (auto generated = CountSampledTokens(base, *continued)) return AdvanceSeed(base, *generated);
  }
  return req.seed.value_or(HashBlock(0, req.prompt_tokens));
}

}  // namespace

std::string ApplyChatTemplate(const std::vector<std::pair<std::string, std::string>>& messages,
                              ChatEnding ending) {
  std::string out;
  for (const auto& [role, content] : messages) {
    out += "<|";
    out += role;
    out += "|>\n";
    out += content;
    out += '\n';
  }
  if (ending == ChatEnding::kContinueFinal && !messages.empty()) out.pop_back();
  if (ending == ChatEnding::kGenerationPrompt) out += "<|assistant|>\n";
  return out;
}

Result<CompletionRequest> RequestParser::Parse(std::string_view body, Endpoint endpoint) {
  CompletionRequest req;
  req.endpoint = endpoint;
  std::optional<std::string> continued_text;  // the open final message of a continued chat
  dom::element doc;
  if (auto err = impl_->parser.parse(body.data(), body.size()).get(doc)) {
    return InvalidArgument(fmt::format("the request body is not valid JSON: {}",
                                       simdjson::error_message(err)));
  }
  dom::object obj;
  if (doc.get_object().get(obj) != simdjson::SUCCESS) {
    return InvalidArgument("the request body must be a JSON object");
  }

  auto model = Field(obj, "model");
  if (!model) return InvalidArgument("'model' is required", "model");
  auto model_name = StringField(*model, "model");
  if (!model_name) return model_name.error();
  req.model = std::string(*model_name);

  if (endpoint == Endpoint::kCompletions) {
    auto prompt = Field(obj, "prompt");
    if (!prompt) return InvalidArgument("'prompt' is required", "prompt");
    std::string_view text;
    dom::array arr;
    if (prompt->get_string().get(text) == simdjson::SUCCESS) {
      req.prompt_text = std::string(text);
      req.prompt_tokens = Tokenize(text);
    } else if (prompt->get_array().get(arr) == simdjson::SUCCESS) {
      // A list of token ids, or a list of exactly one string or one token list.
      dom::array inner;
      if (arr.size() == 1 && arr.at(0).get_string().get(text) == simdjson::SUCCESS) {
        req.prompt_text = std::string(text);
        req.prompt_tokens = Tokenize(text);
      } else {
        if (arr.size() == 1 && arr.at(0).get_array().get(inner) == simdjson::SUCCESS) arr = inner;
        for (dom::element t : arr) {
          int64_t id;
          if (!t.is_int64() || t.get_int64().get(id) || id < 0 || id >= kVocabSize) {
            return InvalidArgument(
                fmt::format("'prompt' must be a string or a list of token ids in 0..{}; bmas "
                            "engine serves one prompt per request",
                            kVocabSize - 1),
                "prompt");
          }
          req.prompt_tokens.push_back(static_cast<TokenId>(id));
        }
      }
    } else {
      return TypeError("prompt", "a string or a list of token ids");
    }
  } else if (endpoint == Endpoint::kResponses) {
    auto parsed = ResponsesMessages(obj);
    if (!parsed) return parsed.error();
    req.prompt_text = ApplyChatTemplate(*parsed);
    req.prompt_tokens = Tokenize(req.prompt_text);
  } else {
    auto messages = Field(obj, "messages");
    if (!messages) return InvalidArgument("'messages' is required", "messages");
    dom::array arr;
    if (messages->get_array().get(arr) != simdjson::SUCCESS) {
      return TypeError("messages", "an array of messages");
    }
    if (arr.size() == 0) return InvalidArgument("'messages' must not be empty", "messages");
    // vLLM refuses the pair only when both are given as true; its default for
    // add_generation_prompt (true) gives way to continue_final_message.
    std::optional<bool> add_generation_prompt, continue_final_message;
    for (auto [key, flag] : {std::pair{"add_generation_prompt", &add_generation_prompt},
                             std::pair{"continue_final_message", &continue_final_message}}) {
      if (auto e = Field(obj, key)) {
        auto v = BoolField(*e, key);
        if (!v) return v.error();
        *flag = *v;
      }
    }
    if (continue_final_message.value_or(false) && add_generation_prompt.value_or(false)) {
      return InvalidArgument(
          "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
    }
    Messages parsed;
    if (auto ok = ParseMessages(arr, "messages", {"text"}, parsed); !ok) return ok.error();
    ChatEnding ending = ChatEnding::kGenerationPrompt;
    if (continue_final_message.value_or(false)) {
      if (parsed.back().first != "assistant") {
        return InvalidArgument(
            "Cannot set `continue_final_message` to True when the last message is not from the "
            "assistant.",
            "messages");
      }
      ending = ChatEnding::kContinueFinal;
      continued_text = parsed.back().second;
    } else if (!add_generation_prompt.value_or(true)) {
      ending = ChatEnding::kNone;
    }
    req.prompt_text = ApplyChatTemplate(parsed, ending);
    req.prompt_tokens = Tokenize(req.prompt_text);
  }

  static constexpr std::string_view kMaxTokensKeys[] = {"max_tokens", "max_completion_tokens"};
  static constexpr std::string_view kMaxOutputTokensKeys[] = {"max_output_tokens"};
  for (std::string_view key : endpoint == Endpoint::kResponses
                                  ? std::span<const std::string_view>(kMaxOutputTokensKeys)
                                  : std::span<const std::string_view>(kMaxTokensKeys)) {
    if (auto e = Field(obj, key)) {
      auto v = IntField(*e, key);
      if (!v) return v.error();
      if (*v < 1 || *v > (1 << 30)) {
        return InvalidArgument(fmt::format("'{}' must be at least 1, got {}", key, *v),
                               std::string(key));
      }
      req.max_tokens = static_cast<int>(*v);
    }
  }
  if (auto e = Field(obj, "stream")) {
    auto v = BoolField(*e, "stream");
    if (!v) return v.error();
    req.stream = *v;
  }
  if (auto e = Field(obj, "stream_options")) {
    dom::object so;
    if (e->get_object().get(so) != simdjson::SUCCESS) return TypeError("stream_options", "an object");
    if (auto iu = Field(so, "include_usage")) {
      auto v = BoolField(*iu, "stream_options.include_usage");
      if (!v) return v.error();
      req.include_usage = *v;
    }
  }
  if (auto e = Field(obj, "stop")) {
    std::string_view s;
    dom::array arr;
    if (e->get_string().get(s) == simdjson::SUCCESS) {
      if (!s.empty()) req.stop.emplace_back(s);
    } else if (e->get_array().get(arr) == simdjson::SUCCESS) {
      // The OpenAI API's bound; without one, stop strings cost time quadratic in their number.
      constexpr size_t kMaxStop = 4;
      if (arr.size() > kMaxStop) {
        return InvalidArgument(fmt::format("'stop' may hold at most {} strings; {} were given",
                                           kMaxStop, arr.size()),
                               "stop");
      }
      for (dom::element x : arr) {
        if (x.get_string().get(s) != simdjson::SUCCESS) {
          return TypeError("stop", "a string or an array of strings");
        }
        if (!s.empty()) req.stop.emplace_back(s);
      }
    } else {
      return TypeError("stop", "a string or an array of strings");
    }
  }
  if (auto e = Field(obj, "priority")) {
    auto v = IntField(*e, "priority");
    if (!v) return v.error();
    req.priority = static_cast<int>(*v);
  }
  if (auto e = Field(obj, "seed")) {
    auto v = IntField(*e, "seed");
    if (!v) return v.error();
    req.seed = static_cast<uint64_t>(*v);
  }
  if (auto e = Field(obj, "n")) {
    auto v = IntField(*e, "n");
    if (!v) return v.error();
    if (*v != 1) {
      return InvalidArgument("'n' must be 1: bmas engine returns one choice per request", "n");
    }
  }
  if (endpoint == Endpoint::kCompletions) {
    if (auto e = Field(obj, "echo")) {
      auto v = BoolField(*e, "echo");
      if (!v) return v.error();
      req.echo = *v;
    }
  }
  for (std::string_view key : {"temperature", "top_p", "frequency_penalty", "presence_penalty"}) {
    if (auto e = Field(obj, key); e && !e->is_number()) return TypeError(key, "a number");
  }
  req.sample_seed = SampleSeed(req, continued_text);
  return req;
}

namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void Str(Writer& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

void Head(Writer& w, const ResponseContext& ctx, const char* object) {
  w.Key("id");
  Str(w, ctx.id);
  Member(w, "object", object);
  Member(w, "created", ctx.created);
  w.Key("model");
  Str(w, ctx.model);
}

void FinishFields(Writer& w, FinishReason reason, std::string_view stop_reason) {
  w.Key("finish_reason");
  if (reason == FinishReason::kNone) w.Null(); else w.String(FinishReasonName(reason));
  w.Key("stop_reason");
  if (stop_reason.empty()) w.Null(); else Str(w, stop_reason);
}

void UsageObject(Writer& w, const Usage& u) {
  w.Key("usage");
  w.StartObject();
  Member(w, "prompt_tokens", u.prompt_tokens);
  Member(w, "total_tokens", u.prompt_tokens + u.completion_tokens);
  Member(w, "completion_tokens", u.completion_tokens);
  w.Key("prompt_tokens_details");
  w.StartObject();
  Member(w, "cached_tokens", u.cached_tokens);
  w.EndObject();
  w.EndObject();
}

}  // namespace

namespace {

// "choices": [one choice]. A chat choice carries a "message", or a "delta" when streaming (the
// role only on the first chunk); a completion choice carries "text".
void WriteChoices(Writer& w, bool chat, bool streaming, bool first, std::string_view text,
                  FinishReason reason, std::string_view stop_reason) {
  w.Key("choices");
  w.StartArray();
  w.StartObject();
  Member(w, "index", 0);
  if (chat) {
    w.Key(streaming ? "delta" : "message");
    w.StartObject();
    if (!streaming || first) {
      Member(w, "role", "assistant");
    }
    w.Key("content");
    Str(w, text);
    w.EndObject();
  } else {
    w.Key("text");
    Str(w, text);
  }
  w.Key("logprobs");
  w.Null();
  FinishFields(w, reason, stop_reason);
  w.EndObject();
  w.EndArray();
}

void AppendSseEvent(const rapidjson::StringBuffer& buf, std::string& out) {
  out += "data: ";
  out.append(buf.GetString(), buf.GetSize());
  out += "\n\n";
}

}  // namespace

std::string CompletionResponseJson(const ResponseContext& ctx, std::string_view text,
                                   FinishReason reason, std::string_view stop_reason,
                                   const Usage& usage) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  bool chat = ctx.endpoint == Endpoint::kChatCompletions;
  w.StartObject();
  Head(w, ctx, chat ? "chat.completion" : "text_completion");
  WriteChoices(w, chat, /*streaming=*/false, /*first=*/true, text, reason, stop_reason);
  UsageObject(w, usage);
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

void AppendStreamChunk(const ResponseContext& ctx, std::string_view text, bool first,
                       FinishReason reason, std::string_view stop_reason, std::string& out) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  bool chat = ctx.endpoint == Endpoint::kChatCompletions;
  w.StartObject();
  Head(w, ctx, chat ? "chat.completion.chunk" : "text_completion");
  WriteChoices(w, chat, /*streaming=*/true, first, text, reason, stop_reason);
  w.EndObject();
  AppendSseEvent(buf, out);
}

void AppendUsageChunk(const ResponseContext& ctx, const Usage& usage, std::string& out) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  bool chat = ctx.endpoint == Endpoint::kChatCompletions;
  w.StartObject();
  Head(w, ctx, chat ? "chat.completion.chunk" : "text_completion");
  w.Key("choices");
  w.StartArray();
  w.EndArray();
  UsageObject(w, usage);
  w.EndObject();
  AppendSseEvent(buf, out);
}

namespace {

// The Responses API's status of a finished response, and of its message.
const char* ResponseStatus(FinishReason reason) {
  return reason == FinishReason::kLength ? "incomplete" : "completed";
}

std::string MessageId(const ResponseContext& ctx) {
  return "msg_" + ctx.id.substr(ctx.id.find('_') + 1);
}

// {"type": "output_text", "text", "annotations": []}
void OutputTextPart(Writer& w, std::string_view text) {
  w.StartObject();
  Member(w, "type", "output_text");
  w.Key("text");
  Str(w, text);
  w.Key("annotations");
  w.StartArray();
  w.EndArray();
  w.EndObject();
}

// The assistant message item; `text` is nullopt while its content is still empty.
void MessageItem(Writer& w, const ResponseContext& ctx, const char* status,
                 std::optional<std::string_view> text) {
  w.StartObject();
  Member(w, "type", "message");
  Member(w, "id", MessageId(ctx));
  Member(w, "status", status);
  Member(w, "role", "assistant");
  w.Key("content");
  w.StartArray();
  if (text) OutputTextPart(w, *text);
  w.EndArray();
  w.EndObject();
}

// The Response object. In progress (`usage` null) it has no output yet.
void ResponseObject(Writer& w, const ResponseContext& ctx, std::string_view text,
                    FinishReason reason, const Usage* usage) {
  const char* status = usage == nullptr ? "in_progress" : ResponseStatus(reason);
  w.StartObject();
  Member(w, "id", ctx.id);
  Member(w, "object", "response");
  Member(w, "created_at", ctx.created);
  Member(w, "status", status);
  w.Key("error");
  w.Null();
  w.Key("incomplete_details");
  if (usage != nullptr && reason == FinishReason::kLength) {
    w.StartObject();
    Member(w, "reason", "max_output_tokens");
    w.EndObject();
  } else {
    w.Null();
  }
  Member(w, "model", ctx.model);
  w.Key("output");
  w.StartArray();
  if (usage != nullptr) MessageItem(w, ctx, status, text);
  w.EndArray();
  Member(w, "parallel_tool_calls", false);
  w.Key("tools");
  w.StartArray();
  w.EndArray();
  w.Key("usage");
  if (usage == nullptr) {
    w.Null();
  } else {
    w.StartObject();
    Member(w, "input_tokens", usage->prompt_tokens);
    w.Key("input_tokens_details");
    w.StartObject();
    Member(w, "cached_tokens", usage->cached_tokens);
    w.EndObject();
    Member(w, "output_tokens", usage->completion_tokens);
    w.Key("output_tokens_details");
    w.StartObject();
    Member(w, "reasoning_tokens", 0);
    w.EndObject();
    Member(w, "total_tokens", usage->prompt_tokens + usage->completion_tokens);
    w.EndObject();
  }
  w.EndObject();
}

// Appends "event: TYPE\ndata: {"type": TYPE, "sequence_number": N, ...}\n\n"; `body` writes
// the rest of the members.
template <typename Body>
void AppendTypedEvent(const char* type, int sequence_number, std::string& out, Body body) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  Member(w, "type", type);
  Member(w, "sequence_number", sequence_number);
  body(w);
  w.EndObject();
  out += "event: ";
  out += type;
  out += '\n';
  AppendSseEvent(buf, out);
}

// item_id, output_index and content_index of the one output_text part.
void PartPosition(Writer& w, const ResponseContext& ctx) {
  Member(w, "item_id", MessageId(ctx));
  Member(w, "output_index", 0);
  Member(w, "content_index", 0);
}

}  // namespace

std::string ResponseObjectJson(const ResponseContext& ctx, std::string_view text,
                               FinishReason reason, const Usage& usage) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  ResponseObject(w, ctx, text, reason, &usage);
  return std::string(buf.GetString(), buf.GetSize());
}

void ResponseEvents::Begin(std::string& out) {
  for (const char* type : {"response.created", "response.in_progress"}) {
    AppendTypedEvent(type, sequence_number_++, out, [this](Writer& w) {
      w.Key("response");
      ResponseObject(w, ctx_, "", FinishReason::kNone, nullptr);
    });
  }
  AppendTypedEvent("response.output_item.added", sequence_number_++, out, [this](Writer& w) {
    Member(w, "output_index", 0);
    w.Key("item");
    MessageItem(w, ctx_, "in_progress", std::nullopt);
  });
  AppendTypedEvent("response.content_part.added", sequence_number_++, out, [this](Writer& w) {
    PartPosition(w, ctx_);
    w.Key("part");
    OutputTextPart(w, "");
  });
}

void ResponseEvents::Delta(std::string_view text, std::string& out) {
  AppendTypedEvent("response.output_text.delta", sequence_number_++, out, [&](Writer& w) {
    PartPosition(w, ctx_);
    w.Key("delta");
    Str(w, text);
    w.Key("logprobs");
    w.StartArray();
    w.EndArray();
  });
}

void ResponseEvents::End(std::string_view text, FinishReason reason, const Usage& usage,
                         std::string& out) {
  AppendTypedEvent("response.output_text.done", sequence_number_++, out, [&](Writer& w) {
    PartPosition(w, ctx_);
    w.Key("text");
    Str(w, text);
    w.Key("logprobs");
    w.StartArray();
    w.EndArray();
  });
  AppendTypedEvent("response.content_part.done", sequence_number_++, out, [&](Writer& w) {
    PartPosition(w, ctx_);
    w.Key("part");
    OutputTextPart(w, text);
  });
  AppendTypedEvent("response.output_item.done", sequence_number_++, out, [&](Writer& w) {
    Member(w, "output_index", 0);
    w.Key("item");
    MessageItem(w, ctx_, ResponseStatus(reason), text);
  });
  const char* type = reason == FinishReason::kLength ? "response.incomplete" : "response.completed";
  AppendTypedEvent(type, sequence_number_++, out, [&](Writer& w) {
    w.Key("response");
    ResponseObject(w, ctx_, text, reason, &usage);
  });
}

std::string ModelsJson(const ModelCard& card) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  Member(w, "object", "list");
  w.Key("data");
  w.StartArray();
  w.StartObject();
  w.Key("id");
  Str(w, card.id);
  Member(w, "object", "model");
  Member(w, "created", card.created);
  Member(w, "owned_by", "bmas-simulated");
  w.Key("root");
  Str(w, card.id);
  w.Key("parent");
  w.Null();
  Member(w, "max_model_len", card.max_model_len);
  Member(w, "max_num_seqs", card.max_num_seqs);
  Member(w, "simulated", true);
  w.Key("profile");
  Str(w, card.profile);
  w.Key("permission");
  w.StartArray();
  w.EndArray();
  w.EndObject();
  w.EndArray();
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace bmas::engine
