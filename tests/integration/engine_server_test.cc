// Integration tests of `bmas engine`: the real binary on a loopback port, spoken to over
// HTTP as an OpenAI client would, and stopped at the end of each test.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine_process.h"
#include "http_client.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr std::string_view kModel = "meta-llama/Llama-3.1-8B-Instruct";
constexpr std::string_view kModelLabel = R"(model_name="meta-llama/Llama-3.1-8B-Instruct")";

// ---- Request bodies ---------------------------------------------------------------------

std::string CompletionBody(std::string_view prompt, int max_tokens, std::string_view extra = "") {
  return fmt::format(R"({{"model":{},"prompt":{},"max_tokens":{}{}{}}})", Quote(kModel),
                     Quote(prompt), max_tokens, extra.empty() ? "" : ",", extra);
}

std::string ChatBody(std::string_view content, int max_tokens, std::string_view extra = "") {
  return fmt::format(
      R"({{"model":{},"messages":[{{"role":"system","content":"be brief"}},{{"role":"user","content":{}}}],"max_tokens":{}{}{}}})",
      Quote(kModel), Quote(content), max_tokens, extra.empty() ? "" : ",", extra);
}

// A Responses body: "be brief" as the instructions, then `input` (a JSON string or list).
std::string ResponsesBody(std::string_view input_json, std::string_view extra = "") {
  return fmt::format(R"({{"model":{},"instructions":"be brief","input":{}{}{}}})", Quote(kModel),
                     input_json, extra.empty() ? "" : ",", extra);
}

// The tokens of generated text: each is " word" or ".".
std::vector<std::string> SplitTokens(std::string_view text) {
  std::vector<std::string> tokens;
  for (char c : text) {
    if (c == ' ' || c == '.' || tokens.empty() || tokens.back() == ".") {
      tokens.emplace_back(1, c);
    } else {
      tokens.back() += c;
    }
  }
  return tokens;
}

// ---- Metrics ----------------------------------------------------------------------------

std::string Series(std::string_view name, std::string_view extra_labels = "") {
  return fmt::format("{}{{{}{}{}}}", name, kModelLabel, extra_labels.empty() ? "" : ",",
                     extra_labels);
}

// ---- Fixture ----------------------------------------------------------------------------

class EngineTest : public ::testing::Test {
 protected:
  void StartEngine(const std::vector<std::string>& args) {
    auto engine = EngineProcess::Start(args);
    ASSERT_TRUE(engine) << engine.error().message;
    engine_ = std::move(*engine);
    client_ = std::make_unique<HttpClient>(engine_->port());
  }

  void TearDown() override {
    if (engine_ != nullptr && engine_->process().running()) {
      ExitStatus s = engine_->process().Stop(10s);
      EXPECT_TRUE(s.Success()) << "engine " << s.ToString() << "; stderr:\n"
                               << engine_->process().StderrText();
    }
  }

  // A transport failure fails the test and returns status 0.
  HttpResponse Get(std::string_view target) { return Unwrap(client_->Get(target)); }
  HttpResponse Post(std::string_view target, std::string body) {
    return Unwrap(client_->Post(target, std::move(body)));
  }
  static HttpResponse Unwrap(Result<HttpResponse> r) {
    if (!r) {
      ADD_FAILURE() << r.error().message;
      return HttpResponse{};
    }
    return std::move(*r);
  }

  std::string Metrics() {
    HttpResponse r = Get("/metrics");
    EXPECT_EQ(r.status, 200);
    EXPECT_THAT(r.content_type, StartsWith("text/plain"));
    return r.body;
  }
  double Metric(std::string_view name, std::string_view extra_labels = "") {
    std::string series = Series(name, extra_labels);
    auto v = MetricValue(Metrics(), series);
    EXPECT_TRUE(v.has_value()) << "no series " << series;
    return v.value_or(-1);
  }

  // Opens a stream; a failure fails the test and returns nullptr.
  std::unique_ptr<SseStream> OpenStream(std::string_view target, std::string body) {
    auto s = SseStream::Open(engine_->port(), target, std::move(body));
    if (!s) {
      ADD_FAILURE() << s.error().message;
      return nullptr;
    }
    EXPECT_EQ((*s)->status(), 200);
    EXPECT_THAT((*s)->content_type(), StartsWith("text/event-stream"));
    return std::move(*s);
  }

  std::unique_ptr<EngineProcess> engine_;
  std::unique_ptr<HttpClient> client_;
};

class InstantEngineTest : public EngineTest {
 protected:
  void SetUp() override {
    StartEngine({"--profile", "instant", "--max-model-len", "4096", "--max-num-seqs", "7",
                 "--block-size", "16"});
  }
};

// ---- Non-streaming ----------------------------------------------------------------------

TEST_F(InstantEngineTest, CompletionReturnsExactlyMaxTokensWithExactUsage) {
  HttpResponse r = Post("/v1/completions", CompletionBody(PromptOfTokens(10), 12));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.content_type, StartsWith("application/json"));
  auto doc = ParseJson(r.body);
  EXPECT_THAT(Str(At(doc, "id")), StartsWith("cmpl-"));
  EXPECT_EQ(Str(At(doc, "object")), "text_completion");
  EXPECT_EQ(Str(At(doc, "model")), kModel);
  const auto& choice = At(At(doc, "choices"), 0);
  EXPECT_EQ(At(doc, "choices").Size(), 1u);
  EXPECT_EQ(Int(At(choice, "index")), 0);
  EXPECT_EQ(Str(At(choice, "finish_reason")), "length");
  EXPECT_EQ(SplitTokens(Str(At(choice, "text"))).size(), 12u) << Str(At(choice, "text"));
  const auto& usage = At(doc, "usage");
  EXPECT_EQ(Int(At(usage, "prompt_tokens")), 10);
  EXPECT_EQ(Int(At(usage, "completion_tokens")), 12);
  EXPECT_EQ(Int(At(usage, "total_tokens")), 22);
  EXPECT_EQ(Int(At(At(usage, "prompt_tokens_details"), "cached_tokens")), 0);
}

// Two replicas started in the same second give different ids (a client or a gateway keys on
// them), and `created` is each request's time, not the server's start.
TEST_F(InstantEngineTest, CompletionIdsAreUniqueAcrossServersAndCreatedIsTheRequestsTime) {
  auto other = EngineProcess::Start({"--profile", "instant"});
  ASSERT_TRUE(other) << other.error().message;
  HttpClient other_client((*other)->port());
  std::set<std::string> ids;
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const int64_t before = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  for (int i = 0; i < 5; ++i) {
    for (HttpClient* c : {client_.get(), &other_client}) {
      auto r = c->Post("/v1/chat/completions", ChatBody("hello", 2));
      ASSERT_TRUE(r && r->status == 200);
      auto doc = ParseJson(r->body);
      ids.insert(Str(At(doc, "id")));
      EXPECT_GE(Int(At(doc, "created")), before);
    }
  }
  EXPECT_EQ(ids.size(), 10u);
}

