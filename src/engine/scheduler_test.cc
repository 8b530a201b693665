#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

namespace bmas::engine {
namespace {

// `n` distinct tokens starting at `first`.
std::vector<TokenId> Tokens(int n, TokenId first) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::unique_ptr<Request> MakeRequest(RequestId id, std::vector<TokenId> prompt, int max_tokens,
                                     int priority = 0) {
  auto r = std::make_unique<Request>();
  r->id = id;
  r->seed = id;
  r->num_prompt_tokens = static_cast<int>(prompt.size());
  r->tokens = std::move(prompt);
  r->max_tokens = max_tokens;
  r->priority = priority;
  return r;
}

// Adds a request that must be accepted; returns it (owned by the scheduler).
Request* AddOk(Scheduler& s, std::unique_ptr<Request> r) {
  Request* raw = r.get();
  Result<void> added = s.Add(std::move(r));
  EXPECT_TRUE(added.has_value()) << (added ? "" : added.error().message);
  return raw;
}

// Runs one step and removes the requests that finished; returns the ids that produced a token.
std::vector<RequestId> Step(Scheduler& s, double now = 0) {
  s.Schedule(now);
  std::vector<RequestId> produced, finished;
  for (Request* r : s.Complete(now)) {
    produced.push_back(r->id);
    if (r->finish_reason != FinishReason::kNone) finished.push_back(r->id);
  }
  for (RequestId id : finished) s.Remove(id, FinishReason::kNone);
  return produced;
}

int ScheduledTokens(const StepBatch& batch) {
  int n = 0;
  for (const ScheduledRequest& s : batch.requests) n += s.num_new_tokens;
  return n;
}

SchedulerConfig SmallConfig() {
  SchedulerConfig c;
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 1024;
  c.block_size = 16;
  c.num_kv_blocks = 256;
  c.max_model_len = 4096;
  return c;
}

TEST(SchedulerTest, AddRejectsPromptPlusMaxTokensOverMaxModelLen) {
  SchedulerConfig c = SmallConfig();
  c.max_model_len = 100;
  Scheduler s(c);
  Result<void> r = s.Add(MakeRequest(1, Tokens(90, 1), 11));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().param, "max_tokens");
  EXPECT_EQ(s.num_waiting(), 0);
  EXPECT_TRUE(s.Add(MakeRequest(2, Tokens(90, 1), 10)).has_value());  // exactly the limit
}

TEST(SchedulerTest, AddRejectsEmptyPromptAndDuplicateId) {
  Scheduler s(SmallConfig());
  Result<void> empty = s.Add(MakeRequest(1, {}, 4));
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidArgument);
  AddOk(s, MakeRequest(2, Tokens(4, 1), 4));
  Result<void> dup = s.Add(MakeRequest(2, Tokens(4, 1), 4));
  ASSERT_FALSE(dup.has_value());
  EXPECT_EQ(dup.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.num_waiting(), 1);
}

class SchedulerMaxTokensTest : public testing::TestWithParam<int> {};

TEST_P(SchedulerMaxTokensTest, GeneratesExactlyMaxTokensThenFinishesWithLength) {
  const int max_tokens = GetParam();
  Scheduler s(SmallConfig());
  AddOk(s, MakeRequest(1, Tokens(20, 1), max_tokens));
  int produced = 0;
  for (int step = 0; step < 100; ++step) {
    s.Schedule(step);
    const std::vector<Request*>& out = s.Complete(step);
    if (out.empty()) continue;
    ASSERT_EQ(out.size(), 1u);
    ++produced;
    EXPECT_EQ(out[0]->num_output_tokens(), produced);
    if (produced < max_tokens) {
      EXPECT_EQ(out[0]->finish_reason, FinishReason::kNone);
    } else {
      EXPECT_EQ(out[0]->finish_reason, FinishReason::kLength);
      break;
    }
  }
  EXPECT_EQ(produced, max_tokens);
  std::unique_ptr<Request> r = s.Remove(1, FinishReason::kAbort);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->finish_reason, FinishReason::kLength);  // the first reason stays
  EXPECT_FALSE(s.HasWork());
}

INSTANTIATE_TEST_SUITE_P(Lengths, SchedulerMaxTokensTest, testing::Values(1, 2, 7, 40));

