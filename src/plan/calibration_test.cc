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

// A job submitted and eligible at `eligible` that ran on `gpus` GPUs from `start` to `end`.
RecordedJob Ran(int64_t eligible, int64_t start, int64_t end, int gpus) {
  return {.submit_s = eligible, .eligible_s = eligible, .start_s = start, .end_s = end,
          .gpus = gpus, .allocated = true};
}

// `n` one-GPU jobs on an empty 4-GPU cluster from `t`, one every 10 s, each eligible on
// submission, started `wait` s later and done 3 s after that.
std::vector<RecordedJob> FreeJobs(int n, int64_t t, int64_t wait) {
  std::vector<RecordedJob> jobs;
  for (int i = 0; i < n; ++i, t += 10) {
    jobs.push_back(Ran(t, t + wait, t + wait + 3, 1));
  }
  return jobs;
}

JobHistory History(std::vector<RecordedJob> jobs) {
  return {.where = "slurmrestd at 127.0.0.1:6820", .jobs = std::move(jobs), .cluster_gpus = 4,
          .backfill_interval_s = 1};
}

TEST(CalibrationTest, TheLaunchDelayIsTheMeanEligibleToStartOfFreeJobsPlusWhatSlurmDoesNotSee) {
  std::vector<RecordedJob> jobs = FreeJobs(6, 1000, 0);
  for (RecordedJob& j : FreeJobs(6, 2000, 1)) jobs.push_back(j);
  const Calibrated d = LaunchDelayFromHistory(History(jobs));
  EXPECT_DOUBLE_EQ(d.value, 0.5 + kUnseenLaunchS);
  EXPECT_THAT(d.source, HasSubstr("slurmrestd at 127.0.0.1:6820: 12 finished jobs that started "
                                  "on free GPUs (0 more waited"));
  EXPECT_THAT(d.source, HasSubstr("mean eligible-to-start 0.50 s"));
  EXPECT_THAT(d.source, HasSubstr("do not see"));
}

TEST(CalibrationTest, TooFewJobsGiveTheMeasuredDefaultAndSayWhy) {
  const Calibrated d = LaunchDelayFromHistory(History(FreeJobs(kMinLaunchJobs - 1, 1000, 1)));
  EXPECT_EQ(d.value, kMeasuredLaunchDelayS);
  EXPECT_THAT(d.source, HasSubstr("bmas's default (slurmrestd at 127.0.0.1:6820: 9 finished jobs "
                                  "started on free GPUs, of 9; 10 needed)"));
  EXPECT_EQ(LaunchDelayFromHistory(History({})).value, kMeasuredLaunchDelayS);
}

TEST(CalibrationTest, JobsThatWaitedForGpusOrLimitsAreLeftOut) {
  std::vector<RecordedJob> jobs = FreeJobs(kMinLaunchJobs, 1000, 1);
  // All 4 GPUs busy from 500 to 600: a job eligible meanwhile waited, however soon it started.
  jobs.push_back(Ran(500, 501, 600, 4));
  jobs.push_back(Ran(540, 600, 610, 1));
  jobs.push_back(Ran(598, 600, 610, 1));
  // Pending behind a 2-GPU job that waited on 3 busy GPUs: the queue ahead counts.
  jobs.push_back(Ran(700, 701, 800, 3));
  jobs.push_back(Ran(710, 800, 805, 2));
  jobs.push_back(Ran(720, 720, 725, 1));
  // Free GPUs but a long wait: a QOS limit, a reservation, a hold.
  jobs.push_back(Ran(900, 950, 955, 1));
  const Calibrated d = LaunchDelayFromHistory(History(jobs));
  EXPECT_DOUBLE_EQ(d.value, 1 + kUnseenLaunchS)
      << "only the jobs started on free GPUs count: " << d.source;
  EXPECT_THAT(d.source, HasSubstr(": 12 finished jobs that started on free GPUs (5 more waited"));
}

TEST(CalibrationTest, JobsThatNeverStartedOrHaveNotFinishedAreLeftOut) {
  std::vector<RecordedJob> jobs = FreeJobs(kMinLaunchJobs, 1000, 0);
  // Cancelled while pending: Slurm records a start, but it held no nodes.
  RecordedJob cancelled = Ran(3000, 3009, 3009, 1);
  cancelled.allocated = false;
  jobs.push_back(cancelled);
  // Refused (BadConstraints): recorded as started and ended on submission, on no node.
  RecordedJob refused = Ran(3010, 3010, 3010, 5);
  refused.allocated = false;
  jobs.push_back(refused);
  // Still running, and still pending.
  jobs.push_back(Ran(3020, 3025, 0, 1));
  jobs.push_back({.submit_s = 3030, .eligible_s = 3030, .gpus = 1});
  const Calibrated d = LaunchDelayFromHistory(History(jobs));
  EXPECT_DOUBLE_EQ(d.value, kUnseenLaunchS) << d.source;
  EXPECT_THAT(d.source, HasSubstr(": 10 finished jobs that started on free GPUs (0 more waited"));
  // A pending job not yet eligible (a dependency) takes no GPUs from the jobs after it.
  std::vector<RecordedJob> later = {{.submit_s = 10, .gpus = 4}};
  for (RecordedJob& j : FreeJobs(kMinLaunchJobs, 1000, 0)) later.push_back(j);
  EXPECT_DOUBLE_EQ(LaunchDelayFromHistory(History(later)).value, kUnseenLaunchS);
}

}  // namespace
}  // namespace bmas::plan