TEST_F(InstantEngineTest, ChatCompletionReturnsAssistantMessageWithExactUsage) {
  HttpResponse r = Post("/v1/chat/completions", ChatBody("hello there", 9));
  ASSERT_EQ(r.status, 200) << r.body;
  auto doc = ParseJson(r.body);
  EXPECT_THAT(Str(At(doc, "id")), StartsWith("chatcmpl-"));
  EXPECT_EQ(Str(At(doc, "object")), "chat.completion");
  EXPECT_EQ(Str(At(doc, "model")), kModel);
  const auto& choice = At(At(doc, "choices"), 0);
  EXPECT_EQ(Str(At(At(choice, "message"), "role")), "assistant");
  std::string content = Str(At(At(choice, "message"), "content"));
  EXPECT_EQ(SplitTokens(content).size(), 9u) << content;
  EXPECT_EQ(Str(At(choice, "finish_reason")), "length");
  const auto& usage = At(doc, "usage");
  EXPECT_GT(Int(At(usage, "prompt_tokens")), 0);
  EXPECT_EQ(Int(At(usage, "completion_tokens")), 9);
  EXPECT_EQ(Int(At(usage, "total_tokens")),
            Int(At(usage, "prompt_tokens")) + Int(At(usage, "completion_tokens")));

  // Content given as text parts is the same prompt as the plain string.
  r = Post(
      "/v1/chat/completions",
      fmt::format(
          R"({{"model":{},"messages":[{{"role":"system","content":"be brief"}},{{"role":"user","content":[{{"type":"text","text":"hello "}},{{"type":"text","text":"there"}}]}}],"max_tokens":9}})",
          Quote(kModel)));
  ASSERT_EQ(r.status, 200) << r.body;
  auto parts = ParseJson(r.body);
  EXPECT_EQ(Int(At(At(parts, "usage"), "prompt_tokens")), Int(At(usage, "prompt_tokens")));
  EXPECT_EQ(Str(At(At(At(At(parts, "choices"), 0), "message"), "content")), content);

  // max_completion_tokens is the newer name of max_tokens.
  r = Post(
      "/v1/chat/completions",
      fmt::format(
          R"({{"model":{},"messages":[{{"role":"user","content":"hi"}}],"max_completion_tokens":4}})",
          Quote(kModel)));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Int(At(At(ParseJson(r.body), "usage"), "completion_tokens")), 4);
}

TEST_F(EngineTest, ChatWithoutMaxTokensUsesDefaultChatMaxTokens) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({"--profile", "instant", "--default-chat-max-tokens", "5"}));
  HttpResponse r =
      Post("/v1/chat/completions",
           fmt::format(R"({{"model":{},"messages":[{{"role":"user","content":"hi"}}]}})",
                       Quote(kModel)));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Int(At(At(ParseJson(r.body), "usage"), "completion_tokens")), 5);
}

TEST_F(InstantEngineTest, EchoPrependsThePrompt) {
  const std::string prompt = PromptOfTokens(5);
  HttpResponse plain = Post("/v1/completions", CompletionBody(prompt, 4));
  HttpResponse echoed = Post("/v1/completions", CompletionBody(prompt, 4, R"("echo":true)"));
  ASSERT_EQ(plain.status, 200) << plain.body;
  ASSERT_EQ(echoed.status, 200) << echoed.body;
  auto text = [](const HttpResponse& r) {
    return Str(At(At(At(ParseJson(r.body), "choices"), 0), "text"));
  };
  EXPECT_EQ(text(echoed), prompt + text(plain));
  EXPECT_EQ(Int(At(At(ParseJson(echoed.body), "usage"), "completion_tokens")), 4);
}

TEST_F(InstantEngineTest, SameRequestGivesSameTextAndOtherPromptOtherText) {
  std::string body = CompletionBody("the same prompt every time", 20);
  HttpResponse a = Post("/v1/completions", body);
  HttpResponse b = Post("/v1/completions", body);
  HttpResponse c = Post("/v1/completions", CompletionBody("another prompt entirely", 20));
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(b.status, 200);
  ASSERT_EQ(c.status, 200);
  auto text = [](const HttpResponse& r) {
    return Str(At(At(At(ParseJson(r.body), "choices"), 0), "text"));
  };
  EXPECT_EQ(text(a), text(b));
  EXPECT_NE(text(a), text(c));
  // One keep-alive connection carried all three.
  EXPECT_EQ(client_->connections_opened(), 1);
}

TEST_F(InstantEngineTest, StopStringEndsTheCompletionBeforeIt) {
  const std::string prompt = "a prompt for stop strings";
  HttpResponse full = Post("/v1/completions", CompletionBody(prompt, 30));
  ASSERT_EQ(full.status, 200) << full.body;
  const std::string text = Str(At(At(At(ParseJson(full.body), "choices"), 0), "text"));
  // Stop at the sixth word (its first occurrence may be earlier).
  std::vector<std::string> tokens = SplitTokens(text);
  ASSERT_EQ(tokens.size(), 30u);
  std::string stop;
  for (size_t i = 5; i < tokens.size() && stop.empty(); ++i) {
    if (tokens[i] != ".") stop = tokens[i];
  }
  ASSERT_FALSE(stop.empty()) << text;
  const std::string expected = text.substr(0, text.find(stop));
  const double stops_before = Metric("vllm:request_success_total", R"(finished_reason="stop")");

  for (const std::string& stop_field :
       {Quote(stop), fmt::format(R"(["never appears", {}])", Quote(stop))}) {
    SCOPED_TRACE("stop = " + stop_field);
    HttpResponse r = Post("/v1/completions",
                          CompletionBody(prompt, 30, fmt::format(R"("stop":{})", stop_field)));
    ASSERT_EQ(r.status, 200) << r.body;
    auto doc = ParseJson(r.body);
    const auto& choice = At(At(doc, "choices"), 0);
    EXPECT_EQ(Str(At(choice, "finish_reason")), "stop");
    EXPECT_EQ(Str(At(choice, "stop_reason")), stop);
    EXPECT_EQ(Str(At(choice, "text")), expected);
    EXPECT_THAT(Str(At(choice, "text")), Not(HasSubstr(stop)));
  }
  EXPECT_EQ(Metric("vllm:request_success_total", R"(finished_reason="stop")"), stops_before + 2);

  // Streaming: the stop text never reaches the client, and the last chunk says "stop".
  auto s = OpenStream(
      "/v1/completions",
      CompletionBody(prompt, 30, fmt::format(R"("stream":true,"stop":{})", Quote(stop))));
  ASSERT_NE(s, nullptr);
  auto events = s->ReadAll();
  ASSERT_TRUE(events) << events.error().message;
  ASSERT_GE(events->size(), 2u);
  EXPECT_EQ(events->back(), "[DONE]");
  std::string assembled;
  std::string last_finish;
  for (size_t i = 0; i + 1 < events->size(); ++i) {
    auto chunk = ParseJson((*events)[i]);
    const auto& choice = At(At(chunk, "choices"), 0);
    assembled += Str(At(choice, "text"));
    if (At(choice, "finish_reason").IsString()) {
      EXPECT_EQ(i + 2, events->size()) << "finish_reason before the last chunk";
      last_finish = Str(At(choice, "finish_reason"));
    }
  }
  EXPECT_EQ(assembled, expected);
  EXPECT_EQ(last_finish, "stop");
}