TEST(SchedulerTest, OutputTokensFollowTheSeed) {
  Scheduler s(SmallConfig());
  Request* r = AddOk(s, MakeRequest(7, Tokens(5, 1), 3));
  for (int step = 0; step < 2; ++step) {
    s.Schedule(step);
    s.Complete(step);
  }
  ASSERT_EQ(r->num_output_tokens(), 2);
  EXPECT_EQ(r->tokens[5], SampleToken(7, 0));
  EXPECT_EQ(r->tokens[6], SampleToken(7, 1));
}

TEST(SchedulerTest, DecodesAreScheduledBeforePrefills) {
  SchedulerConfig c = SmallConfig();
  c.max_num_batched_tokens = 4;
  Scheduler s(c);
  AddOk(s, MakeRequest(1, Tokens(4, 1), 10));
  Step(s);  // request 1 prefilled, now decoding
  AddOk(s, MakeRequest(2, Tokens(10, 100), 10));
  const StepBatch& batch = s.Schedule(1);
  ASSERT_EQ(batch.requests.size(), 2u);
  EXPECT_EQ(batch.requests[0].request->id, 1u);
  EXPECT_EQ(batch.requests[0].num_new_tokens, 1);
  EXPECT_EQ(batch.requests[1].request->id, 2u);
  EXPECT_EQ(batch.requests[1].num_new_tokens, 3);  // what is left of the budget
  EXPECT_EQ(batch.num_decode_tokens, 1);
  EXPECT_EQ(batch.num_prefill_tokens, 3);
}

TEST(SchedulerTest, ContextTokensCountTheScheduledRequestsLengths) {
  Scheduler s(SmallConfig());
  AddOk(s, MakeRequest(1, Tokens(10, 1), 10));
  EXPECT_EQ(s.Schedule(0).num_context_tokens, 10);
  s.Complete(0);
  EXPECT_EQ(s.Schedule(1).num_context_tokens, 11);
}

class SchedulerBudgetTest : public testing::TestWithParam<int> {};

TEST_P(SchedulerBudgetTest, NeverSchedulesMoreThanTheTokenBudget) {
  SchedulerConfig c = SmallConfig();
  c.max_num_batched_tokens = GetParam();
  Scheduler s(c);
  for (RequestId id = 1; id <= 10; ++id) AddOk(s, MakeRequest(id, Tokens(10, id * 100), 5));
  int produced = 0;
  for (int step = 0; step < 1000 && s.HasWork(); ++step) {
    const StepBatch& batch = s.Schedule(step);
    ASSERT_GT(ScheduledTokens(batch), 0);
    ASSERT_LE(ScheduledTokens(batch), GetParam());
    EXPECT_EQ(batch.num_decode_tokens + batch.num_prefill_tokens, ScheduledTokens(batch));
    std::vector<RequestId> finished;
    for (Request* r : s.Complete(step)) {
      ++produced;
      if (r->finish_reason != FinishReason::kNone) finished.push_back(r->id);
    }
    for (RequestId id : finished) s.Remove(id, FinishReason::kNone);
  }
  EXPECT_FALSE(s.HasWork());
  EXPECT_EQ(produced, 10 * 5);
}

INSTANTIATE_TEST_SUITE_P(Budgets, SchedulerBudgetTest, testing::Values(1, 7, 25, 64, 8192));

TEST(SchedulerTest, LongPromptIsPrefilledInChunks) {
  SchedulerConfig c = SmallConfig();
  c.max_num_batched_tokens = 32;
  Scheduler s(c);
  Request* r = AddOk(s, MakeRequest(1, Tokens(100, 1), 4));
  for (int chunk : {32, 32, 32}) {
    const StepBatch& batch = s.Schedule(0);
    ASSERT_EQ(batch.requests.size(), 1u);
    EXPECT_EQ(batch.requests[0].num_new_tokens, chunk);
    EXPECT_EQ(batch.num_prefill_tokens, chunk);
    EXPECT_TRUE(s.Complete(0).empty());  // no token until the whole prompt is computed
  }
  EXPECT_EQ(r->num_computed_tokens, 96);
  const StepBatch& last = s.Schedule(0);
  ASSERT_EQ(last.requests.size(), 1u);
  EXPECT_EQ(last.requests[0].num_new_tokens, 4);
  EXPECT_EQ(s.Complete(0).size(), 1u);
  EXPECT_EQ(r->num_output_tokens(), 1);
}

