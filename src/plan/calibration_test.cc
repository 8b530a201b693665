#include "plan/calibration.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas::plan {
namespace {

using ::testing::HasSubstr;

TEST(CalibrationTest, TheBackfillIntervalIsSlurmConfsOrSlurmsDefault) {
  const Calibrated bf = BackfillIntervalOf(
      "# Scheduling\nSchedulerParameters=batch_sched_delay=0,bf_interval=2,sched_interval=2\n",
      "x/slurm.conf");
  EXPECT_EQ(bf.value, 2);
  EXPECT_EQ(bf.source, "x/slurm.conf SchedulerParameters bf_interval=2");
  const Calibrated none = BackfillIntervalOf("SelectType=select/cons_tres\n", "y");
  EXPECT_EQ(none.value, 30);
  EXPECT_THAT(none.source, HasSubstr("Slurm's default"));
}

TEST(CalibrationTest, TheLaunchDelayIsTheFlagsElseTheMeasuredOne) {
  EXPECT_EQ(LaunchDelayOf(2.5).value, 2.5);
  EXPECT_EQ(LaunchDelayOf(2.5).source, "--launch-delay");
  EXPECT_EQ(LaunchDelayOf(0).value, 0);
  EXPECT_EQ(LaunchDelayOf(-1).value, kMeasuredLaunchDelayS);
  EXPECT_THAT(LaunchDelayOf(-1).source, HasSubstr("measured"));
}

}  // namespace
}  // namespace bmas::plan