// A stop string matched in the very token that reaches max_tokens still ends the request as
// "stop", in the response and in the metrics (as vLLM: stop strings are checked before the
// length cap is reported).
TEST_F(InstantEngineTest, StopStringInTheLastTokenCountsAsStop) {
  const std::string prompt = "find a unique last token";
  std::string stop;
  int max_tokens = 0;
  std::string expected;
  for (int n = 3; n <= 24 && stop.empty(); ++n) {
    HttpResponse r = Post("/v1/completions", CompletionBody(prompt, n));
    ASSERT_EQ(r.status, 200) << r.body;
    const std::string text = Str(At(At(At(ParseJson(r.body), "choices"), 0), "text"));
    const std::string last = SplitTokens(text).back();
    if (last != "." && text.find(last) == text.size() - last.size()) {
      stop = last;
      max_tokens = n;
      expected = text.substr(0, text.size() - last.size());
    }
  }
  ASSERT_FALSE(stop.empty()) << "no completion whose last word is new";
  const double stops = Metric("vllm:request_success_total", R"(finished_reason="stop")");
  const double lengths = Metric("vllm:request_success_total", R"(finished_reason="length")");

  HttpResponse r =
      Post("/v1/completions",
           CompletionBody(prompt, max_tokens, fmt::format(R"("stop":{})", Quote(stop))));
  ASSERT_EQ(r.status, 200) << r.body;
  const rapidjson::Document doc = ParseJson(r.body);
  const auto& choice = At(At(doc, "choices"), 0);
  EXPECT_EQ(Str(At(choice, "text")), expected);
  EXPECT_EQ(Str(At(choice, "finish_reason")), "stop");
  EXPECT_EQ(Metric("vllm:request_success_total", R"(finished_reason="stop")"), stops + 1);
  EXPECT_EQ(Metric("vllm:request_success_total", R"(finished_reason="length")"), lengths);
}

// A stop string that spans tokens ends the text before it; one whose start appears but whose
// whole never does loses nothing. Streaming (which holds back text that could begin a stop
// string) and non-streaming agree.
TEST_F(InstantEngineTest, StopStringsSpanningTokensAndPartialMatches) {
  const std::string prompt = "a prompt for multi-token stops";
  HttpResponse full = Post("/v1/completions", CompletionBody(prompt, 24));
  ASSERT_EQ(full.status, 200) << full.body;
  const std::string text = Str(At(At(At(ParseJson(full.body), "choices"), 0), "text"));
  std::vector<std::string> tokens = SplitTokens(text);
  ASSERT_EQ(tokens.size(), 24u);
  const std::string spanning = tokens[6] + tokens[7] + tokens[8];
  const std::string partial = tokens[6] + " zzzz";
  ASSERT_EQ(text.find(partial), std::string::npos);
  struct Case {
    std::string stop;
    std::string expected_text;
    std::string expected_finish;
  };
  const Case kCases[] = {
      {spanning, text.substr(0, text.find(spanning)), "stop"},
      {partial, text, "length"},
  };
  for (const Case& c : kCases) {
    SCOPED_TRACE("stop = " + Quote(c.stop));
    const std::string stop_field = fmt::format(R"("stop":{})", Quote(c.stop));
    HttpResponse r = Post("/v1/completions", CompletionBody(prompt, 24, stop_field));
    ASSERT_EQ(r.status, 200) << r.body;
    const auto doc = ParseJson(r.body);
    EXPECT_EQ(Str(At(At(At(doc, "choices"), 0), "text")), c.expected_text);
    EXPECT_EQ(Str(At(At(At(doc, "choices"), 0), "finish_reason")), c.expected_finish);

    auto s = OpenStream("/v1/completions",
                        CompletionBody(prompt, 24, std::string(R"("stream":true,)") + stop_field));
    ASSERT_NE(s, nullptr);
    auto events = s->ReadAll();
    ASSERT_TRUE(events) << events.error().message;
    ASSERT_GE(events->size(), 2u);
    EXPECT_EQ(events->back(), "[DONE]");
    std::string assembled, finish;
    for (size_t i = 0; i + 1 < events->size(); ++i) {
      const auto chunk = ParseJson((*events)[i]);
      assembled += Str(At(At(At(chunk, "choices"), 0), "text"));
      if (At(At(At(chunk, "choices"), 0), "finish_reason").IsString()) {
        finish = Str(At(At(At(chunk, "choices"), 0), "finish_reason"));
      }
    }
    EXPECT_EQ(assembled, c.expected_text);
    EXPECT_EQ(finish, c.expected_finish);
  }
}

// ---- Streaming --------------------------------------------------------------------------

// Checks the framing of a whole SSE body: "data: ...\n\n" events, LF only, ending with
// "data: [DONE]\n\n".
void ExpectSseFraming(const std::string& raw) {
  EXPECT_EQ(raw.find('\r'), std::string::npos) << "CR in the event stream";
  EXPECT_TRUE(raw.ends_with("\n\ndata: [DONE]\n\n")) << raw;
  size_t pos = 0;
  while (pos < raw.size()) {
    EXPECT_EQ(raw.compare(pos, 6, "data: "), 0) << "event at " << pos << " of:\n" << raw;
    size_t end = raw.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos);
    EXPECT_EQ(raw.find('\n', pos), end) << "an event spans lines";
    pos = end + 2;
  }
}

TEST_F(InstantEngineTest, StreamingCompletionSendsOneEventPerToken) {
  const std::string prompt = PromptOfTokens(8);
  HttpResponse whole = Post("/v1/completions", CompletionBody(prompt, 10));
  ASSERT_EQ(whole.status, 200);
  const std::string whole_text = Str(At(At(At(ParseJson(whole.body), "choices"), 0), "text"));

  auto s = OpenStream("/v1/completions", CompletionBody(prompt, 10, R"("stream":true)"));
  ASSERT_NE(s, nullptr);
  auto events = s->ReadAll();
  ASSERT_TRUE(events) << events.error().message;
  ExpectSseFraming(s->raw_body());
  ASSERT_EQ(events->size(), 11u) << s->raw_body();
  std::string assembled;
  std::string id;
  for (size_t i = 0; i < 10; ++i) {
    SCOPED_TRACE(fmt::format("event {}", i));
    auto chunk = ParseJson((*events)[i]);
    if (i == 0) id = Str(At(chunk, "id"));
    EXPECT_THAT(Str(At(chunk, "id")), StartsWith("cmpl-"));
    EXPECT_EQ(Str(At(chunk, "id")), id);
    EXPECT_EQ(Str(At(chunk, "object")), "text_completion");
    EXPECT_FALSE(chunk.HasMember("usage") && !chunk["usage"].IsNull());
    const auto& choice = At(At(chunk, "choices"), 0);
    std::string text = Str(At(choice, "text"));
    EXPECT_EQ(SplitTokens(text).size(), 1u) << text;
    assembled += text;
    if (i < 9) {
      EXPECT_TRUE(At(choice, "finish_reason").IsNull());
    } else {
      EXPECT_EQ(Str(At(choice, "finish_reason")), "length");
    }
  }
  EXPECT_EQ((*events)[10], "[DONE]");
  EXPECT_EQ(assembled, whole_text);
}

TEST_F(InstantEngineTest, StreamingCompletionWithIncludeUsageEndsWithUsageChunk) {
  auto s = OpenStream("/v1/completions",
                      CompletionBody(PromptOfTokens(6), 5,
                                     R"("stream":true,"stream_options":{"include_usage":true})"));
  ASSERT_NE(s, nullptr);
  auto events = s->ReadAll();
  ASSERT_TRUE(events) << events.error().message;
  ExpectSseFraming(s->raw_body());
  ASSERT_EQ(events->size(), 7u) << s->raw_body();  // 5 tokens, usage, [DONE]
  for (size_t i = 0; i < 5; ++i) {
    auto chunk = ParseJson((*events)[i]);
    EXPECT_EQ(At(chunk, "choices").Size(), 1u);
    EXPECT_FALSE(chunk.HasMember("usage") && !chunk["usage"].IsNull());
  }
  auto usage_chunk = ParseJson((*events)[5]);
  ASSERT_TRUE(At(usage_chunk, "choices").IsArray());
  EXPECT_EQ(At(usage_chunk, "choices").Size(), 0u);
  const auto& usage = At(usage_chunk, "usage");
  EXPECT_EQ(Int(At(usage, "prompt_tokens")), 6);
  EXPECT_EQ(Int(At(usage, "completion_tokens")), 5);
  EXPECT_EQ(Int(At(usage, "total_tokens")), 11);
  EXPECT_EQ((*events)[6], "[DONE]");
}