TEST(SchedulerTest, AtMostOnePartialPrefillPerStep) {
  SchedulerConfig c = SmallConfig();
  c.max_num_batched_tokens = 32;
  Scheduler s(c);
  Request* a = AddOk(s, MakeRequest(1, Tokens(100, 1), 8));
  Request* b = AddOk(s, MakeRequest(2, Tokens(100, 1000), 8));
  for (int step = 0; step < 20; ++step) {
    const StepBatch& batch = s.Schedule(step);
    int partial = 0;
    bool a_prefilled_by_step_end = a->num_output_tokens() > 0;
    bool b_scheduled = false;
    for (const ScheduledRequest& x : batch.requests) {
      bool completes = x.request->num_computed_tokens + x.num_new_tokens >= x.request->num_tokens();
      if (!completes) ++partial;
      if (x.request == a && completes) a_prefilled_by_step_end = true;
      if (x.request == b) b_scheduled = true;
    }
    EXPECT_LE(partial, 1) << "step " << step;
    if (b_scheduled) {
      EXPECT_TRUE(a_prefilled_by_step_end) << "step " << step;
    }
    s.Complete(step);
  }
  EXPECT_GT(a->num_output_tokens(), 0);
  EXPECT_GT(b->num_output_tokens(), 0);
}

TEST(SchedulerTest, MaxNumSeqsCapsTheRunningRequests) {
  SchedulerConfig c = SmallConfig();
  c.max_num_seqs = 2;
  Scheduler s(c);
  for (RequestId id = 1; id <= 5; ++id) AddOk(s, MakeRequest(id, Tokens(8, id * 100), 4));
  EXPECT_EQ(s.Schedule(0).requests.size(), 2u);
  s.Complete(0);
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 3);
  EXPECT_EQ(s.Schedule(1).requests.size(), 2u);
}

TEST(SchedulerTest, AdmitsOnlyWhenKvBlocksCanBeAllocated) {
  SchedulerConfig c = SmallConfig();
  c.num_kv_blocks = 4;
  Scheduler s(c);
  AddOk(s, MakeRequest(1, Tokens(40, 1), 4));    // 3 blocks
  AddOk(s, MakeRequest(2, Tokens(40, 100), 4));  // 3 more: do not fit
  const StepBatch& batch = s.Schedule(0);
  ASSERT_EQ(batch.requests.size(), 1u);
  EXPECT_EQ(batch.requests[0].request->id, 1u);
  EXPECT_EQ(s.num_waiting(), 1);
  EXPECT_EQ(s.kv().num_free_blocks(), 1);
  s.Complete(0);
  s.Remove(1, FinishReason::kAbort);
  const StepBatch& next = s.Schedule(1);
  ASSERT_EQ(next.requests.size(), 1u);
  EXPECT_EQ(next.requests[0].request->id, 2u);
}

TEST(SchedulerTest, SharedPromptPrefixIsAHitCountedInTokens) {
  Scheduler s(SmallConfig());
  const std::vector<TokenId> prefix = Tokens(32, 1);
  AddOk(s, MakeRequest(1, Concat(prefix, Tokens(8, 500)), 4));
  Step(s);
  EXPECT_EQ(s.batch().prefix_hits, 0);
  EXPECT_EQ(s.batch().prefix_queries, 40);

  Request* b = AddOk(s, MakeRequest(2, Concat(prefix, Tokens(8, 900)), 4));
  const StepBatch& batch = s.Schedule(1);
  EXPECT_EQ(batch.prefix_queries, 40);
  EXPECT_EQ(batch.prefix_hits, 32);
  ASSERT_EQ(batch.requests.size(), 2u);
  EXPECT_EQ(batch.requests[1].request, b);
  EXPECT_EQ(batch.requests[1].num_new_tokens, 8);
  EXPECT_EQ(b->num_cached_tokens, 32);
  EXPECT_EQ(b->num_computed_tokens, 32);
}

struct WholePromptCase {
  int prompt_len;
  int expected_hit;
};

class SchedulerWholePromptHitTest : public testing::TestWithParam<WholePromptCase> {};

TEST_P(SchedulerWholePromptHitTest, LastPromptTokenIsAlwaysComputed) {
  Scheduler s(SmallConfig());
  const std::vector<TokenId> prompt = Tokens(GetParam().prompt_len, 1);
  AddOk(s, MakeRequest(1, prompt, 4));
  Step(s);
  s.Remove(1, FinishReason::kAbort);
  AddOk(s, MakeRequest(2, prompt, 4));
  const StepBatch& batch = s.Schedule(1);
  EXPECT_EQ(batch.prefix_hits, GetParam().expected_hit);
  ASSERT_EQ(batch.requests.size(), 1u);
  EXPECT_EQ(batch.requests[0].num_new_tokens, GetParam().prompt_len - GetParam().expected_hit);
}

