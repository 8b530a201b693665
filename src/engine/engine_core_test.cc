#include "engine/engine_core.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "engine/calibrate.h"

namespace bmas::engine {
namespace {

using testing::HasSubstr;

std::vector<TokenId> Tokens(int n, TokenId first) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::unique_ptr<Request> MakeRequest(RequestId id, std::vector<TokenId> prompt, int max_tokens) {
  auto r = std::make_unique<Request>();
  r->id = id;
  r->seed = id;
  r->num_prompt_tokens = static_cast<int>(prompt.size());
  r->tokens = std::move(prompt);
  r->max_tokens = max_tokens;
  return r;
}

SchedulerConfig SmallConfig() {
  SchedulerConfig c;
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 2048;
  c.block_size = 16;
  c.num_kv_blocks = 64;
  c.max_model_len = 1024;
  return c;
}

// Drives `core` in virtual time, from `now`, until it has no work; returns every event.
std::vector<TokenEvent> RunToCompletion(EngineCore& core, double& now) {
  std::vector<TokenEvent> events;
  for (int step = 0; core.HasWork(); ++step) {
    EXPECT_LT(step, 10000) << "no progress";
    if (step >= 10000) break;
    now += core.BeginStep(now);
    for (const TokenEvent& e : core.FinishStep(now)) events.push_back(e);
  }
  return events;
}

TEST(EngineCoreTest, RequestProducesExactlyMaxTokensEventsThenIsGone) {
  EngineCore core(SmallConfig(), StepTimeModel{}, "m", nullptr);
  ASSERT_TRUE(core.AddRequest(MakeRequest(1, Tokens(20, 1), 6), 0).has_value());
  double now = 0;
  std::vector<TokenEvent> events = RunToCompletion(core, now);
  ASSERT_EQ(events.size(), 6u);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].id, 1u);
    EXPECT_EQ(events[i].num_prompt_tokens, 20);
    EXPECT_EQ(events[i].num_output_tokens, static_cast<int>(i) + 1);
    EXPECT_EQ(events[i].token, SampleToken(1, i));
    EXPECT_EQ(events[i].finish_reason,
              i + 1 == events.size() ? FinishReason::kLength : FinishReason::kNone);
  }
  EXPECT_FALSE(core.HasWork());
  EXPECT_EQ(core.scheduler().num_running(), 0);
  EXPECT_EQ(core.scheduler().kv().num_free_blocks(), SmallConfig().num_kv_blocks);
  EXPECT_EQ(core.num_steps(), 6u);
}

TEST(EngineCoreTest, AddRequestRejectsTooLongRequests) {
  EngineCore core(SmallConfig(), StepTimeModel{}, "m", nullptr);
  Result<void> r = core.AddRequest(MakeRequest(1, Tokens(1000, 1), 100), 0);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(core.HasWork());
}

// The contract says AddRequest fails when a request "cannot ever fit". A prompt that needs more
// KV blocks than the whole cache holds is never admitted and blocks the FCFS queue for good.
TEST(EngineCoreTest, AddRequestRejectsARequestLargerThanTheKvCache) {
  SchedulerConfig c = SmallConfig();
  c.num_kv_blocks = 4;  // 64 tokens, well under max_model_len
  EngineCore core(c, StepTimeModel{}, "m", nullptr);
  Result<void> r = core.AddRequest(MakeRequest(1, Tokens(100, 1), 10), 0);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(core.HasWork());
}

TEST(EngineCoreTest, FinishMidwayFreesBlocksAndStopsTokens) {
  EngineCore core(SmallConfig(), StepTimeModel{}, "m", nullptr);
  ASSERT_TRUE(core.AddRequest(MakeRequest(1, Tokens(40, 1), 100), 0).has_value());
  for (int i = 0; i < 2; ++i) {
    core.BeginStep(i);
    EXPECT_EQ(core.FinishStep(i).size(), 1u);
  }
  EXPECT_LT(core.scheduler().kv().num_free_blocks(), SmallConfig().num_kv_blocks);
  core.Finish(1, FinishReason::kAbort, 2);
  EXPECT_EQ(core.scheduler().kv().num_free_blocks(), SmallConfig().num_kv_blocks);
  EXPECT_FALSE(core.HasWork());
  core.Finish(1, FinishReason::kAbort, 2);  // unknown now: ignored
  core.Finish(99, FinishReason::kAbort, 2);
}