TEST_F(InstantEngineTest, StreamingChatStartsWithRoleAndEndsWithUsage) {
  auto s = OpenStream(
      "/v1/chat/completions",
      ChatBody("stream to me", 6, R"("stream":true,"stream_options":{"include_usage":true})"));
  ASSERT_NE(s, nullptr);
  auto events = s->ReadAll();
  ASSERT_TRUE(events) << events.error().message;
  ExpectSseFraming(s->raw_body());
  // The role chunk, 6 token chunks, usage, [DONE].
  ASSERT_EQ(events->size(), 9u) << s->raw_body();
  auto first = ParseJson((*events)[0]);
  const std::string id = Str(At(first, "id"));
  EXPECT_THAT(id, StartsWith("chatcmpl-"));
  const auto& first_delta = At(At(At(first, "choices"), 0), "delta");
  EXPECT_EQ(Str(At(first_delta, "role")), "assistant");
  EXPECT_EQ(Str(At(first_delta, "content")), "");
  std::string content;
  for (size_t i = 1; i <= 6; ++i) {
    SCOPED_TRACE(fmt::format("event {}", i));
    auto chunk = ParseJson((*events)[i]);
    EXPECT_EQ(Str(At(chunk, "object")), "chat.completion.chunk");
    EXPECT_EQ(Str(At(chunk, "id")), id);
    const auto& choice = At(At(chunk, "choices"), 0);
    std::string piece = Str(At(At(choice, "delta"), "content"));
    EXPECT_EQ(SplitTokens(piece).size(), 1u) << piece;
    content += piece;
    if (i < 6) {
      EXPECT_TRUE(At(choice, "finish_reason").IsNull());
    } else {
      EXPECT_EQ(Str(At(choice, "finish_reason")), "length");
    }
  }
  auto usage_chunk = ParseJson((*events)[7]);
  EXPECT_EQ(At(usage_chunk, "choices").Size(), 0u);
  EXPECT_EQ(Int(At(At(usage_chunk, "usage"), "completion_tokens")), 6);
  EXPECT_EQ((*events)[8], "[DONE]");

  // The same request without streaming gives the same content.
  HttpResponse whole = Post("/v1/chat/completions", ChatBody("stream to me", 6));
  EXPECT_EQ(Str(At(At(At(At(ParseJson(whole.body), "choices"), 0), "message"), "content")),
            content);
}

// ---- The Responses API -------------------------------------------------------------------