INSTANTIATE_TEST_SUITE_P(Lengths, SchedulerWholePromptHitTest,
                         testing::Values(WholePromptCase{16, 0}, WholePromptCase{17, 16},
                                         WholePromptCase{32, 16}, WholePromptCase{40, 32},
                                         WholePromptCase{48, 32}));

TEST(SchedulerTest, DisabledPrefixCachingGivesNoHits) {
  SchedulerConfig c = SmallConfig();
  c.enable_prefix_caching = false;
  Scheduler s(c);
  const std::vector<TokenId> prompt = Tokens(40, 1);
  AddOk(s, MakeRequest(1, prompt, 4));
  Step(s);
  AddOk(s, MakeRequest(2, prompt, 4));
  const StepBatch& batch = s.Schedule(1);
  EXPECT_EQ(batch.prefix_hits, 0);
  ASSERT_EQ(batch.requests.size(), 2u);
  EXPECT_EQ(batch.requests[1].num_new_tokens, 40);
}

// The follow-up turn of a chat repeats the previous prompt and answer. vLLM caches every full
// computed block, so the blocks filled by decoding are hits too.
TEST(SchedulerTest, BlocksFilledByDecodingArePrefixHitsForTheNextTurn) {
  Scheduler s(SmallConfig());
  AddOk(s, MakeRequest(1, Tokens(20, 1), 20));
  std::vector<TokenId> conversation;
  for (int step = 0; step < 100 && s.HasWork(); ++step) {
    s.Schedule(step);
    for (Request* r : s.Complete(step)) {
      if (r->finish_reason != FinishReason::kNone) conversation = r->tokens;
    }
    if (!conversation.empty()) s.Remove(1, FinishReason::kNone);
  }
  ASSERT_EQ(conversation.size(), 40u);  // 39 of them computed: blocks 0 and 1 are full
  AddOk(s, MakeRequest(2, Concat(conversation, Tokens(8, 5000)), 4));
  EXPECT_EQ(s.Schedule(100).prefix_hits, 32);
}

// With a token budget that is not a multiple of the block size, chunk boundaries fall inside
// blocks; those blocks are full after the next chunk and must be cached like the others.
TEST(SchedulerTest, BlocksCompletedByALaterChunkArePrefixHits) {
  SchedulerConfig c = SmallConfig();
  c.max_num_batched_tokens = 20;
  Scheduler s(c);
  const std::vector<TokenId> prompt = Tokens(64, 1);
  AddOk(s, MakeRequest(1, prompt, 1));
  for (int step = 0; step < 10 && s.HasWork(); ++step) Step(s, step);  // chunks 20, 20, 20, 4
  ASSERT_FALSE(s.HasWork());
  AddOk(s, MakeRequest(2, Concat(prompt, Tokens(16, 5000)), 1));
  EXPECT_EQ(s.Schedule(10).prefix_hits, 64);
}

TEST(SchedulerTest, RemoveOfARunningRequestFreesItsBlocksAtOnce) {
  SchedulerConfig c = SmallConfig();
  Scheduler s(c);
  AddOk(s, MakeRequest(1, Tokens(40, 1), 10));
  s.Schedule(0);
  EXPECT_EQ(s.kv().num_free_blocks(), c.num_kv_blocks - 3);
  // Removed mid-step: freed at once and not accounted when the step completes.
  std::unique_ptr<Request> r = s.Remove(1, FinishReason::kAbort);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(r->running);
  EXPECT_EQ(s.kv().num_free_blocks(), c.num_kv_blocks);
  EXPECT_TRUE(s.Complete(1).empty());
  EXPECT_EQ(s.num_running(), 0);
  EXPECT_FALSE(s.HasWork());
  EXPECT_EQ(s.Remove(1, FinishReason::kAbort), nullptr);
}

TEST(SchedulerTest, RemoveOfAWaitingRequest) {
  SchedulerConfig c = SmallConfig();
  c.max_num_seqs = 1;
  Scheduler s(c);
  AddOk(s, MakeRequest(1, Tokens(8, 1), 10));
  AddOk(s, MakeRequest(2, Tokens(8, 100), 10));
  Step(s);
  ASSERT_EQ(s.num_waiting(), 1);
  ASSERT_NE(s.Remove(2, FinishReason::kAbort), nullptr);
  EXPECT_EQ(s.num_waiting(), 0);
  EXPECT_EQ(s.num_running(), 1);
}

