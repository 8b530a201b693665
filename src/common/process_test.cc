// WaitFor and SpawnDetached: the waits and starts of daemons that bmas launches.

#include "common/process.h"

#include <chrono>

#include <gtest/gtest.h>

namespace bmas {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

TEST(WaitForTest, TrueAtOnceWhenReady) {
  int asked = 0;
  EXPECT_TRUE(WaitFor([&] { return ++asked > 0; }, 0, seconds(5)));
  EXPECT_EQ(asked, 1);
}

TEST(WaitForTest, TrueWhenReadyLater) {
  int asked = 0;
  EXPECT_TRUE(WaitFor([&] { return ++asked >= 3; }, 0, seconds(5)));
  EXPECT_EQ(asked, 3);
}

TEST(WaitForTest, FalseAfterTheTimeout) {
  const auto start = steady_clock::now();
  EXPECT_FALSE(WaitFor([] { return false; }, 0, milliseconds(200)));
  EXPECT_GE(steady_clock::now() - start, milliseconds(200));
}

TEST(WaitForTest, GivesUpWhenTheProcessEnds) {
  auto child = SpawnDetached({"/bin/sh", "-c", "exit 0"}, {}, "");
  ASSERT_TRUE(child) << child.error().message;
  const auto start = steady_clock::now();
  EXPECT_FALSE(WaitFor([] { return false; }, child->pid, seconds(20)));
  EXPECT_LT(steady_clock::now() - start, seconds(10));
}

TEST(SpawnDetachedTest, RecordsThePidAndItsStartTime) {
  auto child = SpawnDetached({"sleep", "30"}, {"BMAS_TEST=1"}, "");
  ASSERT_TRUE(child) << child.error().message;
  EXPECT_GT(child->pid, 0);
  EXPECT_NE(child->start_ticks, 0u);
  EXPECT_TRUE(ProcessRunning(child->pid, "sleep", child->start_ticks));
  EXPECT_TRUE(StopProcess(child->pid, "sleep", seconds(5), child->start_ticks));
}

}  // namespace
}  // namespace bmas