TEST_F(InstantEngineTest, ResponsesAnswerAsTheSameChatWould) {
  HttpResponse r =
      Post("/v1/responses", ResponsesBody(Quote("hello there"), R"("max_output_tokens":9)"));
  ASSERT_EQ(r.status, 200) << r.body;
  auto doc = ParseJson(r.body);
  EXPECT_THAT(Str(At(doc, "id")), StartsWith("resp_"));
  EXPECT_EQ(Str(At(doc, "object")), "response");
  EXPECT_EQ(Str(At(doc, "model")), kModel);
  EXPECT_GT(Int(At(doc, "created_at")), 1700000000);
  // Cut at max_output_tokens, as OpenAI reports it.
  EXPECT_EQ(Str(At(doc, "status")), "incomplete");
  EXPECT_EQ(Str(At(At(doc, "incomplete_details"), "reason")), "max_output_tokens");
  const auto& message = At(At(doc, "output"), 0);
  EXPECT_EQ(Str(At(message, "type")), "message");
  EXPECT_THAT(Str(At(message, "id")), StartsWith("msg_"));
  EXPECT_EQ(Str(At(message, "role")), "assistant");
  const auto& part = At(At(message, "content"), 0);
  EXPECT_EQ(Str(At(part, "type")), "output_text");
  EXPECT_EQ(At(part, "annotations").Size(), 0u);
  const std::string text = Str(At(part, "text"));
  EXPECT_EQ(SplitTokens(text).size(), 9u) << text;
  const auto& usage = At(doc, "usage");
  EXPECT_EQ(Int(At(usage, "output_tokens")), 9);
  EXPECT_EQ(Int(At(usage, "total_tokens")),
            Int(At(usage, "input_tokens")) + Int(At(usage, "output_tokens")));

  // The instructions are the system message: the same prompt as the chat, the same answer.
  HttpResponse chat = Post("/v1/chat/completions", ChatBody("hello there", 9));
  ASSERT_EQ(chat.status, 200) << chat.body;
  auto chat_doc = ParseJson(chat.body);
  EXPECT_EQ(Int(At(usage, "input_tokens")), Int(At(At(chat_doc, "usage"), "prompt_tokens")));
  EXPECT_EQ(text, Str(At(At(At(At(chat_doc, "choices"), 0), "message"), "content")));

  // Input as a list of messages with input_text parts is the same prompt.
  r = Post("/v1/responses",
           ResponsesBody(R"([{"role":"user","content":[{"type":"input_text","text":"hello "},)"
                         R"({"type":"input_text","text":"there"}]}])",
                         R"("max_output_tokens":9,"temperature":0.7,"top_p":0.9)"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Str(At(At(At(At(At(ParseJson(r.body), "output"), 0), "content"), 0), "text")), text);

  // Without max_output_tokens the answer runs to the engine's default length: complete.
  r = Post("/v1/responses", fmt::format(R"({{"model":{},"input":"hi"}})", Quote(kModel)));
  ASSERT_EQ(r.status, 200) << r.body;
  auto natural = ParseJson(r.body);
  EXPECT_EQ(Str(At(natural, "status")), "completed");
  EXPECT_TRUE(At(natural, "incomplete_details").IsNull());
  EXPECT_EQ(Int(At(At(natural, "usage"), "output_tokens")), 256);
}

TEST_F(InstantEngineTest, StreamedResponseSendsTypedEventsOneDeltaPerToken) {
  auto s = OpenStream("/v1/responses", ResponsesBody(Quote("stream to me"), R"("stream":true)"));
  ASSERT_NE(s, nullptr);
  auto events = s->ReadAll();
  ASSERT_TRUE(events) << events.error().message;
  const std::string& raw = s->raw_body();
  EXPECT_EQ(raw.find('\r'), std::string::npos);
  EXPECT_EQ(raw.find("[DONE]"), std::string::npos) << "the Responses API ends without [DONE]";
  std::vector<std::string> types;
  std::string text, id;
  for (size_t i = 0; i < events->size(); ++i) {
    SCOPED_TRACE(fmt::format("event {}", i));
    auto event = ParseJson((*events)[i]);
    types.push_back(Str(At(event, "type")));
    EXPECT_EQ(Int(At(event, "sequence_number")), static_cast<int64_t>(i));
    // Each event's `event:` line names its type.
    EXPECT_NE(raw.find(fmt::format("event: {}\ndata: {}\n\n", types.back(), (*events)[i])),
              std::string::npos);
    if (types.back() == "response.output_text.delta") {
      const std::string delta = Str(At(event, "delta"));
      EXPECT_EQ(SplitTokens(delta).size(), 1u) << delta;
      text += delta;
    }
    if (i == 0) id = Str(At(At(event, "response"), "id"));
  }
  const size_t deltas = std::count(types.begin(), types.end(), "response.output_text.delta");
  EXPECT_EQ(deltas, 256u);
  ASSERT_EQ(types.size(), deltas + 8) << raw.substr(0, 2000);
  EXPECT_THAT(std::vector<std::string>(types.begin(), types.begin() + 4),
              ::testing::ElementsAre("response.created", "response.in_progress",
                                     "response.output_item.added", "response.content_part.added"));
  EXPECT_THAT(std::vector<std::string>(types.end() - 4, types.end()),
              ::testing::ElementsAre("response.output_text.done", "response.content_part.done",
                                     "response.output_item.done", "response.completed"));
  auto created = ParseJson(events->front());
  EXPECT_EQ(Str(At(At(created, "response"), "status")), "in_progress");
  EXPECT_TRUE(At(At(created, "response"), "usage").IsNull());
  auto completed = ParseJson(events->back());
  const auto& response = At(completed, "response");
  EXPECT_EQ(Str(At(response, "id")), id);
  EXPECT_EQ(Str(At(response, "status")), "completed");
  EXPECT_EQ(Str(At(At(At(At(At(response, "output"), 0), "content"), 0), "text")), text);
  EXPECT_EQ(Int(At(At(response, "usage"), "output_tokens")), 256);

  // The same request without streaming gives the same text.
  HttpResponse whole = Post("/v1/responses", ResponsesBody(Quote("stream to me")));
  ASSERT_EQ(whole.status, 200) << whole.body;
  auto doc = ParseJson(whole.body);
  EXPECT_EQ(Str(At(At(At(At(At(doc, "output"), 0), "content"), 0), "text")), text);
  EXPECT_EQ(Int(At(At(doc, "usage"), "input_tokens")),
            Int(At(At(response, "usage"), "input_tokens")));
}

TEST_F(InstantEngineTest, StreamingChatWithoutIncludeUsageSendsNoUsage) {
  auto s = OpenStream("/v1/chat/completions", ChatBody("no usage please", 3, R"("stream":true)"));
  ASSERT_NE(s, nullptr);
  auto events = s->ReadAll();
  ASSERT_TRUE(events) << events.error().message;
  ExpectSseFraming(s->raw_body());
  ASSERT_EQ(events->size(), 5u) << s->raw_body();  // role, 3 tokens, [DONE]
  for (size_t i = 0; i < 4; ++i) {
    auto chunk = ParseJson((*events)[i]);
    EXPECT_EQ(At(chunk, "choices").Size(), 1u);
    EXPECT_FALSE(chunk.HasMember("usage") && !chunk["usage"].IsNull()) << (*events)[i];
  }
  EXPECT_EQ((*events)[4], "[DONE]");
}

// ---- Models, health, version ------------------------------------------------------------

TEST_F(InstantEngineTest, ModelsListsTheModelWithItsLimits) {
  HttpResponse r = Get("/v1/models");
  ASSERT_EQ(r.status, 200) << r.body;
  auto doc = ParseJson(r.body);
  EXPECT_EQ(Str(At(doc, "object")), "list");
  ASSERT_EQ(At(doc, "data").Size(), 1u) << r.body;
  const auto& m = At(At(doc, "data"), 0);
  EXPECT_EQ(Str(At(m, "id")), kModel);
  EXPECT_EQ(Str(At(m, "object")), "model");
  EXPECT_EQ(Str(At(m, "owned_by")), "bmas-simulated");
  EXPECT_EQ(Int(At(m, "max_model_len")), 4096);
  EXPECT_EQ(Int(At(m, "max_num_seqs")), 7);
  EXPECT_GT(Int(At(m, "created")), 0);
}

TEST_F(EngineTest, ModelFlagRenamesTheServedModel) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({"--profile", "instant", "--model", "acme/test-model"}));
  HttpResponse r = Get("/v1/models");
  EXPECT_EQ(Str(At(At(At(ParseJson(r.body), "data"), 0), "id")), "acme/test-model");
  r = Post("/v1/completions", R"({"model":"acme/test-model","prompt":"hi","max_tokens":2})");
  EXPECT_EQ(r.status, 200) << r.body;
  ExpectError(Post("/v1/completions", CompletionBody("hi", 2)), 404, "model");
  EXPECT_THAT(Metrics(), HasSubstr(R"(vllm:num_requests_running{model_name="acme/test-model"})"));
}

TEST_F(InstantEngineTest, HealthAndVersionSaySimulated) {
  HttpResponse health = Get("/health");
  EXPECT_EQ(health.status, 200);
  auto h = ParseJson(health.body);
  EXPECT_TRUE(At(h, "simulated").IsBool() && At(h, "simulated").GetBool()) << health.body;

  HttpResponse version = Get("/version");
  EXPECT_EQ(version.status, 200);
  auto v = ParseJson(version.body);
  EXPECT_TRUE(At(v, "version").IsString()) << version.body;
  EXPECT_TRUE(At(v, "simulated").IsBool() && At(v, "simulated").GetBool()) << version.body;
  EXPECT_THAT(Str(At(v, "engine")), HasSubstr("simulated"));
  EXPECT_EQ(Str(At(v, "profile")), "instant");
}

// ---- Metrics ----------------------------------------------------------------------------

TEST_F(InstantEngineTest, MetricsExposeVllmSeriesWithModelName) {
  const std::string text = Metrics();
  struct Expected {
    const char* name;
    const char* type;
    const char* series_suffix;  // what follows the name in a sample line
  };
  const Expected kExpected[] = {
      {"vllm:num_requests_running", "gauge", ""},
      {"vllm:num_requests_waiting", "gauge", ""},
      {"vllm:kv_cache_usage_perc", "gauge", ""},
      {"vllm:prefix_cache_queries_total", "counter", ""},
      {"vllm:prefix_cache_hits_total", "counter", ""},
      {"vllm:num_preemptions_total", "counter", ""},
      {"vllm:prompt_tokens_total", "counter", ""},
      {"vllm:generation_tokens_total", "counter", ""},
      {"vllm:iteration_tokens_total", "histogram", "_count"},
      {"vllm:time_to_first_token_seconds", "histogram", "_count"},
      {"vllm:inter_token_latency_seconds", "histogram", "_count"},
      {"vllm:e2e_request_latency_seconds", "histogram", "_count"},
      {"vllm:request_queue_time_seconds", "histogram", "_count"},
      {"vllm:request_prefill_time_seconds", "histogram", "_count"},
      {"vllm:request_decode_time_seconds", "histogram", "_count"},
  };
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.name);
    EXPECT_THAT(text, HasSubstr(fmt::format("# TYPE {} {}\n", e.name, e.type)));
    EXPECT_TRUE(MetricValue(text, Series(std::string(e.name) + e.series_suffix)).has_value());
    if (std::string_view(e.type) == "histogram") {
      EXPECT_THAT(text,
                  HasSubstr(fmt::format("{}_bucket{{{},le=\"+Inf\"}} ", e.name, kModelLabel)));
      EXPECT_TRUE(MetricValue(text, Series(std::string(e.name) + "_sum")).has_value());
    }
  }
  for (const char* reason : {"stop", "length", "abort"}) {
    EXPECT_TRUE(MetricValue(text, Series("vllm:request_success_total",
                                         fmt::format("finished_reason=\"{}\"", reason)))
                    .has_value())
        << reason;
  }
  EXPECT_EQ(MetricValue(text, Series("vllm:num_requests_running")), 0.0);
  EXPECT_EQ(MetricValue(text, Series("vllm:generation_tokens_total")), 0.0);
}