// Three 8-token requests fill a 6-block cache of 4-token blocks; each then needs a third block
// to decode its 9th token.
SchedulerConfig TightConfig(SchedulingPolicy policy) {
  SchedulerConfig c = SmallConfig();
  c.block_size = 4;
  c.num_kv_blocks = 6;
  c.policy = policy;
  return c;
}

TEST(SchedulerTest, FcfsPreemptsTheLatestArrivalToTheFrontOfTheQueue) {
  Scheduler s(TightConfig(SchedulingPolicy::kFcfs));
  Request* a = AddOk(s, MakeRequest(1, Tokens(8, 100), 10));
  Request* b = AddOk(s, MakeRequest(2, Tokens(8, 200), 10));
  Request* c = AddOk(s, MakeRequest(3, Tokens(8, 300), 10));
  Step(s);
  ASSERT_EQ(s.num_running(), 3);
  ASSERT_EQ(s.kv().num_free_blocks(), 0);
  AddOk(s, MakeRequest(4, Tokens(8, 400), 10));  // arrives after c

  const StepBatch& batch = s.Schedule(1);
  EXPECT_EQ(batch.num_preemptions, 1);
  ASSERT_EQ(batch.requests.size(), 2u);
  EXPECT_EQ(batch.requests[0].request, a);
  EXPECT_EQ(batch.requests[1].request, b);
  EXPECT_FALSE(c->running);
  EXPECT_EQ(c->num_computed_tokens, 0);
  EXPECT_TRUE(c->blocks.blocks.empty());
  EXPECT_EQ(c->num_tokens(), 9);  // its output token is kept and recomputed
  EXPECT_EQ(s.num_waiting(), 2);
  s.Complete(1);

  s.Remove(1, FinishReason::kAbort);
  s.Remove(2, FinishReason::kAbort);
  const StepBatch& next = s.Schedule(2);
  ASSERT_EQ(next.requests.size(), 2u);
  EXPECT_EQ(next.requests[0].request, c);  // ahead of request 4
  EXPECT_EQ(next.requests[0].num_new_tokens, 9);
  EXPECT_EQ(next.requests[1].request->id, 4u);
}

TEST(SchedulerTest, PriorityPreemptsTheLargestPriorityValue) {
  Scheduler s(TightConfig(SchedulingPolicy::kPriority));
  Request* a = AddOk(s, MakeRequest(1, Tokens(8, 100), 10, /*priority=*/0));
  Request* b = AddOk(s, MakeRequest(2, Tokens(8, 200), 10, /*priority=*/5));
  Request* c = AddOk(s, MakeRequest(3, Tokens(8, 300), 10, /*priority=*/1));
  Step(s);
  ASSERT_EQ(s.num_running(), 3);

  const StepBatch& batch = s.Schedule(1);
  EXPECT_EQ(batch.num_preemptions, 1);
  EXPECT_FALSE(b->running);
  EXPECT_EQ(b->num_computed_tokens, 0);
  EXPECT_TRUE(a->running);
  EXPECT_TRUE(c->running);
  ASSERT_EQ(batch.requests.size(), 2u);
  EXPECT_EQ(batch.requests[0].request, a);
  EXPECT_EQ(batch.requests[1].request, c);
}

TEST(SchedulerTest, PriorityVictimAlreadyInTheBatchIsTakenOut) {
  SchedulerConfig cfg = TightConfig(SchedulingPolicy::kPriority);
  cfg.num_kv_blocks = 4;
  Scheduler s(cfg);
  Request* a = AddOk(s, MakeRequest(1, Tokens(7, 100), 10, /*priority=*/5));  // decodes in place
  Request* b = AddOk(s, MakeRequest(2, Tokens(8, 200), 10, /*priority=*/0));  // needs a block
  Step(s);
  const StepBatch& batch = s.Schedule(1);
  EXPECT_EQ(batch.num_preemptions, 1);
  ASSERT_EQ(batch.requests.size(), 1u);
  EXPECT_EQ(batch.requests[0].request, b);
  EXPECT_EQ(batch.num_context_tokens, 9);
  EXPECT_FALSE(a->running);
  s.Complete(1);
  EXPECT_EQ(a->num_output_tokens(), 1);
  EXPECT_EQ(b->num_output_tokens(), 2);
}

struct WaitingPreemptCase {
  std::string name;
  SchedulingPolicy policy;
  int running_priority;
  int waiting_priority;
  bool preempts;
};

