#include "common/restart_backoff.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace bmas {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RestartBackoffTest, TheDelayDoublesWithEachDeathInARowUpToTheMax) {
  RestartBackoff policy;  // 1 s, doubling, 30 s at most
  RestartCount count;
  Clock::time_point t{};
  std::vector<long> delays;
  for (int i = 0; i < 8; ++i) {
    Clock::time_point started = t;
    t += seconds(2);  // each run lasts 2 s: a crash loop
    Clock::time_point next = NextRestart(policy, count, started, t);
    delays.push_back(std::chrono::duration_cast<milliseconds>(next - t).count());
    t = next;
  }
  EXPECT_EQ(delays, (std::vector<long>{1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000}));
  EXPECT_EQ(count.deaths_in_a_row, 8);
}

TEST(RestartBackoffTest, AProcessThatStayedUpLongEnoughStartsTheCountAgain) {
  RestartBackoff policy;
  RestartCount count{5};
  Clock::time_point started{};
  Clock::time_point now = started + seconds(60);
  EXPECT_EQ(NextRestart(policy, count, started, now) - now, seconds(1));
  EXPECT_EQ(count.deaths_in_a_row, 1);
  // Just short of healthy_after: the count goes on.
  now = started + milliseconds(59999);
  EXPECT_EQ(NextRestart(policy, count, started, now) - now, seconds(2));
}

TEST(RestartBackoffTest, TheDelayNeverExceedsTheMaxEvenAfterManyDeaths) {
  RestartBackoff policy{milliseconds(700), seconds(5), seconds(10)};
  RestartCount count{1000};
  Clock::time_point now{};
  EXPECT_EQ(NextRestart(policy, count, now, now) - now, seconds(5));
}

}  // namespace
}  // namespace bmas