TEST(EngineCoreTest, FinishDuringAStepDropsItsToken) {
  EngineCore core(SmallConfig(), StepTimeModel{}, "m", nullptr);
  ASSERT_TRUE(core.AddRequest(MakeRequest(1, Tokens(8, 1), 100), 0).has_value());
  ASSERT_TRUE(core.AddRequest(MakeRequest(2, Tokens(8, 100), 100), 0).has_value());
  core.BeginStep(0);
  EXPECT_TRUE(core.step_in_flight());
  core.Finish(1, FinishReason::kAbort, 0.5);
  std::span<const TokenEvent> events = core.FinishStep(1);
  EXPECT_FALSE(core.step_in_flight());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].id, 2u);
}

TEST(EngineCoreTest, StepTimesFollowTheTimeModel) {
  StepTimeModel model{.base_s = 1,
                      .per_decode_token_s = 0.1,
                      .per_prefill_token_s = 0.01,
                      .per_context_token_s = 0.001};
  EngineCore core(SmallConfig(), model, "m", nullptr);
  ASSERT_TRUE(core.AddRequest(MakeRequest(1, Tokens(10, 1), 3), 0).has_value());
  double now = 0;
  // Prefill of 10 tokens reading 10 KV entries, then decodes reading 11 and 12.
  for (double want : {1 + 10 * 0.01 + 10 * 0.001, 1 + 0.1 + 11 * 0.001, 1 + 0.1 + 12 * 0.001}) {
    double d = core.BeginStep(now);
    EXPECT_NEAR(d, want, 1e-12);
    now += d;
    core.FinishStep(now);
  }
  EXPECT_FALSE(core.HasWork());
}

TEST(EngineCoreTest, StepTimeCountsEveryRequestInTheBatch) {
  StepTimeModel model{.base_s = 0.5, .per_decode_token_s = 0.25};
  EngineCore core(SmallConfig(), model, "m", nullptr);
  for (RequestId id = 1; id <= 4; ++id) {
    ASSERT_TRUE(core.AddRequest(MakeRequest(id, Tokens(8, id * 100), 5), 0).has_value());
  }
  core.BeginStep(0);
  core.FinishStep(0.5);
  EXPECT_DOUBLE_EQ(core.BeginStep(0.5), 0.5 + 4 * 0.25);
}

TEST(EngineCoreTest, InstantProfileGivesZeroDurationSteps) {
  EngineCore core(SmallConfig(), BuiltinProfiles().at("instant").time, "m", nullptr);
  ASSERT_TRUE(core.AddRequest(MakeRequest(1, Tokens(300, 1), 20), 0).has_value());
  ASSERT_TRUE(core.AddRequest(MakeRequest(2, Tokens(30, 1000), 20), 0).has_value());
  int steps = 0;
  while (core.HasWork() && steps < 100) {
    EXPECT_EQ(core.BeginStep(0), 0);
    core.FinishStep(0);
    ++steps;
  }
  EXPECT_EQ(steps, 20);
}

// The value of the first rendered line that starts with `series` followed by a space.
std::string Sample(const std::string& rendered, const std::string& series) {
  size_t pos = rendered.find("\n" + series + " ");
  if (pos == std::string::npos) return "<missing " + series + ">";
  size_t begin = pos + series.size() + 2;
  return rendered.substr(begin, rendered.find('\n', begin) - begin);
}

TEST(EngineCoreMetricsTest, GaugesShowRunningWaitingAndKvUsage) {
  MetricsRegistry registry;
  SchedulerConfig c = SmallConfig();
  c.max_num_seqs = 1;
  c.num_kv_blocks = 8;
  EngineCore core(c, StepTimeModel{}, "m", &registry);
  ASSERT_TRUE(core.AddRequest(MakeRequest(1, Tokens(20, 1), 5), 0).has_value());
  ASSERT_TRUE(core.AddRequest(MakeRequest(2, Tokens(20, 100), 5), 0).has_value());
  core.BeginStep(0);
  core.FinishStep(0);
  core.UpdateGauges(0);
  std::string out = registry.Render();
  EXPECT_EQ(Sample(out, R"(vllm:num_requests_running{model_name="m"})"), "1.0");
  EXPECT_EQ(Sample(out, R"(vllm:num_requests_waiting{model_name="m"})"), "1.0");
  EXPECT_EQ(Sample(out, R"(vllm:kv_cache_usage_perc{model_name="m"})"), "0.25");
  EXPECT_EQ(Sample(out, R"(vllm:gpu_cache_usage_perc{model_name="m"})"), "0.25");
  EXPECT_THAT(out, HasSubstr("# TYPE vllm:num_requests_running gauge\n"));
}