class SchedulerWaitingPreemptTest : public testing::TestWithParam<WaitingPreemptCase> {};

TEST_P(SchedulerWaitingPreemptTest, BetterWaitingRequestPushesOutAWorseRunningOne) {
  const WaitingPreemptCase& p = GetParam();
  SchedulerConfig cfg = TightConfig(p.policy);
  cfg.num_kv_blocks = 4;
  Scheduler s(cfg);
  Request* a = AddOk(s, MakeRequest(1, Tokens(10, 100), 10, p.running_priority));  // 3 blocks
  Step(s);
  Request* b = AddOk(s, MakeRequest(2, Tokens(8, 200), 10, p.waiting_priority));  // needs 2
  const StepBatch& batch = s.Schedule(1);
  ASSERT_EQ(batch.requests.size(), 1u);
  EXPECT_EQ(batch.num_preemptions, p.preempts ? 1 : 0);
  EXPECT_EQ(batch.requests[0].request, p.preempts ? b : a);
  EXPECT_EQ(a->running, !p.preempts);
  EXPECT_EQ(b->running, p.preempts);
  if (p.preempts) {
    EXPECT_EQ(a->num_computed_tokens, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SchedulerWaitingPreemptTest,
    testing::Values(
        WaitingPreemptCase{"FcfsNeverPreemptsForWaiting", SchedulingPolicy::kFcfs, 5, 0, false},
        WaitingPreemptCase{"PriorityBetterWaiting", SchedulingPolicy::kPriority, 5, 0, true},
        WaitingPreemptCase{"PrioritySamePriority", SchedulingPolicy::kPriority, 5, 5, false},
        WaitingPreemptCase{"PriorityWorseWaiting", SchedulingPolicy::kPriority, 0, 5, false}),
    [](const testing::TestParamInfo<WaitingPreemptCase>& info) { return info.param.name; });

TEST(SchedulerTest, PriorityPolicyAdmitsTheLowestValueFirst) {
  SchedulerConfig c = SmallConfig();
  c.max_num_seqs = 1;
  c.policy = SchedulingPolicy::kPriority;
  Scheduler s(c);
  AddOk(s, MakeRequest(1, Tokens(8, 100), 1, /*priority=*/3));
  AddOk(s, MakeRequest(2, Tokens(8, 200), 1, /*priority=*/1));
  AddOk(s, MakeRequest(3, Tokens(8, 300), 1, /*priority=*/2));
  AddOk(s, MakeRequest(4, Tokens(8, 400), 1, /*priority=*/1));  // ties go by arrival
  std::vector<RequestId> order;
  for (int step = 0; step < 10 && s.HasWork(); ++step) {
    for (RequestId id : Step(s, step)) order.push_back(id);
  }
  EXPECT_EQ(order, (std::vector<RequestId>{2, 4, 3, 1}));
}

TEST(SchedulerTest, FcfsAdmitsInArrivalOrder) {
  SchedulerConfig c = SmallConfig();
  c.max_num_seqs = 1;
  Scheduler s(c);
  for (RequestId id : {5, 3, 9}) AddOk(s, MakeRequest(id, Tokens(8, id * 100), 1));
  std::vector<RequestId> order;
  for (int step = 0; step < 10 && s.HasWork(); ++step) {
    for (RequestId id : Step(s, step)) order.push_back(id);
  }
  EXPECT_EQ(order, (std::vector<RequestId>{5, 3, 9}));
}

TEST(SchedulerTest, RecordsVirtualTimes) {
  Scheduler s(SmallConfig());
  Request* r = AddOk(s, MakeRequest(1, Tokens(8, 1), 3));
  s.Schedule(1.0);
  s.Complete(1.5);
  s.Schedule(1.5);
  s.Complete(2.0);
  EXPECT_DOUBLE_EQ(r->scheduled_time, 1.0);
  EXPECT_DOUBLE_EQ(r->first_token_time, 1.5);
  EXPECT_DOUBLE_EQ(r->prev_token_time, 1.5);
  EXPECT_DOUBLE_EQ(r->last_token_time, 2.0);
}

TEST(FinishReasonNameTest, NamesAsVllm) {
  EXPECT_STREQ(FinishReasonName(FinishReason::kNone), "");
  EXPECT_STREQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_STREQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_STREQ(FinishReasonName(FinishReason::kAbort), "abort");
}

}  // namespace
}  // namespace bmas::engine
