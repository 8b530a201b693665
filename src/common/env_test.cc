#include "common/env.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>

namespace bmas {
namespace {

using std::chrono_literals::operator""ms;
using std::chrono_literals::operator""s;

TEST(PosixEnvTest, ClocksMoveAndWallTimeIsADate) {
  Env& env = Env::Default();
  EXPECT_EQ(&env, &Env::Default());
  const TimePoint before = env.Now();
  env.SleepFor(2ms);
  EXPECT_GE((env.Now() - before).count(), 0.002);
  // After 2020-01-01 and before 2100: seconds, not milliseconds, since 1970.
  EXPECT_GT(env.UnixNow(), 1.5e9);
  EXPECT_LT(env.UnixNow(), 4.1e9);
}

TEST(PosixEnvTest, RandomBytesDiffer) {
  std::array<uint8_t, 32> a{}, b{};
  Env::Default().RandomBytes(a);
  Env::Default().RandomBytes(b);
  EXPECT_NE(a, b);
}

TEST(ManualEnvTest, SleepingMovesTimeAtOnceAndWallTimeFollows) {
  ManualEnv env(TimePoint{10}, 1000);
  EXPECT_DOUBLE_EQ(env.Now().count(), 10);
  EXPECT_DOUBLE_EQ(env.UnixNow(), 1000);
  env.SleepFor(5s);
  env.Advance(500ms);
  EXPECT_DOUBLE_EQ(env.Now().count(), 15.5);
  EXPECT_DOUBLE_EQ(env.UnixNow(), 1005.5);
  env.SleepFor(Duration{-1});  // a deadline already past: no sleep, and time never goes back
  EXPECT_DOUBLE_EQ(env.Now().count(), 15.5);
}

TEST(ManualEnvTest, RandomBytesAreRepeatableBySeed) {
  std::array<uint8_t, 13> a{}, b{}, c{};
  ManualEnv(TimePoint{0}, 0, 7).RandomBytes(a);
  ManualEnv(TimePoint{0}, 0, 7).RandomBytes(b);
  ManualEnv(TimePoint{0}, 0, 8).RandomBytes(c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace bmas