TEST(EngineCoreMetricsTest, FinishedRequestIsCountedAndTimed) {
  MetricsRegistry registry;
  EngineCore core(SmallConfig(), StepTimeModel{.base_s = 0.5}, "m", &registry);
  ASSERT_TRUE(core.AddRequest(MakeRequest(1, Tokens(20, 1), 3), 0).has_value());
  double now = 0;
  RunToCompletion(core, now);
  ASSERT_DOUBLE_EQ(now, 1.5);
  core.UpdateGauges(now);
  std::string out = registry.Render();
  EXPECT_EQ(Sample(out, R"(vllm:request_success_total{model_name="m",finished_reason="length"})"),
            "1.0");
  EXPECT_EQ(Sample(out, R"(vllm:request_success_total{model_name="m",finished_reason="stop"})"),
            "0.0");
  EXPECT_EQ(Sample(out, R"(vllm:generation_tokens_total{model_name="m"})"), "3.0");
  EXPECT_EQ(Sample(out, R"(vllm:prompt_tokens_total{model_name="m"})"), "20.0");
  EXPECT_EQ(Sample(out, R"(vllm:prefix_cache_queries_total{model_name="m"})"), "20.0");
  EXPECT_EQ(Sample(out, R"(vllm:prefix_cache_hits_total{model_name="m"})"), "0.0");
  EXPECT_EQ(Sample(out, R"(vllm:time_to_first_token_seconds_count{model_name="m"})"), "1");
  EXPECT_EQ(Sample(out, R"(vllm:time_to_first_token_seconds_sum{model_name="m"})"), "0.5");
  EXPECT_EQ(Sample(out, R"(vllm:inter_token_latency_seconds_count{model_name="m"})"), "2");
  EXPECT_EQ(Sample(out, R"(vllm:inter_token_latency_seconds_sum{model_name="m"})"), "1.0");
  EXPECT_EQ(Sample(out, R"(vllm:e2e_request_latency_seconds_sum{model_name="m"})"), "1.5");
  EXPECT_EQ(Sample(out, R"(vllm:request_queue_time_seconds_sum{model_name="m"})"), "0.0");
  EXPECT_EQ(Sample(out, R"(vllm:request_prefill_time_seconds_sum{model_name="m"})"), "0.5");
  EXPECT_EQ(Sample(out, R"(vllm:request_decode_time_seconds_sum{model_name="m"})"), "1.0");
  EXPECT_EQ(Sample(out, R"(vllm:request_generation_tokens_sum{model_name="m"})"), "3.0");
  EXPECT_EQ(Sample(out, R"(vllm:iteration_tokens_total_count{model_name="m"})"), "3");
  EXPECT_EQ(Sample(out, R"(vllm:num_requests_running{model_name="m"})"), "0.0");
  EXPECT_EQ(Sample(out, R"(vllm:num_preemptions_total{model_name="m"})"), "0.0");
}

TEST(EngineCoreMetricsTest, PrefixHitsAreCountedInTokens) {
  MetricsRegistry registry;
  EngineCore core(SmallConfig(), StepTimeModel{}, "m", &registry);
  std::vector<TokenId> prompt = Tokens(40, 1);
  ASSERT_TRUE(core.AddRequest(MakeRequest(1, prompt, 2), 0).has_value());
  double now = 0;
  RunToCompletion(core, now);
  ASSERT_TRUE(core.AddRequest(MakeRequest(2, prompt, 2), now).has_value());
  std::vector<TokenEvent> events = RunToCompletion(core, now);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].num_cached_tokens, 32);
  std::string out = registry.Render();
  EXPECT_EQ(Sample(out, R"(vllm:prefix_cache_queries_total{model_name="m"})"), "80.0");
  EXPECT_EQ(Sample(out, R"(vllm:prefix_cache_hits_total{model_name="m"})"), "32.0");
}

