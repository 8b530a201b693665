#include "engine/openai_api.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/kv_cache.h"

namespace bmas::engine {
namespace {

constexpr const char* kModel = R"("model":"m")";

Result<CompletionRequest> ParseCompletion(const std::string& fields) {
  RequestParser parser;
  return parser.Parse("{" + std::string(kModel) + "," + fields + "}", Endpoint::kCompletions);
}

TEST(RequestParserTest, CompletionFields) {
  auto r = ParseCompletion(R"("prompt":"Hello world","max_tokens":7,"stream":true,
      "stream_options":{"include_usage":true},"stop":["a","b"],"seed":3,"echo":true,
      "temperature":0.5,"user":"x","n":1)");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->prompt_text, "Hello world");
  EXPECT_EQ(r->prompt_tokens, Tokenize("Hello world"));
  EXPECT_EQ(r->max_tokens, 7);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->seed, 3u);
  EXPECT_TRUE(r->echo);
}

TEST(RequestParserTest, NullFieldsAreAbsent) {
  auto r = ParseCompletion(R"("prompt":"x","max_tokens":null,"stop":null,"stream":null)");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->max_tokens.has_value());
  EXPECT_TRUE(r->stop.empty());
  EXPECT_FALSE(r->stream);
}

TEST(RequestParserTest, PromptAsTokenIds) {
  auto r = ParseCompletion(R"("prompt":[1,2,3])");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->prompt_tokens, (std::vector<TokenId>{1, 2, 3}));
  auto nested = ParseCompletion(R"("prompt":[[4,5]])");
  ASSERT_TRUE(nested);
  EXPECT_EQ(nested->prompt_tokens, (std::vector<TokenId>{4, 5}));
  auto single = ParseCompletion(R"("prompt":["only one"])");
  ASSERT_TRUE(single);
  EXPECT_EQ(single->prompt_text, "only one");
}

TEST(RequestParserTest, MaxCompletionTokensIsAccepted) {
  auto r = ParseCompletion(R"("prompt":"x","max_completion_tokens":9)");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->max_tokens, 9);
}

TEST(RequestParserTest, ChatAppliesTheTemplate) {
  RequestParser parser;
  auto r = parser.Parse(R"({"model":"m","messages":[{"role":"system","content":"Be brief."},
      {"role":"user","content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}]}]})",
                        Endpoint::kChatCompletions);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->prompt_text, "<|system|>\nBe brief.\n<|user|>\nHi there\n<|assistant|>\n");
  EXPECT_EQ(r->prompt_tokens, Tokenize(r->prompt_text));
}

Result<CompletionRequest> ParseChat(const std::string& messages, const std::string& fields = "") {
  RequestParser parser;
  return parser.Parse(R"({"model":"m","messages":)" + messages + (fields.empty() ? "" : ",") +
                          fields + "}",
                      Endpoint::kChatCompletions);
}

constexpr const char* kQuestion = R"([{"role":"user","content":"Why cache?"}])";

TEST(RequestParserTest, AddGenerationPromptFalseEndsAfterTheLastMessage) {
  auto r = ParseChat(kQuestion, R"("add_generation_prompt":false)");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->prompt_text, "<|user|>\nWhy cache?\n");
  auto explicit_true = ParseChat(kQuestion, R"("add_generation_prompt":true)");
  ASSERT_TRUE(explicit_true);
  EXPECT_EQ(explicit_true->prompt_text, "<|user|>\nWhy cache?\n<|assistant|>\n");
}

TEST(RequestParserTest, ContinueFinalMessageLeavesTheAssistantMessageOpen) {
  const std::string messages =
      R"([{"role":"user","content":"Why cache?"},{"role":"assistant","content":" the cache"}])";
  // add_generation_prompt false, or left out (vLLM refuses only an explicit true).
  for (const char* fields : {R"("continue_final_message":true,"add_generation_prompt":false)",
                             R"("continue_final_message":true)"}) {
    auto r = ParseChat(messages, fields);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->prompt_text, "<|user|>\nWhy cache?\n<|assistant|>\n the cache") << fields;
    EXPECT_EQ(r->prompt_tokens, Tokenize(r->prompt_text));
  }
}

