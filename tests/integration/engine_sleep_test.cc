// Integration tests of vLLM's sleep mode in `bmas engine`: POST /sleep, POST /wake_up and
// GET /is_sleeping on the real binary, in dev mode (VLLM_SERVER_DEV_MODE=1) as vLLM needs.
// The only timed assertion is a lower bound: /wake_up answers no sooner than the wake time.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <chrono>
#include <memory>
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

constexpr std::string_view kModel = "meta-llama/Llama-3.1-8B-Instruct";

// Steps of 5 ms, so that a long request is still in flight when the engine is put to sleep.
constexpr std::string_view kProfiles =
    "[profile.sleepy]\nnum_kv_blocks = 1000\nstep_base_s = 0.005\n"
    "wake_s_level1 = 1\nwake_s_level2 = 2\n";

std::string CompletionBody(std::string_view prompt, int max_tokens, std::string_view extra = "") {
  return fmt::format(R"({{"model":{},"prompt":{},"max_tokens":{}{}{}}})", Quote(kModel),
                     Quote(prompt), max_tokens, extra.empty() ? "" : ",", extra);
}

std::string SleepStateSeries(std::string_view state) {
  return fmt::format(R"(vllm:engine_sleep_state{{model_name="{}",sleep_state="{}"}})", kModel,
                     state);
}

class EngineSleepTest : public ::testing::Test {
 protected:
  void StartEngine(const EnvList& env, const std::vector<std::string>& more_args = {}) {
    std::vector<std::string> args = {"--profiles", dir_.WriteFile("profiles.toml", kProfiles),
                                     "--profile", "sleepy", "--max-model-len", "4096"};
    args.insert(args.end(), more_args.begin(), more_args.end());
    auto engine = EngineProcess::Start(args, env);
    ASSERT_TRUE(engine) << engine.error().message;
    engine_ = std::move(*engine);
    client_ = std::make_unique<HttpClient>(engine_->port());
  }

  HttpResponse Call(http::verb method, std::string_view target, std::string body = "") {
    auto r = client_->Request(method, target, std::move(body));
    if (!r) {
      ADD_FAILURE() << target << ": " << r.error().message;
      return HttpResponse{};
    }
    return std::move(*r);
  }

  // The cached_tokens of a completion of `prompt`, or -1 when it fails.
  int64_t CachedTokens(const std::string& prompt) {
    HttpResponse r = Call(http::verb::post, "/v1/completions", CompletionBody(prompt, 1));
    EXPECT_EQ(r.status, 200) << r.body;
    return Int(At(At(At(ParseJson(r.body), "usage"), "prompt_tokens_details"), "cached_tokens"));
  }

  double SleepState(std::string_view state) {
    return MetricValue(Call(http::verb::get, "/metrics").body, SleepStateSeries(state))
        .value_or(-1);
  }

  // POST /wake_up; returns the seconds it took to answer 200.
  double WakeUp() {
    const auto start = std::chrono::steady_clock::now();
    HttpResponse r = Call(http::verb::post, "/wake_up");
    EXPECT_EQ(r.status, 200) << r.body;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  TempDir dir_;
  std::unique_ptr<EngineProcess> engine_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(EngineSleepTest, AsleepRefusesRequestsAndWakesWithAnEmptyPrefixCache) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({{"VLLM_SERVER_DEV_MODE", "1"}}));
  const std::string prompt = PromptOfTokens(2000);
  EXPECT_EQ(CachedTokens(prompt), 0);
  EXPECT_EQ(CachedTokens(prompt), (2000 - 1) / 16 * 16) << "awake, a repeated prompt hits";
  EXPECT_EQ(Call(http::verb::get, "/is_sleeping").body, R"({"is_sleeping":false})");
  EXPECT_EQ(SleepState("awake"), 1);

  // A request in flight when the engine goes to sleep ends with finish_reason "abort".
  auto stream = SseStream::Open(engine_->port(), "/v1/completions",
                                CompletionBody(PromptOfTokens(20, 3000), 2000, R"("stream":true)"));
  ASSERT_TRUE(stream) << stream.error().message;
  auto first = (*stream)->Next();
  ASSERT_TRUE(first && first->has_value());

  HttpResponse slept = Call(http::verb::post, "/sleep");
  EXPECT_EQ(slept.status, 200) << slept.body;
  auto rest = (*stream)->ReadAll();
  ASSERT_TRUE(rest) << rest.error().message;
  ASSERT_GE(rest->size(), 2u) << (*stream)->raw_body();
  EXPECT_THAT(rest->at(rest->size() - 2), HasSubstr(R"("finish_reason":"abort")"));
  EXPECT_EQ(rest->back(), "[DONE]");

  EXPECT_EQ(Call(http::verb::get, "/is_sleeping").body, R"({"is_sleeping":true})");
  HttpResponse refused = Call(http::verb::post, "/v1/completions", CompletionBody(prompt, 1));
  ExpectError(refused, 503, std::nullopt);
  EXPECT_THAT(refused.body, HasSubstr("sleeping"));
  EXPECT_EQ(Call(http::verb::get, "/health").status, 200) << "asleep is healthy, as in vLLM";
  EXPECT_EQ(Call(http::verb::get, "/v1/models").status, 200);
  EXPECT_EQ(SleepState("awake"), 0);
  EXPECT_EQ(SleepState("weights_offloaded"), 1);
  EXPECT_EQ(SleepState("discard_all"), 0);