TEST(EngineCoreMetricsTest, AbortIsCountedAsAbort) {
  MetricsRegistry registry;
  EngineCore core(SmallConfig(), StepTimeModel{}, "m", &registry);
  ASSERT_TRUE(core.AddRequest(MakeRequest(1, Tokens(8, 1), 10), 0).has_value());
  core.Finish(1, FinishReason::kAbort, 2);  // before it was ever scheduled
  std::string out = registry.Render();
  EXPECT_EQ(Sample(out, R"(vllm:request_success_total{model_name="m",finished_reason="abort"})"),
            "1.0");
  EXPECT_EQ(Sample(out, R"(vllm:request_queue_time_seconds_sum{model_name="m"})"), "2.0");
}

TEST(EngineCoreMetricsTest, PreemptionsAreCounted) {
  MetricsRegistry registry;
  SchedulerConfig c = SmallConfig();
  c.block_size = 4;
  c.num_kv_blocks = 6;
  EngineCore core(c, StepTimeModel{}, "m", &registry);
  for (RequestId id = 1; id <= 3; ++id) {
    ASSERT_TRUE(core.AddRequest(MakeRequest(id, Tokens(8, id * 100), 4), 0).has_value());
  }
  double now = 0;
  std::vector<TokenEvent> events = RunToCompletion(core, now);
  EXPECT_EQ(events.size(), 12u);  // preempted requests still finish
  EXPECT_NE(Sample(registry.Render(), R"(vllm:num_preemptions_total{model_name="m"})"), "0.0");
}

TEST(EngineCoreMetricsTest, ModelNameLabelIsEscaped) {
  MetricsRegistry registry;
  EngineCore core(SmallConfig(), StepTimeModel{}, "org/\"odd\"", &registry);
  core.UpdateGauges(0);
  EXPECT_THAT(registry.Render(),
              HasSubstr(R"(vllm:num_requests_running{model_name="org/\"odd\""} 0.0)"));
}

TEST(RunClosedLoopTest, SingleClientItlIsTheDecodeStepTime) {
  SchedulerConfig c;  // the vLLM defaults
  StepTimeModel model{.base_s = 0.01,
                      .per_decode_token_s = 0.001,
                      .per_prefill_token_s = 1e-5,
                      .per_context_token_s = 1e-6};
  ClosedLoopOptions options;
  options.concurrency = 1;
  options.prompt_tokens = 128;
  options.output_tokens = 128;
  options.requests_per_client = 6;
  ClosedLoopResult r = RunClosedLoop(c, model, options);
  // A decode step reads 129..255 KV entries: 192 on average.
  const double itl = 0.01 + 0.001 + 192 * 1e-6;
  EXPECT_NEAR(r.mean_itl_s, itl, itl * 0.01);
  // The first token comes from the prefill step.
  const double ttft = 0.01 + 128 * 1e-5 + 128 * 1e-6;
  EXPECT_NEAR(r.mean_ttft_s, ttft, ttft * 0.01);
  EXPECT_EQ(r.concurrency, 1);
  EXPECT_EQ(r.output_tokens, 6u * 128u);
  EXPECT_EQ(r.steps, 6u * 128u);
  EXPECT_NEAR(r.output_tokens_per_s, r.output_tokens / r.duration_s, 1e-9);
}

TEST(RunClosedLoopTest, ConstantStepTimeGivesExactItl) {
  ClosedLoopOptions options;
  options.prompt_tokens = 128;
  options.output_tokens = 16;
  options.requests_per_client = 6;
  ClosedLoopResult r = RunClosedLoop(SchedulerConfig{}, StepTimeModel{.base_s = 0.02}, options);
  EXPECT_NEAR(r.mean_itl_s, 0.02, 1e-12);
  EXPECT_NEAR(r.mean_ttft_s, 0.02, 1e-12);
  EXPECT_NEAR(r.duration_s, 6 * 16 * 0.02, 1e-9);
}