TEST_F(InstantEngineTest, MetricsCountWhatRequestsDo) {
  const std::string before = Metrics();
  HttpResponse r = Post("/v1/completions", CompletionBody(PromptOfTokens(20), 13));
  ASSERT_EQ(r.status, 200) << r.body;
  auto s = OpenStream("/v1/chat/completions", ChatBody("count me too", 4, R"("stream":true)"));
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->ReadAll());
  HttpResponse chat = Post("/v1/chat/completions", ChatBody("count me too", 4));
  const int64_t chat_prompt = Int(At(At(ParseJson(chat.body), "usage"), "prompt_tokens"));
  ASSERT_GT(chat_prompt, 0);
  const std::string after = Metrics();

  auto delta = [&](std::string_view name, std::string_view labels = "") {
    std::string series = Series(name, labels);
    auto b = MetricValue(before, series);
    auto a = MetricValue(after, series);
    EXPECT_TRUE(a && b) << series;
    return a.value_or(0) - b.value_or(0);
  };
  EXPECT_EQ(delta("vllm:generation_tokens_total"), 13 + 4 + 4);
  EXPECT_EQ(delta("vllm:prompt_tokens_total"), 20 + 2 * chat_prompt);
  EXPECT_EQ(delta("vllm:request_success_total", R"(finished_reason="length")"), 3);
  EXPECT_EQ(delta("vllm:request_success_total", R"(finished_reason="stop")"), 0);
  EXPECT_EQ(delta("vllm:request_success_total", R"(finished_reason="abort")"), 0);
  EXPECT_EQ(delta("vllm:e2e_request_latency_seconds_count"), 3);
  EXPECT_EQ(delta("vllm:time_to_first_token_seconds_count"), 3);
  EXPECT_EQ(delta("vllm:inter_token_latency_seconds_count"), 12 + 3 + 3);
  EXPECT_EQ(delta("vllm:request_queue_time_seconds_count"), 3);
  EXPECT_EQ(delta("vllm:request_prefill_time_seconds_count"), 3);
  EXPECT_EQ(delta("vllm:request_decode_time_seconds_count"), 3);
  // Sequential requests: at least one step per generated token.
  EXPECT_GE(delta("vllm:iteration_tokens_total_count"), 13 + 4 + 4);
  EXPECT_EQ(MetricValue(after, Series("vllm:num_requests_running")), 0.0);
  EXPECT_EQ(MetricValue(after, Series("vllm:num_requests_waiting")), 0.0);
}

// ---- Prefix caching ---------------------------------------------------------------------

TEST_F(InstantEngineTest, RepeatedLongPromptHitsThePrefixCache) {
  const std::string body = CompletionBody(PromptOfTokens(2000), 1);
  HttpResponse first = Post("/v1/completions", body);
  ASSERT_EQ(first.status, 200) << first.body;
  const rapidjson::Document first_doc = ParseJson(first.body);
  const auto& u1 = At(first_doc, "usage");
  EXPECT_EQ(Int(At(u1, "prompt_tokens")), 2000);
  EXPECT_EQ(Int(At(At(u1, "prompt_tokens_details"), "cached_tokens")), 0);

  const double hits_before = Metric("vllm:prefix_cache_hits_total");
  const double queries_before = Metric("vllm:prefix_cache_queries_total");
  HttpResponse second = Post("/v1/completions", body);
  ASSERT_EQ(second.status, 200) << second.body;
  const int64_t cached =
      Int(At(At(At(ParseJson(second.body), "usage"), "prompt_tokens_details"), "cached_tokens"));
  // Whole 16-token blocks, never the last prompt token (it must be computed): as vLLM.
  EXPECT_EQ(cached, (2000 - 1) / 16 * 16);
  EXPECT_EQ(Metric("vllm:prefix_cache_hits_total") - hits_before, cached);
  EXPECT_EQ(Metric("vllm:prefix_cache_queries_total") - queries_before, 2000);
  EXPECT_THAT(Metrics(), HasSubstr(R"(enable_prefix_caching="True")"));
}

TEST_F(EngineTest, NoPrefixCachingFlagDisablesHits) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({"--profile", "instant", "--no-prefix-caching"}));
  const std::string body = CompletionBody(PromptOfTokens(2000), 1);
  for (int i = 0; i < 2; ++i) {
    HttpResponse r = Post("/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(Int(At(At(At(ParseJson(r.body), "usage"), "prompt_tokens_details"), "cached_tokens")),
              0);
  }
  EXPECT_EQ(Metric("vllm:prefix_cache_hits_total"), 0);
  EXPECT_THAT(Metrics(), HasSubstr(R"(enable_prefix_caching="False")"));
}

// ---- Errors -----------------------------------------------------------------------------