  EXPECT_GE(WakeUp(), 0.95) << "the profile's wake_s_level1";
  EXPECT_EQ(Call(http::verb::get, "/is_sleeping").body, R"({"is_sleeping":false})");
  EXPECT_EQ(SleepState("awake"), 1);
  EXPECT_EQ(CachedTokens(prompt), 0) << "sleep freed the KV cache and its prefixes";
  EXPECT_EQ(CachedTokens(prompt), (2000 - 1) / 16 * 16);
}

// A Responses stream in flight when the engine sleeps ends in its own typed events, with no
// chat chunk and no [DONE] among them.
TEST_F(EngineSleepTest, AResponsesStreamInFlightEndsInItsOwnEvents) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({{"VLLM_SERVER_DEV_MODE", "1"}}));
  auto stream = SseStream::Open(
      engine_->port(), "/v1/responses",
      fmt::format(R"({{"model":{},"input":{},"max_output_tokens":2000,"stream":true}})",
                  Quote(kModel), Quote(PromptOfTokens(20, 3000))));
  ASSERT_TRUE(stream) << stream.error().message;
  auto first = (*stream)->Next();
  ASSERT_TRUE(first && first->has_value());
  EXPECT_EQ(Call(http::verb::post, "/sleep").status, 200);
  auto rest = (*stream)->ReadAll();
  ASSERT_TRUE(rest) << rest.error().message;
  ASSERT_FALSE(rest->empty()) << (*stream)->raw_body();
  for (const std::string& data : *rest) {
    EXPECT_THAT(data, HasSubstr(R"("type":"response.)")) << (*stream)->raw_body();
    EXPECT_THAT(data, Not(HasSubstr("choices")));
  }
  EXPECT_THAT(rest->back(), HasSubstr(R"("usage")"));
}

TEST_F(EngineSleepTest, ACompletionInFlightIsAnsweredWithFinishReasonAbort) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({{"VLLM_SERVER_DEV_MODE", "1"}}));
  const std::string series = fmt::format(R"(vllm:num_requests_running{{model_name="{}"}})", kModel);
  Result<HttpResponse> answer = Internal("not answered");
  std::thread client([&] {
    HttpClient other(engine_->port(), std::chrono::seconds(30));
    answer = other.Post("/v1/completions", CompletionBody(PromptOfTokens(20), 2000));
  });
  for (int i = 0; i < 500; ++i) {  // until the request runs: up to 5 s
    if (MetricValue(Call(http::verb::get, "/metrics").body, series) == 1.0) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(Call(http::verb::post, "/sleep").status, 200);
  client.join();
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->status, 200) << answer->body;
  const rapidjson::Document doc = ParseJson(answer->body);
  EXPECT_EQ(Str(At(At(At(doc, "choices"), 0), "finish_reason")), "abort") << answer->body;
  EXPECT_LT(Int(At(At(doc, "usage"), "completion_tokens")), 2000);
}

TEST_F(EngineSleepTest, LevelTwoTakesItsOwnWakeTime) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({{"VLLM_SERVER_DEV_MODE", "1"}}));
  ExpectError(Call(http::verb::post, "/sleep?level=3"), 400, "level");
  EXPECT_EQ(Call(http::verb::get, "/is_sleeping").body, R"({"is_sleeping":false})");
  EXPECT_EQ(Call(http::verb::post, "/sleep?level=2").status, 200);
  EXPECT_EQ(SleepState("discard_all"), 1);
  EXPECT_EQ(Call(http::verb::get, "/sleep").status, 405);
  EXPECT_GE(WakeUp(), 1.95) << "the profile's wake_s_level2";
  EXPECT_LT(WakeUp(), 0.5) << "awake already: at once";
  EXPECT_EQ(CachedTokens(PromptOfTokens(100)), 0);
}

TEST_F(EngineSleepTest, WithoutDevModeTheEndpointsDoNotExist) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({{"VLLM_SERVER_DEV_MODE", "0"}}));
  EXPECT_EQ(Call(http::verb::post, "/sleep").status, 404);
  EXPECT_EQ(Call(http::verb::post, "/wake_up").status, 404);
  EXPECT_EQ(Call(http::verb::get, "/is_sleeping").status, 404);
  EXPECT_EQ(CachedTokens(PromptOfTokens(100)), 0) << "still serving";
}

TEST_F(EngineSleepTest, WithAnApiKeyTheEndpointsNeedIt) {
  ASSERT_NO_FATAL_FAILURE(StartEngine({{"VLLM_SERVER_DEV_MODE", "1"}}, {"--api-key", "k"}));
  EXPECT_EQ(Call(http::verb::post, "/sleep").status, 401);
  EXPECT_EQ(Call(http::verb::get, "/is_sleeping").status, 401);
  EXPECT_EQ(Call(http::verb::get, "/health").status, 200);
}

}  // namespace
}  // namespace bmas::testing