TEST(RunClosedLoopTest, FrontendTimeAddsToTtftAlone) {
  ClosedLoopOptions options;
  options.prompt_tokens = 64;
  options.output_tokens = 32;
  options.requests_per_client = 3;
  StepTimeModel model{.base_s = 0.01, .per_decode_token_s = 0.001, .per_prefill_token_s = 1e-5};
  ClosedLoopResult without = RunClosedLoop(SchedulerConfig{}, model, options);
  model.frontend_s = 0.003;
  ClosedLoopResult with = RunClosedLoop(SchedulerConfig{}, model, options);
  EXPECT_NEAR(with.mean_ttft_s, without.mean_ttft_s + 0.003, 1e-9);
  EXPECT_NEAR(with.mean_itl_s, without.mean_itl_s, 1e-9);
  EXPECT_EQ(with.output_tokens, without.output_tokens);
}

TEST(RunClosedLoopTest, BatchingRaisesThroughputFarAboveOneClient) {
  const Profile& p = BuiltinProfiles().at("llama-3.1-8b-h100");
  SchedulerConfig c;
  c.num_kv_blocks = p.DerivedKvBlocks(c.block_size);
  ClosedLoopOptions one;
  one.prompt_tokens = 128;
  one.output_tokens = 128;
  one.requests_per_client = 6;
  ClosedLoopOptions many = one;
  many.concurrency = 64;
  ClosedLoopResult r1 = RunClosedLoop(c, p.time, one);
  ClosedLoopResult r64 = RunClosedLoop(c, p.time, many);
  EXPECT_EQ(r64.output_tokens, 64u * 6u * 128u);
  EXPECT_GT(r64.output_tokens_per_s, 10 * r1.output_tokens_per_s);
  EXPECT_GT(r64.mean_itl_s, r1.mean_itl_s);  // but each client sees slower tokens
}

TEST(CalibrateTest, BuiltinLlamaProfileMatchesTheReference) {
  const Profile& p = BuiltinProfiles().at("llama-3.1-8b-h100");
  SchedulerConfig c;
  c.num_kv_blocks = p.DerivedKvBlocks(c.block_size);
  std::vector<CalibrationRow> rows = Calibrate(c, p.time, LlamaH100Reference());
  ASSERT_EQ(rows.size(), LlamaH100Reference().size());
  EXPECT_LT(WorstRelativeError(rows), 0.15);
}

TEST(CalibrateTest, WorstRelativeErrorTakesTheLargestOfItlAndTtft) {
  CalibrationRow a{{1, 0.010, 0.100, {}}, {}};
  a.model.mean_itl_s = 0.011;   // 10 % off
  a.model.mean_ttft_s = 0.080;  // 20 % off
  CalibrationRow b{{2, 0.010, {}, {}}, {}};
  b.model.mean_itl_s = 0.0085;  // 15 % off; no TTFT reference
  EXPECT_NEAR(WorstRelativeError({a}), 0.2, 1e-9);
  EXPECT_NEAR(WorstRelativeError({b}), 0.15, 1e-9);
  EXPECT_NEAR(WorstRelativeError({a, b}), 0.2, 1e-9);
}

// ---- Sleep mode -------------------------------------------------------------------------

TEST(EngineCoreSleepTest, AsleepRefusesRequestsWith503UntilTheWakeTimeHasPassed) {
  EngineCore core(SmallConfig(), StepTimeModel{}, "m", nullptr);
  EXPECT_EQ(core.sleep_state(0), SleepState::kAwake);
  EXPECT_TRUE(core.Sleep(1, 10).empty());
  EXPECT_EQ(core.sleep_state(10), SleepState::kAsleep);
  EXPECT_EQ(core.sleep_level(10), 1);
  EXPECT_EQ(core.sleep_state(1e9), SleepState::kAsleep) << "asleep until woken, however long";
  auto refused = core.AddRequest(MakeRequest(1, Tokens(20, 1), 4), 11);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(refused.error().message, HasSubstr("sleeping"));

  EXPECT_DOUBLE_EQ(core.WakeUp(20, 0.8), 20.8);
  EXPECT_EQ(core.sleep_state(20.5), SleepState::kWaking);
  EXPECT_EQ(core.sleep_level(20.5), 1);
  EXPECT_FALSE(core.AddRequest(MakeRequest(2, Tokens(20, 1), 4), 20.5).has_value());
  EXPECT_DOUBLE_EQ(core.WakeUp(20.6, 5), 20.8) << "a second wake_up joins the one under way";
  EXPECT_EQ(core.sleep_state(20.8), SleepState::kAwake);
  EXPECT_EQ(core.sleep_level(20.8), 0);
  ASSERT_TRUE(core.AddRequest(MakeRequest(3, Tokens(20, 1), 4), 20.8).has_value());
  double now = 20.8;
  EXPECT_EQ(RunToCompletion(core, now).size(), 4u);
  EXPECT_DOUBLE_EQ(core.WakeUp(30, 0.8), 30) << "awake already: at once";
}