// A request cut off after k output tokens and resent with its partial answer costs the
// original prompt plus the partial text's tokens, and generates what the original would have.
TEST(RequestParserTest, ContinuedAnswerResumesTheOriginalGeneration) {
  auto original = ParseChat(kQuestion);
  ASSERT_TRUE(original);
  for (uint64_t k : {0u, 1u, 5u, 12u}) {
    std::string partial;
    for (uint64_t i = 0; i < k; ++i) partial += TokenText(SampleToken(original->sample_seed, i));
    auto resumed = ParseChat(
        R"([{"role":"user","content":"Why cache?"},{"role":"assistant","content":")" + partial +
            R"("}])",
        R"("continue_final_message":true,"add_generation_prompt":false)");
    ASSERT_TRUE(resumed) << resumed.error().message;
    EXPECT_EQ(resumed->prompt_tokens.size(),
              original->prompt_tokens.size() + CountTokens(partial));
    EXPECT_TRUE(std::equal(original->prompt_tokens.begin(), original->prompt_tokens.end(),
                           resumed->prompt_tokens.begin()));
    for (uint64_t i = 0; i < 10; ++i) {
      EXPECT_EQ(SampleToken(resumed->sample_seed, i), SampleToken(original->sample_seed, k + i))
          << "k=" << k << " i=" << i;
    }
  }
}

TEST(RequestParserTest, ContinuedAnswerKeepsAnExplicitSeed) {
  auto original = ParseChat(kQuestion, R"("seed":11)");
  ASSERT_TRUE(original);
  EXPECT_EQ(original->sample_seed, 11u);
  const std::string first(TokenText(SampleToken(11, 0)));
  auto resumed = ParseChat(
      R"([{"role":"user","content":"Why cache?"},{"role":"assistant","content":")" + first + R"("}])",
      R"("continue_final_message":true,"add_generation_prompt":false,"seed":11)");
  ASSERT_TRUE(resumed);
  EXPECT_EQ(SampleToken(resumed->sample_seed, 0), SampleToken(11, 1));
}

TEST(RequestParserTest, ContinuedTextTheEngineDidNotWriteSeedsFromThePrompt) {
  auto r = ParseChat(
      R"([{"role":"user","content":"Why cache?"},{"role":"assistant","content":"Because"}])",
      R"("continue_final_message":true,"add_generation_prompt":false)");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->sample_seed, HashBlock(0, r->prompt_tokens));
}

Result<CompletionRequest> ParseResponses(const std::string& fields) {
  RequestParser parser;
  return parser.Parse(R"({"model":"m",)" + fields + "}", Endpoint::kResponses);
}

TEST(RequestParserTest, ResponsesInputStringIsOneUserMessageAfterTheInstructions) {
  auto r = ParseResponses(R"("input":"Hi","instructions":"Be brief.","max_output_tokens":7,
      "temperature":0.2,"top_p":0.9,"stream":true)");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->prompt_text, "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n");
  EXPECT_EQ(r->prompt_tokens, Tokenize(r->prompt_text));
  EXPECT_EQ(r->max_tokens, 7);
  EXPECT_TRUE(r->stream);
}

TEST(RequestParserTest, ResponsesInputMessagesAreTheChat) {
  auto r = ParseResponses(R"("input":[{"role":"user","content":"Why?"},
      {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Cache."}]},
      {"role":"user","content":[{"type":"input_text","text":"More "},
                                {"type":"input_text","text":"please"}]}])");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(
      r->prompt_text,
      ApplyChatTemplate({{"user", "Why?"}, {"assistant", "Cache."}, {"user", "More please"}}));
  EXPECT_FALSE(r->max_tokens.has_value());
}

TEST(RequestParserTest, ResponsesMaxTokensIsNotItsField) {
  auto r = ParseResponses(R"("input":"x","max_tokens":3)");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->max_tokens.has_value());
}

struct BadCase {
  Endpoint endpoint;
  const char* body;
  const char* param;    // expected Error::param ("" = none)
  const char* message;  // substring of the message
};

class BadRequestTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadRequestTest, IsInvalidArgumentNamingTheField) {
  RequestParser parser;
  auto r = parser.Parse(GetParam().body, GetParam().endpoint);
  ASSERT_FALSE(r) << GetParam().body;
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().param, GetParam().param);
  EXPECT_NE(r.error().message.find(GetParam().message), std::string::npos) << r.error().message;
}

constexpr Endpoint kC = Endpoint::kCompletions;
constexpr Endpoint kChat = Endpoint::kChatCompletions;
constexpr Endpoint kResp = Endpoint::kResponses;

