#include "common/clock.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace bmas {
namespace {

using std::chrono_literals::operator""ms;
using std::chrono_literals::operator""s;

TEST(ManualClockTest, StartsWhereToldAndMovesOnlyWhenTold) {
  ManualClock clock;
  EXPECT_EQ(clock.Now(), TimePoint{0});
  EXPECT_EQ(clock.Now(), TimePoint{0});
  ManualClock later(TimePoint{100});
  EXPECT_DOUBLE_EQ(later.Now().count(), 100.0);
}

TEST(ManualClockTest, AdvanceAddsAndSetJumps) {
  ManualClock clock;
  clock.Advance(2s);
  EXPECT_DOUBLE_EQ(clock.Now().count(), 2.0);
  clock.Advance(500ms);
  EXPECT_DOUBLE_EQ(clock.Now().count(), 2.5);
  clock.Advance(Duration{0});
  EXPECT_DOUBLE_EQ(clock.Now().count(), 2.5);
  clock.Set(TimePoint{300});
  EXPECT_DOUBLE_EQ(clock.Now().count(), 300.0);
  clock.Set(TimePoint{300});  // the same time again is allowed
  EXPECT_DOUBLE_EQ(clock.Now().count(), 300.0);
}

TEST(ManualClockTest, ConcurrentAdvancesAreAllCounted) {
  ManualClock clock;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) clock.Advance(1ms);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_NEAR(clock.Now().count(), 4.0, 1e-9);
}

TEST(ManualClockTest, UsableThroughTheInterface) {
  ManualClock manual(TimePoint{5});
  const Clock& clock = manual;
  manual.Advance(1s);
  EXPECT_DOUBLE_EQ(clock.Now().count(), 6.0);
}

TEST(RealClockTest, NeverGoesBack) {
  RealClock clock;
  TimePoint previous = clock.Now();
  for (int i = 0; i < 1000; ++i) {
    TimePoint now = clock.Now();
    EXPECT_GE(now, previous);
    previous = now;
  }
}

}  // namespace
}  // namespace bmas