TEST_F(InstantEngineTest, EveryBadRequestGetsAnOpenAiError) {
  const std::string m = Quote(kModel);
  struct Case {
    const char* name;
    http::verb method;
    std::string target;
    std::string body;
    int status;
    std::optional<std::string> param;
  };
  const Case kCases[] = {
      {"invalid JSON", http::verb::post, "/v1/completions", R"({"model": )", 400, std::nullopt},
      {"invalid JSON chat", http::verb::post, "/v1/chat/completions", "not json", 400,
       std::nullopt},
      {"not an object", http::verb::post, "/v1/completions", "[1, 2]", 400, std::nullopt},
      {"empty body", http::verb::post, "/v1/completions", "", 400, std::nullopt},
      {"missing model", http::verb::post, "/v1/completions", R"({"prompt":"hi"})", 400, "model"},
      {"missing model chat", http::verb::post, "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}]})", 400, "model"},
      {"missing prompt", http::verb::post, "/v1/completions", "{\"model\":" + m + "}", 400,
       "prompt"},
      {"missing messages", http::verb::post, "/v1/chat/completions", "{\"model\":" + m + "}", 400,
       "messages"},
      {"model not a string", http::verb::post, "/v1/completions", R"({"model":5,"prompt":"hi"})",
       400, "model"},
      {"max_tokens a string", http::verb::post, "/v1/completions",
       "{\"model\":" + m + R"(,"prompt":"hi","max_tokens":"x"})", 400, "max_tokens"},
      {"max_tokens zero", http::verb::post, "/v1/completions",
       "{\"model\":" + m + R"(,"prompt":"hi","max_tokens":0})", 400, "max_tokens"},
      {"stream a number", http::verb::post, "/v1/completions",
       "{\"model\":" + m + R"(,"prompt":"hi","stream":1})", 400, "stream"},
      {"messages a string", http::verb::post, "/v1/chat/completions",
       "{\"model\":" + m + R"(,"messages":"x"})", 400, "messages"},
      {"messages empty", http::verb::post, "/v1/chat/completions",
       "{\"model\":" + m + R"(,"messages":[]})", 400, "messages"},
      {"message without role", http::verb::post, "/v1/chat/completions",
       "{\"model\":" + m + R"(,"messages":[{"content":"hi"}]})", 400, "messages[0].role"},
      {"prompt a number", http::verb::post, "/v1/completions",
       "{\"model\":" + m + R"(,"prompt":7})", 400, "prompt"},
      {"stop a number", http::verb::post, "/v1/completions",
       "{\"model\":" + m + R"(,"prompt":"hi","stop":3})", 400, "stop"},
      {"n of 2", http::verb::post, "/v1/completions",
       "{\"model\":" + m + R"(,"prompt":"hi","n":2})", 400, "n"},
      {"temperature a string", http::verb::post, "/v1/completions",
       "{\"model\":" + m + R"(,"prompt":"hi","temperature":"hot"})", 400, "temperature"},
      {"priority under fcfs", http::verb::post, "/v1/completions",
       "{\"model\":" + m + R"(,"prompt":"hi","priority":1})", 400, "priority"},
      {"missing input", http::verb::post, "/v1/responses", "{\"model\":" + m + "}", 400, "input"},
      {"input a number", http::verb::post, "/v1/responses", "{\"model\":" + m + R"(,"input":5})",
       400, "input"},
      {"input item of another type", http::verb::post, "/v1/responses",
       "{\"model\":" + m + R"(,"input":[{"type":"function_call_output","output":"x"}]})", 400,
       "input[0].type"},
      {"max_output_tokens zero", http::verb::post, "/v1/responses",
       "{\"model\":" + m + R"(,"input":"hi","max_output_tokens":0})", 400, "max_output_tokens"},
      {"unknown model responses", http::verb::post, "/v1/responses",
       R"({"model":"no/such-model","input":"hi"})", 404, "model"},
      {"GET responses", http::verb::get, "/v1/responses", "", 405, std::nullopt},
      {"unknown model", http::verb::post, "/v1/completions",
       R"({"model":"no/such-model","prompt":"hi"})", 404, "model"},
      {"unknown model chat", http::verb::post, "/v1/chat/completions",
       R"({"model":"no/such-model","messages":[{"role":"user","content":"hi"}]})", 404, "model"},
      {"unknown path", http::verb::get, "/v1/nothing", "", 404, std::nullopt},
      {"unknown path post", http::verb::post, "/v2/completions", "{}", 404, std::nullopt},
      {"GET completions", http::verb::get, "/v1/completions", "", 405, std::nullopt},
      {"GET chat", http::verb::get, "/v1/chat/completions", "", 405, std::nullopt},
      {"POST models", http::verb::post, "/v1/models", "{}", 405, std::nullopt},
      {"DELETE health", http::verb::delete_, "/health", "", 405, std::nullopt},
      {"PUT metrics", http::verb::put, "/metrics", "", 405, std::nullopt},
  };
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    HttpResponse r = Unwrap(client_->Request(c.method, c.target, c.body));
    ExpectError(r, c.status, c.param);
  }
  // Nothing ran, and the engine still serves.
  EXPECT_EQ(Metric("vllm:generation_tokens_total"), 0);
  EXPECT_EQ(Post("/v1/completions", CompletionBody("still fine", 2)).status, 200);
}

TEST_F(EngineTest, PromptOverMaxModelLenIsRejected) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({"--profile", "instant", "--max-model-len", "64"}));
  struct Case {
    int prompt_tokens;
    int max_tokens;
    int status;
  };
  for (Case c : {Case{100, 1, 400}, Case{60, 10, 400}, Case{54, 10, 200}, Case{64, 1, 400}}) {
    SCOPED_TRACE(fmt::format("prompt {} + max_tokens {}", c.prompt_tokens, c.max_tokens));
    HttpResponse r =
        Post("/v1/completions", CompletionBody(PromptOfTokens(c.prompt_tokens), c.max_tokens));
    EXPECT_EQ(r.status, c.status) << r.body;
    if (c.status == 400) {
      ExpectError(r, 400, "max_tokens");
      EXPECT_THAT(Str(At(At(ParseJson(r.body), "error"), "message")),
                  HasSubstr("maximum context length is 64 tokens"));
    }
  }
  // A chat prompt over the limit, without max_tokens.
  HttpResponse chat =
      Post("/v1/chat/completions",
           fmt::format(R"({{"model":{},"messages":[{{"role":"user","content":{}}}]}})",
                       Quote(kModel), Quote(PromptOfTokens(100))));
  EXPECT_EQ(chat.status, 400) << chat.body;
}

TEST_F(EngineTest, BodyOverMaxBodyBytesGets413NotAReset) {
  constexpr size_t kLimit = 65536;
  ASSERT_NO_FATAL_FAILURE(
      StartEngine({"--profile", "instant", "--max-body-bytes", std::to_string(kLimit)}));
  // Far more than the socket buffers hold, so that the server must read what it refuses.
  std::string big = CompletionBody(std::string(4 << 20, 'x'), 1);
  for (bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "chunked" : "Content-Length");
    HttpClient fresh(engine_->port());
    RequestOptions options;
    options.chunked = chunked;
    // A write failure (broken pipe, reset) fails here, as would a read failure.
    auto r = fresh.Request(http::verb::post, "/v1/completions", big, options);
    ASSERT_TRUE(r) << r.error().message;
    ExpectError(*r, 413, "body");
    EXPECT_FALSE(r->keep_alive);
  }
  // A body of exactly the limit is accepted.
  std::string body = CompletionBody("at the limit", 2);
  body.insert(body.size() - 1, kLimit - body.size(), ' ');
  ASSERT_EQ(body.size(), kLimit);
  HttpResponse r = Post("/v1/completions", body);
  EXPECT_EQ(r.status, 200) << r.body;
}

// ---- Scheduling policy ------------------------------------------------------------------

TEST_F(EngineTest, PriorityFieldWorksUnderPriorityPolicy) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({"--profile", "instant", "--scheduling-policy", "priority"}));
  for (int priority : {-5, 0, 3}) {
    SCOPED_TRACE(priority);
    HttpResponse r =
        Post("/v1/completions",
             CompletionBody("prioritised", 3, fmt::format(R"("priority":{})", priority)));
    EXPECT_EQ(r.status, 200) << r.body;
  }
  ExpectError(Post("/v1/completions", CompletionBody("p", 3, R"("priority":"high")")), 400,
              "priority");
}

// With one seat, a waiting request of better (lower) priority runs before an earlier one of
// worse priority.
TEST_F(EngineTest, PriorityPolicyRunsTheBetterPriorityFirst) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({"--profile", "llama-3.1-8b-h100", "--scheduling-policy",
                                       "priority", "--max-num-seqs", "1"}));
  auto stream = [&](int max_tokens, int priority) {
    return OpenStream("/v1/completions",
                      CompletionBody(PromptOfTokens(8), max_tokens,
                                     fmt::format(R"("stream":true,"priority":{})", priority)));
  };
  auto running = stream(100, 0);  // about half a second
  ASSERT_NE(running, nullptr);
  auto first = running->Next();
  ASSERT_TRUE(first && first->has_value());
  auto worse = stream(5, 5);
  auto better = stream(5, 1);
  ASSERT_NE(worse, nullptr);
  ASSERT_NE(better, nullptr);
  ASSERT_TRUE(Eventually([&] { return Metric("vllm:num_requests_waiting") == 2; }))
      << "the first request ended before the others queued";

  auto better_first = better->Next();
  ASSERT_TRUE(better_first && better_first->has_value());
  // The better one runs; the earlier, worse one has not started.
  EXPECT_EQ(Metric("vllm:num_requests_waiting"), 1);
  for (SseStream* s : {running.get(), better.get(), worse.get()}) {
    auto rest = s->ReadAll();
    ASSERT_TRUE(rest) << rest.error().message;
    EXPECT_EQ(rest->back(), "[DONE]");
  }
}

