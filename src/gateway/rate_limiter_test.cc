#include "gateway/rate_limiter.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace bmas::gateway {
namespace {

// 2023-12-09 00:00:00 UTC, and one hour later.
constexpr double kMidnight = 19700.0 * 86400;
constexpr double kT = kMidnight + 3600;

struct Event {
  enum Kind { kStart, kTokens, kEnd } kind;
  double time;
  int64_t tokens = 0;
};

Event Start(double t) { return {Event::kStart, t}; }
Event Tokens(double t, int64_t n) { return {Event::kTokens, t, n}; }
Event End(double t) { return {Event::kEnd, t}; }

void Replay(RateLimiter& limiter, const std::string& user, const std::vector<Event>& events) {
  for (const Event& e : events) {
    switch (e.kind) {
      case Event::kStart:
        limiter.OnStart(user, e.time);
        break;
      case Event::kTokens:
        limiter.OnTokens(user, e.tokens, e.time);
        break;
      case Event::kEnd:
        limiter.OnEnd(user);
        break;
    }
  }
}

UserLimits Rpm(int64_t n) {
  UserLimits l;
  l.rpm = n;
  return l;
}
UserLimits Tpm(int64_t n) {
  UserLimits l;
  l.tpm = n;
  return l;
}
UserLimits PerDay(int64_t n) {
  UserLimits l;
  l.tokens_per_day = n;
  return l;
}
UserLimits Concurrent(int64_t n) {
  UserLimits l;
  l.max_concurrent = n;
  return l;
}

struct LimitCase {
  const char* name;
  UserLimits limits;
  std::vector<Event> history;
  double now;
  const char* blocked_by;  // "" = allowed
  double retry_after_s;
};

class RateLimiterCheckTest : public testing::TestWithParam<LimitCase> {};

TEST_P(RateLimiterCheckTest, Decides) {
  const LimitCase& c = GetParam();
  RateLimiter limiter;
  Replay(limiter, "alice", c.history);
  const LimitDecision d = limiter.Check("alice", c.limits, c.now);
  EXPECT_EQ(d.allowed, std::string(c.blocked_by).empty());
  EXPECT_EQ(d.limit, c.blocked_by);
  EXPECT_NEAR(d.retry_after_s, c.retry_after_s, 1e-6);
  EXPECT_EQ(d.message.empty(), d.allowed);
  // Another user is not affected by alice's history.
  const LimitDecision other = limiter.Check("bob", c.limits, c.now);
  const bool zero_limit = (c.limits.rpm && *c.limits.rpm == 0) ||
                          (c.limits.tpm && *c.limits.tpm == 0) ||
                          (c.limits.tokens_per_day && *c.limits.tokens_per_day == 0) ||
                          (c.limits.max_concurrent && *c.limits.max_concurrent == 0);
  EXPECT_EQ(other.allowed, !zero_limit);
}

std::vector<Event> Starts(double from, int n, double every) {
  std::vector<Event> events;
  for (int i = 0; i < n; ++i) events.push_back(Start(from + i * every));
  return events;
}

INSTANTIATE_TEST_SUITE_P(
    Limits, RateLimiterCheckTest,
    testing::Values(
        LimitCase{"UnsetIsUnlimited",
                  UserLimits{},
                  {Start(kT), Tokens(kT, 1000000000), Start(kT), Start(kT)},
                  kT,
                  "",
                  0},
        LimitCase{"RpmBelow", Rpm(3), Starts(kT, 2, 10), kT + 30, "", 0},
        LimitCase{"RpmReached", Rpm(3), Starts(kT, 3, 10), kT + 30, "rpm", 30},
        LimitCase{"RpmOldestLeftTheWindow", Rpm(3), Starts(kT, 3, 10), kT + 60, "", 0},
        LimitCase{"RpmJustBeforeTheOldestLeaves", Rpm(3), Starts(kT, 3, 10), kT + 59.5, "rpm", 0.5},
        LimitCase{"RpmOverAfterLowering", Rpm(3), Starts(kT, 5, 5), kT + 30, "rpm", 40},
        LimitCase{"RpmEndedRequestsStillCount",
                  Rpm(2),
                  {Start(kT), End(kT + 1), Start(kT + 2), End(kT + 3)},
                  kT + 4,
                  "rpm",
                  56},
        LimitCase{"RpmZeroBlocks", Rpm(0), {}, kT, "rpm", 60},
        LimitCase{"TpmBelow", Tpm(1000), {Tokens(kT, 999)}, kT + 1, "", 0},
        LimitCase{
            "TpmReached", Tpm(1000), {Tokens(kT, 600), Tokens(kT + 5, 400)}, kT + 10, "tpm", 50},
        LimitCase{"TpmOverNeedsSeveralToLeave",
                  Tpm(700),
                  {Tokens(kT, 300), Tokens(kT + 1, 300), Tokens(kT + 2, 600)},
                  kT + 10,
                  "tpm",
                  51},
        LimitCase{"TpmSlid", Tpm(1000), {Tokens(kT, 5000)}, kT + 60, "", 0},
        LimitCase{"TpmZeroBlocks", Tpm(0), {}, kT, "tpm", 60},
        LimitCase{"DayBelow", PerDay(5000), {Tokens(kT, 4999)}, kT + 100, "", 0},
        LimitCase{"DayReached",
                  PerDay(5000),
                  {Tokens(kT, 3000), Tokens(kT + 7200, 2000)},
                  kT + 7200,
                  "tokens_per_day",
                  86400 - 3 * 3600},
        LimitCase{"DayRollsOverAtUtcMidnight",
                  PerDay(5000),
                  {Tokens(kMidnight - 1, 5000)},
                  kMidnight,
                  "",
                  0},
        LimitCase{"DayCountsOnlyToday",
                  PerDay(5000),
                  {Tokens(kMidnight - 1, 5000), Tokens(kMidnight + 1, 1)},
                  kMidnight + 2,
                  "",
                  0},
        LimitCase{"DayJustBeforeMidnight",
                  PerDay(5000),
                  {Tokens(kMidnight - 100, 5000)},
                  kMidnight - 0.25,
                  "tokens_per_day",
                  0.25},
        LimitCase{"DayZeroBlocks", PerDay(0), {}, kT, "tokens_per_day", 86400 - 3600},
        LimitCase{"ConcurrentBelow", Concurrent(2), {Start(kT)}, kT, "", 0},
        LimitCase{
            "ConcurrentReached", Concurrent(2), {Start(kT), Start(kT)}, kT, "max_concurrent", 1},
        LimitCase{"ConcurrentFreedByEnd",
                  Concurrent(2),
                  {Start(kT), Start(kT), End(kT + 1)},
                  kT + 1,
                  "",
                  0},
        LimitCase{"ConcurrentZeroBlocks", Concurrent(0), {}, kT, "max_concurrent", 1},
        LimitCase{"LongestWaitIsReported",
                  UserLimits{1.0, 1, std::nullopt, 100, 1},
                  {Start(kT), Tokens(kT, 100)},
                  kT + 1,
                  "tokens_per_day",
                  86400 - 3601}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(RateLimiterTest, MessageNamesTheLimitUserAndWait) {
  RateLimiter limiter;
  limiter.OnStart("alice", kT - 48);
  for (int i = 0; i < 59; ++i) limiter.OnStart("alice", kT - 10);
  const LimitDecision d = limiter.Check("alice", Rpm(60), kT);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.message,
            "rate limit: 60 requests per minute (rpm) reached for user alice; retry in 12 s");
  EXPECT_EQ(limiter.Check("alice", Rpm(0), kT).message,
            "rate limit: user alice is allowed no requests per minute (rpm is 0)");
}

TEST(RateLimiterTest, WindowSlides) {
  RateLimiter limiter;
  const UserLimits limits = Rpm(2);
  limiter.OnStart("a", kT);
  limiter.OnStart("a", kT + 30);
  EXPECT_FALSE(limiter.Check("a", limits, kT + 59.9).allowed);
  EXPECT_TRUE(limiter.Check("a", limits, kT + 60).allowed);
  limiter.OnStart("a", kT + 60);
  EXPECT_EQ(limiter.window_entries_for_test("a"), 2u);  // kT left the window at kT + 60
  const LimitDecision d = limiter.Check("a", limits, kT + 60);
  EXPECT_FALSE(d.allowed);
  EXPECT_NEAR(d.retry_after_s, 30, 1e-6);  // the start at kT + 30 leaves at kT + 90
  EXPECT_TRUE(limiter.Check("a", limits, kT + 90).allowed);
}

TEST(RateLimiterTest, InFlightCountsStartsAndEnds) {
  RateLimiter limiter;
  EXPECT_EQ(limiter.in_flight("a"), 0);
  limiter.OnStart("a", kT);
  limiter.OnStart("a", kT);
  EXPECT_EQ(limiter.in_flight("a"), 2);
  limiter.OnEnd("a");
  limiter.OnEnd("a");
  limiter.OnEnd("a");  // an extra end never goes below 0
  limiter.OnEnd("nobody");
  EXPECT_EQ(limiter.in_flight("a"), 0);
  EXPECT_EQ(limiter.in_flight("nobody"), 0);
}

TEST(RateLimiterTest, BucketsBoundMemoryAndStayExact) {
  RateLimiter limiter;
  // 1000 requests within one 100 ms bucket: one entry, all counted.
  for (int i = 0; i < 1000; ++i) limiter.OnStart("a", kT + i * 1e-5);
  EXPECT_EQ(limiter.window_entries_for_test("a"), 1u);
  EXPECT_FALSE(limiter.Check("a", Rpm(1000), kT + 1).allowed);
  EXPECT_TRUE(limiter.Check("a", Rpm(1001), kT + 1).allowed);
  // A request and its tokens every 10 ms for two minutes: at most 601 buckets per window.
  for (int i = 0; i < 12000; ++i) {
    limiter.OnStart("b", kT + i * 0.01);
    limiter.OnTokens("b", 10, kT + i * 0.01);
  }
  EXPECT_LE(limiter.window_entries_for_test("b"), 2u * 601);
  // ~6000 requests in the last minute (bucketing may keep one bucket up to 100 ms longer).
  EXPECT_TRUE(limiter.Check("b", Rpm(6011), kT + 120).allowed);
  EXPECT_FALSE(limiter.Check("b", Rpm(5990), kT + 120).allowed);
}

// Start is Check then, when allowed, OnStart: the same decisions and the same state after,
// for users it knows and users it does not, under every kind of limit.
TEST(RateLimiterTest, StartDecidesAndCountsAsCheckThenOnStart) {
  std::mt19937_64 rng(11);
  RateLimiter started, checked;
  const std::vector<std::string> users = {"alice", "bob", "carol"};
  std::vector<UserLimits> limits(users.size());
  limits[0].rpm = 5;
  limits[0].max_concurrent = 2;
  limits[1].tpm = 300;
  limits[1].tokens_per_day = 2000;
  limits[2].rpm = 0;  // blocks every request
  double t = kT;
  for (int step = 0; step < 3000; ++step) {
    t += static_cast<double>(rng() % 2000) / 1000;
    const size_t u = rng() % users.size();
    const std::string& user = users[u];
    switch (rng() % 3) {
      case 0: {
        const LimitDecision a = started.Start(user, limits[u], t);
        const LimitDecision b = checked.Check(user, limits[u], t);
        if (b.allowed) checked.OnStart(user, t);
        ASSERT_EQ(a.allowed, b.allowed) << step;
        ASSERT_EQ(a.limit, b.limit) << step;
        ASSERT_EQ(a.retry_after_s, b.retry_after_s) << step;
        ASSERT_EQ(a.message, b.message) << step;
        break;
      }
      case 1: {
        const int64_t tokens = static_cast<int64_t>(rng() % 120);
        started.OnTokens(user, tokens, t);
        checked.OnTokens(user, tokens, t);
        break;
      }
      default:
        started.OnEnd(user);
        checked.OnEnd(user);
    }
    for (const std::string& v : users) {
      ASSERT_EQ(started.in_flight(v), checked.in_flight(v)) << step;
      ASSERT_EQ(started.window_entries_for_test(v), checked.window_entries_for_test(v)) << step;
    }
    ASSERT_EQ(started.known_users_for_test(), checked.known_users_for_test()) << step;
  }
}

TEST(RateLimiterTest, PruneForgetsIdleUsers) {
  RateLimiter limiter;
  limiter.OnStart("a", kT);
  limiter.OnTokens("a", 10, kT);
  limiter.OnEnd("a");
  limiter.OnStart("b", kT);  // still in flight
  limiter.Prune(kT + 30);
  EXPECT_EQ(limiter.known_users_for_test(), 2u);
  limiter.Prune(kT + 61);
  EXPECT_EQ(limiter.known_users_for_test(), 2u);  // a's tokens today still count
  EXPECT_FALSE(limiter.Check("a", PerDay(10), kT + 61).allowed);
  limiter.Prune(kMidnight + 86400);
  EXPECT_EQ(limiter.known_users_for_test(), 1u);  // b is in flight
  EXPECT_EQ(limiter.in_flight("b"), 1);
}

TEST(SharedLimitRefusalTest, NamesTheLimitAndBoundsTheWait) {
  UserLimits limits;
  limits.rpm = 6;
  limits.tpm = 1000;
  limits.tokens_per_day = 5000;
  limits.max_concurrent = 2;
  LimitDecision tpm = SharedLimitRefusal("alice", limits, "tpm", kT);
  EXPECT_FALSE(tpm.allowed);
  EXPECT_EQ(tpm.limit, "tpm");
  EXPECT_EQ(tpm.retry_after_s, RateLimiter::kWindowS);
  EXPECT_NE(tpm.message.find("1000 tokens per minute (tpm) reached for user alice"),
            std::string::npos)
      << tpm.message;
  EXPECT_EQ(SharedLimitRefusal("alice", limits, "rpm", kT).limit, "rpm");
  LimitDecision day = SharedLimitRefusal("alice", limits, "tokens_per_day", kMidnight - 10);
  EXPECT_EQ(day.limit, "tokens_per_day");
  EXPECT_DOUBLE_EQ(day.retry_after_s, 10);
  LimitDecision concurrent = SharedLimitRefusal("alice", limits, "max_concurrent", kT);
  EXPECT_EQ(concurrent.limit, "max_concurrent");
  EXPECT_EQ(concurrent.retry_after_s, 1);
}

TEST(SharedLimitRefusalTest, ALimitNotYetSeenLocallyIsNamedWithoutAFigure) {
  LimitDecision tpm = SharedLimitRefusal("alice", UserLimits{}, "tpm", kT);
  EXPECT_EQ(tpm.limit, "tpm");
  EXPECT_EQ(tpm.message,
            "rate limit: tokens per minute (tpm) reached for user alice; retry in 60 s");
}

}  // namespace
}  // namespace bmas::gateway