INSTANTIATE_TEST_SUITE_P(
    Cases, BadRequestTest,
    ::testing::Values(
        BadCase{kC, "{not json", "", "not valid JSON"},
        BadCase{kC, "[1,2]", "", "must be a JSON object"},
        BadCase{kC, R"({"prompt":"x"})", "model", "'model' is required"},
        BadCase{kC, R"({"model":5,"prompt":"x"})", "model", "'model' must be a string"},
        BadCase{kC, R"({"model":"m"})", "prompt", "'prompt' is required"},
        BadCase{kC, R"({"model":"m","prompt":{}})", "prompt", "'prompt' must be"},
        BadCase{kC, R"({"model":"m","prompt":[1,"a"]})", "prompt", "token ids"},
        BadCase{kC, R"({"model":"m","prompt":[-1]})", "prompt", "token ids"},
        BadCase{kC, R"({"model":"m","prompt":"x","max_tokens":"5"})", "max_tokens", "an integer"},
        BadCase{kC, R"({"model":"m","prompt":"x","max_tokens":1.5})", "max_tokens", "an integer"},
        BadCase{kC, R"({"model":"m","prompt":"x","max_tokens":0})", "max_tokens", "at least 1"},
        BadCase{kC, R"({"model":"m","prompt":"x","stream":1})", "stream", "a boolean"},
        BadCase{kC, R"({"model":"m","prompt":"x","stream_options":true})", "stream_options", "an object"},
        BadCase{kC, R"({"model":"m","prompt":"x","stop":5})", "stop", "a string or an array"},
        BadCase{kC, R"({"model":"m","prompt":"x","stop":["a",1]})", "stop", "a string or an array"},
        BadCase{kC, R"({"model":"m","prompt":"x","stop":["a","b","c","d","e"]})", "stop", "at most 4"},
        BadCase{kC, R"({"model":"m","prompt":"x","n":2})", "n", "'n' must be 1"},
        BadCase{kC, R"({"model":"m","prompt":"x","temperature":"hot"})", "temperature", "a number"},
        BadCase{kC, R"({"model":"m","prompt":"x","priority":"high"})", "priority", "an integer"},
        BadCase{kChat, R"({"model":"m"})", "messages", "'messages' is required"},
        BadCase{kChat, R"({"model":"m","messages":"hi"})", "messages", "an array"},
        BadCase{kChat, R"({"model":"m","messages":[]})", "messages", "must not be empty"},
        BadCase{kChat, R"({"model":"m","messages":[5]})", "messages[0]", "an object"},
        BadCase{kChat, R"({"model":"m","messages":[{"content":"x"}]})", "messages[0].role", "required"},
        BadCase{kChat, R"({"model":"m","messages":[{"role":"user","content":7}]})",
                "messages[0].content", "a string or an array"},
        BadCase{kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
                "messages[0].content", "text model"},
        BadCase{kChat,
                R"({"model":"m","messages":[{"role":"assistant","content":"x"}],
                    "continue_final_message":true,"add_generation_prompt":true})",
                "", "Cannot set both `continue_final_message` and `add_generation_prompt` to True."},
        BadCase{kChat,
                R"({"model":"m","messages":[{"role":"user","content":"x"}],
                    "continue_final_message":true,"add_generation_prompt":false})",
                "messages", "when the last message is not from the assistant"},
        BadCase{kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"add_generation_prompt":1})",
                "add_generation_prompt", "a boolean"},
        BadCase{kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"continue_final_message":"yes"})",
                "continue_final_message", "a boolean"},
        BadCase{kResp, R"({"model":"m"})", "input", "'input' is required: a string, or a list"},
        BadCase{kResp, R"({"model":"m","input":5})", "input", "a string or a list of messages"},
        BadCase{kResp, R"({"model":"m","input":[]})", "input", "must not be empty"},
        BadCase{kResp, R"({"model":"m","input":[{"content":"x"}]})", "input[0].role", "required"},
        BadCase{kResp, R"({"model":"m","input":[{"type":"function_call_output","output":"x"}]})",
                "input[0].type", "no other input items"},
        BadCase{kResp,
                R"({"model":"m","input":[{"role":"user","content":[{"type":"text","text":"x"}]}]})",
                "input[0].content", R"({"type": "input_text", "text": ...})"},
        BadCase{kResp, R"({"model":"m","input":"x","instructions":1})", "instructions",
                "'instructions' must be a string"},
        BadCase{kResp, R"({"model":"m","input":"x","max_output_tokens":0})", "max_output_tokens",
                "at least 1"},
        BadCase{kResp, R"({"model":"m","input":"x","top_p":"all"})", "top_p", "a number"}));

TEST(ResponseJsonTest, CompletionCarriesUsageAndFinishReason) {
  ResponseContext ctx{Endpoint::kCompletions, "cmpl-1", "m", 100};
  std::string json = CompletionResponseJson(ctx, " a b", FinishReason::kStop, "END", {3, 2, 1});
  EXPECT_NE(json.find(R"("object":"text_completion")"), std::string::npos);
  EXPECT_NE(json.find(R"("text":" a b")"), std::string::npos);
  EXPECT_NE(json.find(R"("finish_reason":"stop","stop_reason":"END")"), std::string::npos);
  EXPECT_NE(json.find(R"("prompt_tokens":3,"total_tokens":5,"completion_tokens":2)"),
            std::string::npos);
  EXPECT_NE(json.find(R"("cached_tokens":1)"), std::string::npos);
}