TEST_F(InstantEngineTest, PriorityZeroIsAcceptedUnderFcfs) {
  HttpResponse r = Post("/v1/completions", CompletionBody("plain", 3, R"("priority":0)"));
  EXPECT_EQ(r.status, 200) << r.body;
  ExpectError(Post("/v1/completions", CompletionBody("plain", 3, R"("priority":-1)")), 400,
              "priority");
}

// ---- Disconnects and shutdown (real-time profile) -----------------------------------------

TEST_F(EngineTest, ClientDisconnectMidStreamAbortsTheRequest) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({"--profile", "llama-3.1-8b-h100"}));
  auto s =
      OpenStream("/v1/completions", CompletionBody(PromptOfTokens(32), 2000, R"("stream":true)"));
  ASSERT_NE(s, nullptr);
  for (int i = 0; i < 3; ++i) {
    auto e = s->Next();
    ASSERT_TRUE(e && e->has_value()) << (e ? "stream ended" : e.error().message);
  }
  EXPECT_EQ(Metric("vllm:num_requests_running"), 1);
  s->Close();

  double running = -1, aborted = -1;
  EXPECT_TRUE(Eventually([&] {
    std::string text = Metrics();
    running = MetricValue(text, Series("vllm:num_requests_running")).value_or(-1);
    aborted = MetricValue(text, Series("vllm:request_success_total", R"(finished_reason="abort")"))
                  .value_or(-1);
    return running == 0 && aborted == 1;
  })) << "running "
      << running << ", aborted " << aborted;
  EXPECT_EQ(Metric("vllm:request_success_total", R"(finished_reason="length")"), 0);
  // Far fewer than 2000 tokens were generated.
  EXPECT_LT(Metric("vllm:generation_tokens_total"), 1000);
  EXPECT_EQ(Metric("vllm:kv_cache_usage_perc"), 0);
}

TEST_F(EngineTest, ClientDisconnectDuringANonStreamingRequestAbortsIt) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({"--profile", "llama-3.1-8b-h100"}));
  // A raw socket: the client sends the request and gives up before any response byte.
  net::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), engine_->port()));
  const std::string body = CompletionBody(PromptOfTokens(32), 2000);
  const std::string request = fmt::format(
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\n\r\n{}",
      body.size(), body);
  net::write(socket, net::buffer(request));
  ASSERT_TRUE(Eventually([&] { return Metric("vllm:num_requests_running") == 1; }));
  socket.close();

  double running = -1, aborted = -1;
  EXPECT_TRUE(Eventually([&] {
    std::string text = Metrics();
    running = MetricValue(text, Series("vllm:num_requests_running")).value_or(-1);
    aborted = MetricValue(text, Series("vllm:request_success_total", R"(finished_reason="abort")"))
                  .value_or(-1);
    return running == 0 && aborted == 1;
  })) << "running " << running << ", aborted " << aborted;
  EXPECT_LT(Metric("vllm:generation_tokens_total"), 1000);
  EXPECT_EQ(Metric("vllm:kv_cache_usage_perc"), 0);
}

TEST_F(EngineTest, SigtermFinishesInFlightStreamRefusesNewConnectionsAndExitsZero) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({"--profile", "llama-3.1-8b-h100"}));
  const uint16_t port = engine_->port();
  // About a second of decoding on this profile.
  auto s =
      OpenStream("/v1/completions", CompletionBody(PromptOfTokens(32), 200, R"("stream":true)"));
  ASSERT_NE(s, nullptr);
  auto first = s->Next();
  ASSERT_TRUE(first && first->has_value());
  // An idle keep-alive connection must not hold up the stop.
  ASSERT_EQ(Get("/health").status, 200);

  engine_->process().Signal(SIGTERM);
  EXPECT_TRUE(Eventually([&] { return ConnectionRefused(port); }, 3s))
      << "still accepting connections after SIGTERM";
  EXPECT_TRUE(engine_->process().running()) << "exited with a request in flight";

  auto rest = s->ReadAll();
  ASSERT_TRUE(rest) << rest.error().message;
  std::vector<std::string> events = {**first};
  events.insert(events.end(), rest->begin(), rest->end());
  ASSERT_EQ(events.size(), 201u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(Str(At(At(At(ParseJson(events[199]), "choices"), 0), "finish_reason")), "length");
  ExpectSseFraming(s->raw_body());

  auto status = engine_->process().Wait(10s);
  ASSERT_TRUE(status.has_value()) << "still running 10 s after the stream ended";
  EXPECT_TRUE(status->Success()) << status->ToString() << "\n" << engine_->process().StderrText();
}

// Requests still running when --shutdown-timeout passes are cut off, and the engine still
// exits cleanly (no crash while tearing down their handlers).
TEST_F(EngineTest, ShutdownDeadlineCutsOffLongRequestsAndExitsZero) {
  ASSERT_NO_FATAL_FAILURE(
      StartEngine({"--profile", "llama-3.1-8b-h100", "--shutdown-timeout", "1"}));
  // About ten seconds each: a non-streaming request, which writes nothing until it ends, and
  // a stream.
  std::jthread whole([port = engine_->port()] {
    HttpClient client(port, 30s);
    auto r = client.Post("/v1/completions", CompletionBody(PromptOfTokens(16), 2000));
    EXPECT_FALSE(r) << "got a response: " << r->status << " " << r->body;
  });
  auto s =
      OpenStream("/v1/completions", CompletionBody(PromptOfTokens(24), 2000, R"("stream":true)"));
  ASSERT_NE(s, nullptr);
  auto first = s->Next();
  ASSERT_TRUE(first && first->has_value());
  EXPECT_TRUE(Eventually([&] { return Metric("vllm:num_requests_running") == 2; }));

  engine_->process().Signal(SIGTERM);
  auto status = engine_->process().Wait(10s);
  whole.join();
  ASSERT_TRUE(status.has_value()) << "still running 10 s after SIGTERM with a 1 s deadline";
  const std::string err = engine_->process().StderrText();
  EXPECT_TRUE(status->Success()) << status->ToString() << "\n" << err;
  EXPECT_THAT(err, Not(HasSubstr("Sanitizer")));
  EXPECT_THAT(err, Not(HasSubstr("runtime error")));
  auto rest = s->ReadAll();
  EXPECT_TRUE(!rest || rest->empty() || rest->back() != "[DONE]")
      << "the stream was not cut off by the deadline";
}

TEST_F(EngineTest, SigtermOrSigintWhenIdleExitsZeroPromptly) {
  for (int signal : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(strsignal(signal));
    ASSERT_NO_FATAL_FAILURE(StartEngine({"--profile", "instant"}));
    ASSERT_EQ(Get("/v1/models").status, 200);  // leaves an idle keep-alive connection
    engine_->process().Signal(signal);
    auto status = engine_->process().Wait(5s);
    ASSERT_TRUE(status.has_value()) << "an idle connection held up the stop";
    EXPECT_TRUE(status->Success()) << status->ToString();
    EXPECT_TRUE(ConnectionRefused(engine_->port()));
  }
}

}  // namespace
}  // namespace bmas::testing
