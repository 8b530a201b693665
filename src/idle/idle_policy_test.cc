#include "idle/idle_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMinute = 60;

// A job of alice's whose allocated GPUs each run a process of the job at `util`.
JobGpuSample Job(int64_t id, const std::vector<double>& util, std::string partition = "lab") {
  JobGpuSample job{id, "alice", std::move(partition), {}};
  for (double u : util) job.gpus.push_back(GpuUse{u, /*has_process=*/true});
  return job;
}

// Runs the policy once a minute from `from` to `to` (minutes) with the same samples; returns
// the actions with the minute each came at.
std::vector<std::pair<int64_t, IdleAction>> RunMinutes(const IdleSettings& settings,
                                                       const std::vector<JobGpuSample>& samples,
                                                       int64_t from, int64_t to, IdleState& state,
                                                       bool research_mode = false) {
  std::vector<std::pair<int64_t, IdleAction>> out;
  for (int64_t m = from; m <= to; ++m) {
    for (IdleAction& a : DecideIdle(settings, research_mode, samples, m * kMinute, state)) {
      out.emplace_back(m, std::move(a));
    }
  }
  return out;
}

TEST(IdlePolicyTest, AnIdleJobIsWarnedAtAnHourAndCancelledAtTwo) {
  IdleSettings settings;
  IdleState state;
  auto actions = RunMinutes(settings, {Job(7, {0.0, 0.5})}, 0, 180, state);
  ASSERT_EQ(actions.size(), 2u);
  EXPECT_EQ(actions[0].first, 60);
  EXPECT_EQ(actions[0].second.kind, IdleAction::Kind::kWarn);
  EXPECT_EQ(actions[0].second.job_id, 7);
  EXPECT_EQ(actions[0].second.user, "alice");
  EXPECT_EQ(actions[0].second.cancel_at, 120 * kMinute);
  EXPECT_THAT(actions[0].second.reason, HasSubstr("under 1% utilisation for 60 min"));
  EXPECT_EQ(actions[1].first, 120);
  EXPECT_EQ(actions[1].second.kind, IdleAction::Kind::kCancel);
  EXPECT_DOUBLE_EQ(actions[1].second.wasted_gpu_hours, 4.0);  // 2 GPUs for 2 hours
  EXPECT_THAT(actions[1].second.reason, HasSubstr("for 120 min"));
}

TEST(IdlePolicyTest, OneBusyGpuOrOneBusySampleStartsTheCountOver) {
  IdleSettings settings;
  IdleState state;
  // One GPU of two at work: never idle.
  EXPECT_TRUE(RunMinutes(settings, {Job(1, {0.0, 35.0})}, 0, 200, state).empty());
  // Idle 59 minutes, one busy minute, then idle again: the warning comes 60 minutes after.
  IdleState again;
  EXPECT_TRUE(RunMinutes(settings, {Job(2, {0.2})}, 0, 59, again).empty());
  EXPECT_TRUE(RunMinutes(settings, {Job(2, {80.0})}, 60, 60, again).empty());
  auto actions = RunMinutes(settings, {Job(2, {0.2})}, 61, 130, again);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].first, 121);
  EXPECT_EQ(actions[0].second.kind, IdleAction::Kind::kWarn);
}

TEST(IdlePolicyTest, AWarnedJobThatGetsBusyIsNotCancelledAndIsWarnedAgainLater) {
  IdleSettings settings;
  IdleState state;
  EXPECT_EQ(RunMinutes(settings, {Job(3, {0.0})}, 0, 90, state).size(), 1u);
  EXPECT_TRUE(RunMinutes(settings, {Job(3, {50.0})}, 91, 100, state).empty());
  auto actions = RunMinutes(settings, {Job(3, {0.0})}, 101, 161, state);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].first, 161);
  EXPECT_EQ(actions[0].second.kind, IdleAction::Kind::kWarn);
}

TEST(IdlePolicyTest, TrainingReplicasResearchModeAndMissingTelemetryAreLeftAlone) {
  IdleSettings settings;
  IdleState state;
  JobGpuSample replica = Job(5, {0.0}, "inference");
  replica.user = "bmas";  // the service account's replica, in the inference partition
  JobGpuSample floor = Job(7, {0.0}, "inference_floor");
  floor.user = "bmas";
  // Policing inference too (as an admin may) leaves the service account's replicas alone.
  settings.partitions.insert("inference");
  const std::vector<JobGpuSample> exempt = {Job(4, {0.0}, "training"), replica, floor,
                                            Job(6, {})};
  EXPECT_TRUE(RunMinutes(settings, exempt, 0, 300, state).empty());
  EXPECT_TRUE(RunMinutes(settings, {Job(8, {0.0})}, 0, 300, state, /*research_mode=*/true).empty());
  // A partition switched on by config is policed.
  settings.partitions.insert("training");
  IdleState on;
  EXPECT_EQ(RunMinutes(settings, {Job(4, {0.0}, "training")}, 0, 130, on).size(), 2u);
}