TEST(ResponseJsonTest, StreamChunksAreLfFramedSseEvents) {
  ResponseContext ctx{Endpoint::kChatCompletions, "chatcmpl-1", "m", 100};
  std::string out;
  AppendStreamChunk(ctx, "", true, FinishReason::kNone, "", out);
  AppendStreamChunk(ctx, " hi\"", false, FinishReason::kLength, "", out);
  AppendUsageChunk(ctx, {1, 1, 0}, out);
  EXPECT_EQ(out.find("data: {"), 0u);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_NE(out.find(R"("delta":{"role":"assistant","content":""})"), std::string::npos);
  EXPECT_NE(out.find(R"("delta":{"content":" hi\""})"), std::string::npos);
  EXPECT_NE(out.find(R"("finish_reason":"length")"), std::string::npos);
  EXPECT_NE(out.find(R"("choices":[],"usage")"), std::string::npos);
  EXPECT_EQ(out.substr(out.size() - 2), "\n\n");
}

TEST(ResponseJsonTest, ResponseObjectHasTheMessageAndUsage) {
  ResponseContext ctx{Endpoint::kResponses, "resp_0a", "m", 100};
  std::string json = ResponseObjectJson(ctx, " a b", FinishReason::kStop, {3, 2, 1});
  EXPECT_NE(json.find(R"({"id":"resp_0a","object":"response","created_at":100,)"
                      R"("status":"completed","error":null,"incomplete_details":null,"model":"m",)"
                      R"("output":[{"type":"message","id":"msg_0a","status":"completed",)"
                      R"("role":"assistant","content":[{"type":"output_text","text":" a b",)"
                      R"("annotations":[]}]}])"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("usage":{"input_tokens":3,"input_tokens_details":{"cached_tokens":1},)"
                      R"("output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},)"
                      R"("total_tokens":5})"),
            std::string::npos)
      << json;
  std::string cut = ResponseObjectJson(ctx, " a", FinishReason::kLength, {3, 1, 0});
  EXPECT_NE(cut.find(R"("status":"incomplete","error":null,)"
                     R"("incomplete_details":{"reason":"max_output_tokens"})"),
            std::string::npos)
      << cut;
}

// The event types of a stream, in order, and whether their sequence numbers count from 0.
std::vector<std::string> EventTypes(const std::string& stream, bool& numbered) {
  std::vector<std::string> types;
  numbered = true;
  for (size_t at = 0; at < stream.size();) {
    const size_t end = stream.find("\n\n", at);
    if (end == std::string::npos) break;
    const std::string event = stream.substr(at, end - at);
    const std::string type = event.substr(7, event.find('\n') - 7);  // after "event: "
    types.push_back(type);
    const std::string data =
        fmt::format(R"(data: {{"type":"{}","sequence_number":{},)", type, types.size() - 1);
    numbered = numbered && event.starts_with("event: ") && event.find(data) == type.size() + 8;
    at = end + 2;
  }
  return types;
}

TEST(ResponseJsonTest, ResponseEventsAreTypedAndNumbered) {
  ResponseContext ctx{Endpoint::kResponses, "resp_0a", "m", 100};
  ResponseEvents events(ctx);
  std::string out;
  events.Begin(out);
  events.Delta(" a", out);
  events.Delta(" b\"", out);
  events.End(" a b\"", FinishReason::kStop, {3, 2, 0}, out);
  bool numbered = false;
  EXPECT_EQ(EventTypes(out, numbered),
            (std::vector<std::string>{"response.created", "response.in_progress",
                                      "response.output_item.added", "response.content_part.added",
                                      "response.output_text.delta", "response.output_text.delta",
                                      "response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.completed"}));
  EXPECT_TRUE(numbered) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_NE(out.find(R"("status":"in_progress")"), std::string::npos);
  EXPECT_NE(out.find(R"("usage":null)"), std::string::npos);
  EXPECT_NE(out.find(R"("item_id":"msg_0a","output_index":0,"content_index":0,"delta":" b\"")"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(R"("type":"response.output_text.done","sequence_number":6,)"
                     R"("item_id":"msg_0a","output_index":0,"content_index":0,"text":" a b\"")"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(R"("input_tokens":3,)"), std::string::npos);
  EXPECT_NE(out.find(R"("output_tokens":2,)"), std::string::npos);

  std::string cut;
  ResponseEvents(ctx).End("", FinishReason::kLength, {3, 0, 0}, cut);
  EXPECT_NE(cut.find("event: response.incomplete\n"), std::string::npos);
}

TEST(ResponseJsonTest, ModelsSaySimulated) {
  std::string json = ModelsJson({"m", 1, 4096, 256, "instant"});
  EXPECT_NE(json.find(R"("owned_by":"bmas-simulated")"), std::string::npos);
  EXPECT_NE(json.find(R"("max_model_len":4096)"), std::string::npos);
  EXPECT_NE(json.find(R"("max_num_seqs":256)"), std::string::npos);
}

}  // namespace
}  // namespace bmas::engine