TEST(EngineCoreSleepTest, SleepAbortsEveryRequestAndEmptiesThePrefixCache) {
  EngineCore core(SmallConfig(), StepTimeModel{.base_s = 0.01}, "m", nullptr);
  const std::vector<TokenId> prompt = Tokens(200, 1);
  ASSERT_TRUE(core.AddRequest(MakeRequest(1, prompt, 2), 0).has_value());
  double now = 0;
  RunToCompletion(core, now);
  // Requests 2 and 3 are in flight, prefilled and decoding, when the engine goes to sleep.
  ASSERT_TRUE(core.AddRequest(MakeRequest(2, Tokens(50, 500), 100), now).has_value());
  ASSERT_TRUE(core.AddRequest(MakeRequest(3, Tokens(50, 900), 100), now).has_value());
  now += core.BeginStep(now);
  core.FinishStep(now);
  EXPECT_EQ(core.Sleep(2, now), (std::vector<RequestId>{2, 3}));
  EXPECT_FALSE(core.HasWork());
  EXPECT_EQ(core.scheduler().kv().num_free_blocks(), SmallConfig().num_kv_blocks);
  EXPECT_EQ(core.sleep_level(now), 2);
  EXPECT_EQ(core.Sleep(1, now), std::vector<RequestId>{}) << "sleeping again, already empty";
  EXPECT_EQ(core.sleep_level(now), 2) << "level 2 discarded the weights; level 1 keeps that";

  now = core.WakeUp(now, 4.8);
  ASSERT_TRUE(core.AddRequest(MakeRequest(4, prompt, 1), now).has_value());
  std::vector<TokenEvent> events = RunToCompletion(core, now);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].num_cached_tokens, 0) << "the prefix cached before sleeping is gone";
  ASSERT_TRUE(core.AddRequest(MakeRequest(5, prompt, 1), now).has_value());
  events = RunToCompletion(core, now);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_GT(events[0].num_cached_tokens, 0) << "awake, the cache works again";
}

TEST(EngineCoreSleepTest, SleepStateGaugeFollowsVllmsSeries) {
  MetricsRegistry registry;
  EngineCore core(SmallConfig(), StepTimeModel{}, "m", &registry);
  auto series = [&](const char* state) {
    return Sample(
        registry.Render(),
        fmt::format(R"(vllm:engine_sleep_state{{model_name="m",sleep_state="{}"}})", state));
  };
  core.UpdateGauges(0);
  EXPECT_EQ(series("awake"), "1.0");
  EXPECT_EQ(series("weights_offloaded"), "0.0");
  core.Sleep(1, 1);
  core.UpdateGauges(1);
  EXPECT_EQ(series("awake"), "0.0");
  EXPECT_EQ(series("weights_offloaded"), "1.0");
  EXPECT_EQ(series("discard_all"), "0.0");
  core.Sleep(2, 2);
  core.UpdateGauges(2);
  EXPECT_EQ(series("weights_offloaded"), "0.0");
  EXPECT_EQ(series("discard_all"), "1.0");
  core.WakeUp(3, 4.8);
  core.UpdateGauges(5);
  EXPECT_EQ(series("awake"), "0.0") << "waking is still asleep, as vLLM records it";
  core.UpdateGauges(7.8);
  EXPECT_EQ(series("awake"), "1.0");
  EXPECT_EQ(series("discard_all"), "0.0");
}

}  // namespace
}  // namespace bmas::engine