// `bmas run --gpus 4 -- sleep infinity`: Slurm allocated the GPUs and nothing runs on them.
// They are idle whatever the driver says of them, and the job is warned, then cancelled.
TEST(IdlePolicyTest, AnAllocatedGpuWithNoProcessIsIdle) {
  IdleSettings settings;
  IdleState state;
  JobGpuSample sleeper{12, "alice", "lab", std::vector<GpuUse>(4, GpuUse{0.0, false})};
  auto actions = RunMinutes(settings, {sleeper}, 0, 180, state);
  ASSERT_EQ(actions.size(), 2u);
  EXPECT_EQ(actions[0].first, 60);
  EXPECT_EQ(actions[0].second.kind, IdleAction::Kind::kWarn);
  EXPECT_EQ(actions[0].second.gpus, 4);
  EXPECT_EQ(actions[1].first, 120);
  EXPECT_EQ(actions[1].second.kind, IdleAction::Kind::kCancel);
  EXPECT_DOUBLE_EQ(actions[1].second.wasted_gpu_hours, 8.0);
  // A reading that is not the job's own (no process of its on the GPU) counts for nothing.
  IdleState other;
  JobGpuSample borrowed{13, "alice", "lab", {GpuUse{90.0, false}}};
  EXPECT_EQ(RunMinutes(settings, {borrowed}, 0, 120, other).size(), 2u);
  // One GPU of the four at work, with the job's process: not idle.
  IdleState busy;
  sleeper.gpus[2] = GpuUse{40.0, true};
  EXPECT_TRUE(RunMinutes(settings, {sleeper}, 0, 300, busy).empty());
}

// The exemption is the owner and the partition together, never the name a user picks: a
// student's job in the inference partition, or named like a replica, is policed as any other.
TEST(IdlePolicyTest, OnlyTheServiceAccountsJobsInTheInferencePartitionsAreExempt) {
  IdleSettings settings;
  settings.partitions.insert("inference");
  struct Case {
    std::string user, partition;
    bool exempt;
  };
  for (const Case& c : std::vector<Case>{{"bmas", "inference", true},
                                         {"bmas", "inference_floor", true},
                                         {"root", "inference", true},
                                         {"alice", "inference", false},
                                         {"bmas", "lab", false},
                                         {"mallory", "lab", false}}) {
    IdleState state;
    JobGpuSample job = Job(20, {0.0}, c.partition);
    job.user = c.user;
    EXPECT_EQ(RunMinutes(settings, {job}, 0, 130, state).empty(), c.exempt)
        << c.user << " in " << c.partition;
  }
}

TEST(IdlePolicyTest, AGapInTheSamplesIsNeverCountedAsIdle) {
  IdleSettings settings;
  IdleState state;
  EXPECT_TRUE(RunMinutes(settings, {Job(9, {0.0})}, 0, 30, state).empty());
  // The telemetry stops for 40 minutes; idle time starts again when it comes back.
  auto actions = RunMinutes(settings, {Job(9, {0.0})}, 70, 140, state);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].first, 130);
  EXPECT_EQ(actions[0].second.idle_since, 70 * kMinute);
}

TEST(IdlePolicyTest, ShorterIntervalsFromConfigAndEndedJobsForgotten) {
  IdleSettings settings;
  settings.warn_after_s = 2 * kMinute;
  settings.cancel_after_s = 4 * kMinute;
  settings.threshold_pct = 5.0;
  IdleState state;
  auto actions = RunMinutes(settings, {Job(10, {4.9}), Job(11, {4.9})}, 0, 4, state);
  ASSERT_EQ(actions.size(), 4u);
  EXPECT_EQ(actions[3].second.kind, IdleAction::Kind::kCancel);
  EXPECT_EQ(state.jobs.size(), 2u);
  // Both end: the next samples lack them, and nothing of theirs is kept.
  EXPECT_TRUE(DecideIdle(settings, false, {}, 5 * kMinute, state).empty());
  EXPECT_TRUE(state.jobs.empty());
}

}  // namespace
}  // namespace bmas
