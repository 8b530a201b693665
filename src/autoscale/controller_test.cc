#include "autoscale/controller.h"

#include <gtest/gtest.h>

namespace bmas::autoscale {
namespace {

JobInfo Job(int64_t id, const std::string& model, int port, const std::string& state,
            const std::string& partition = "inference", const std::string& node = "oss01") {
  JobInfo j;
  j.id = id;
  j.name = ReplicaJobName(model, port);
  j.state = ParseJobState(state);
  j.partition = partition;
  j.submit_time = 100;
  j.gpus = 1;
  if (state == "RUNNING") {
    j.nodes = {node};
    j.start_time = 110;
  }
  return j;
}

TimePoint T(double seconds) { return TimePoint(seconds); }

std::string Url(int port) { return "http://127.0.0.1:" + std::to_string(port); }

class ControllerTest : public ::testing::Test {
 protected:
  ControllerInput In(std::vector<Deployment> d, std::vector<JobInfo> jobs) {
    ControllerInput in;
    in.deployments = std::move(d);
    in.jobs = std::move(jobs);
    in.node_addr = {{"oss01", "127.0.0.1"}, {"oss02", "127.0.0.1"}};
    in.gateway_reachable = true;
    return in;
  }
  ControllerSettings settings_;
  ControllerMemory memory_;
};

TEST_F(ControllerTest, TheFirstRequestOfAMinZeroDeploymentStartsOneReplicaAndOnlyOne) {
  ControllerInput in = In({Deployment{.model = "m", .min_replicas = 0, .max_replicas = 2}}, {});
  ControllerPlan idle = PlanPass(settings_, in, T(1000), memory_);
  EXPECT_TRUE(idle.submits.empty());
  in.queued["m"] = 1;
  ControllerPlan first = PlanPass(settings_, in, T(1002), memory_);
  ASSERT_EQ(first.submits.size(), 1u);
  EXPECT_EQ(first.submits[0].port, 18100);
  EXPECT_FALSE(first.submits[0].floor);
  // The job is pending: it counts as coming, so the next pass submits nothing more.
  in.jobs = {Job(7, "m", 18100, "PENDING")};
  ControllerPlan second = PlanPass(settings_, in, T(1004), memory_);
  EXPECT_TRUE(second.submits.empty());
  ASSERT_EQ(second.replicas.size(), 1u);
  EXPECT_EQ(second.replicas[0].state, ReplicaState::kPending);
  EXPECT_EQ(second.replicas[0].url, "");
}

TEST_F(ControllerTest, TheFloorGoesToTheFloorPartitionAndAReplicaIsReadyOnceTheGatewaySeesIt) {
  ControllerInput in = In({Deployment{.model = "m", .min_replicas = 1, .max_replicas = 3}}, {});
  ControllerPlan plan = PlanPass(settings_, in, T(1000), memory_);
  ASSERT_EQ(plan.submits.size(), 1u);
  EXPECT_TRUE(plan.submits[0].floor);
  in.jobs = {Job(7, "m", 18100, "RUNNING", "inference_floor")};
  plan = PlanPass(settings_, in, T(1002), memory_);
  ASSERT_EQ(plan.replicas.size(), 1u);
  EXPECT_EQ(plan.replicas[0].state, ReplicaState::kStarting);
  EXPECT_EQ(plan.replicas[0].url, Url(18100));
  EXPECT_TRUE(plan.replicas[0].floor);
  in.backends[Url(18100)] = BackendView{.healthy = true};
  plan = PlanPass(settings_, in, T(1004), memory_);
  EXPECT_EQ(plan.replicas[0].state, ReplicaState::kReady);
  EXPECT_TRUE(plan.submits.empty());
}

TEST_F(ControllerTest, ScaleDownDrainsAReplicaAboveTheFloorAndCancelsItOnceQuiet) {
  ControllerInput in = In({Deployment{.model = "m", .min_replicas = 1, .max_replicas = 3}},
                          {Job(1, "m", 18100, "RUNNING", "inference_floor"),
                           Job(2, "m", 18101, "RUNNING", "inference", "oss02"),
                           Job(3, "m", 18102, "RUNNING", "inference", "oss02")});
  for (int p : {18100, 18101, 18102}) in.backends[Url(p)] = BackendView{.healthy = true};
  std::vector<int64_t> drained;
  for (double t = 1000; t < 2000; t += 2) {
    ControllerPlan plan = PlanPass(settings_, in, T(t), memory_);
    EXPECT_TRUE(plan.submits.empty()) << t;
    for (const ReplicaRecord& r : plan.replicas) {
      if (r.state == ReplicaState::kDraining && std::find(drained.begin(), drained.end(), r.job_id) == drained.end()) {
        drained.push_back(r.job_id);
        // The gateway follows the store: draining, then nothing in flight.
        in.backends[r.url].draining = true;
      }
    }
    for (int64_t id : plan.cancels) {
      std::erase_if(in.jobs, [&](const JobInfo& j) { return j.id == id; });
    }
  }
  // Idle for long: down to the floor, one at a time, never the floor itself.
  ASSERT_EQ(in.jobs.size(), 1u);
  EXPECT_EQ(in.jobs[0].id, 1);
  EXPECT_EQ(drained.size(), 2u);
}

TEST_F(ControllerTest, ADrainingReplicaWithRequestsInFlightIsNotCancelledUntilTheTimeout) {
  ControllerInput in = In({Deployment{.model = "m", .min_replicas = 0, .max_replicas = 1}},
                          {Job(2, "m", 18101, "RUNNING")});
  in.backends[Url(18101)] = BackendView{.healthy = true, .draining = true, .in_flight = 3};
  memory_.draining[2] = TimePoint(1000);
  EXPECT_TRUE(PlanPass(settings_, in, T(1010), memory_).cancels.empty());
  EXPECT_EQ(PlanPass(settings_, in, TimePoint(1001) + settings_.drain_timeout, memory_).cancels,
            std::vector<int64_t>{2});
}

TEST_F(ControllerTest, ARemovedDeploymentsReplicasAreCancelledAndLeaveTheStore) {
  ControllerInput in = In({}, {Job(4, "gone", 18100, "RUNNING"), Job(5, "gone", 18101, "PENDING")});
  ControllerPlan plan = PlanPass(settings_, in, T(1000), memory_);
  EXPECT_EQ(plan.cancels, (std::vector<int64_t>{4, 5}));
  EXPECT_TRUE(plan.replicas.empty());
}

TEST_F(ControllerTest, AReplicaNearItsTimeLimitIsReplacedWhileItServes) {
  JobInfo old = Job(1, "m", 18100, "RUNNING", "inference_floor");
  old.time_limit_minutes = 60;  // started at 110: ends at 3710
  ControllerInput in = In({Deployment{.model = "m", .min_replicas = 1, .max_replicas = 1}}, {old});
  in.backends[Url(18100)] = BackendView{.healthy = true};
  EXPECT_TRUE(PlanPass(settings_, in, T(3000), memory_).submits.empty());
  ControllerPlan plan = PlanPass(settings_, in, T(3500), memory_);
  ASSERT_EQ(plan.submits.size(), 1u);
  EXPECT_EQ(plan.submits[0].port, 18101);
  EXPECT_TRUE(plan.submits[0].floor);
  EXPECT_EQ(plan.replicas[0].state, ReplicaState::kReady);  // still routed to until its job ends
}

TEST_F(ControllerTest, WithoutTheGatewaysViewTheReplicasAreHeld) {
  ControllerInput in = In({Deployment{.model = "m", .min_replicas = 1, .max_replicas = 3}},
                          {Job(1, "m", 18100, "RUNNING", "inference_floor"),
                           Job(2, "m", 18101, "RUNNING")});
  in.gateway_reachable = false;
  for (double t = 1000; t < 2000; t += 2) {
    ControllerPlan plan = PlanPass(settings_, in, T(t), memory_);
    EXPECT_TRUE(plan.submits.empty());
    EXPECT_TRUE(plan.cancels.empty());
  }
}


TEST_F(ControllerTest, AReplicaJobThatFailsIsNotResubmittedEveryPass) {
  ControllerInput in = In({Deployment{.model = "m", .min_replicas = 1, .max_replicas = 1}}, {});
  ASSERT_EQ(PlanPass(settings_, in, T(1000), memory_).submits.size(), 1u);
  JobInfo failed = Job(1, "m", 18100, "FAILED", "inference_floor");
  failed.reason = "JobLaunchFailure";
  in.jobs = {failed};
  ControllerPlan plan = PlanPass(settings_, in, T(1002), memory_);
  EXPECT_TRUE(plan.submits.empty());
  ASSERT_FALSE(plan.log.empty());
  EXPECT_NE(plan.log[0].find("JobLaunchFailure"), std::string::npos) << plan.log[0];
  EXPECT_TRUE(PlanPass(settings_, in, T(1004), memory_).submits.empty());
  EXPECT_EQ(PlanPass(settings_, in, T(1008), memory_).submits.size(), 1u);  // after 5 s
  // A second failure waits twice as long.
  in.jobs.push_back(Job(2, "m", 18100, "FAILED", "inference_floor"));
  EXPECT_TRUE(PlanPass(settings_, in, T(1010), memory_).submits.empty());
  EXPECT_TRUE(PlanPass(settings_, in, T(1018), memory_).submits.empty());
  EXPECT_EQ(PlanPass(settings_, in, T(1021), memory_).submits.size(), 1u);
}

TEST_F(ControllerTest, ATimetableFloorStartsLeadEarlyOnTheFloorPartitionAndEndsIntoTheIdleRules) {
  constexpr double kNine = 1795996800 + 9 * 3600;  // Mon 2026-11-30 09:00 UTC
  constexpr double kNoon = kNine + 3 * 3600;
  Deployment d{.model = "m", .min_replicas = 1, .max_replicas = 4};
  d.timetable = {{0x1f, 9 * 60, 12 * 60, 3}};  // Mon-Fri 09:00-12:00 min=3
  ControllerInput in = In({d}, {Job(1, "m", 18100, "RUNNING", "inference_floor")});
  in.backends[Url(18100)] = BackendView{.healthy = true};
  EXPECT_TRUE(PlanPass(settings_, in, T(kNine - 122), memory_).submits.empty());
  // The lead (120 s by default): two more floor replicas, not preemptible.
  ControllerPlan plan = PlanPass(settings_, in, T(kNine - 120), memory_);
  ASSERT_EQ(plan.submits.size(), 2u);
  EXPECT_TRUE(plan.submits[0].floor);
  EXPECT_TRUE(plan.submits[1].floor);
  ASSERT_FALSE(plan.log.empty());
  EXPECT_NE(plan.log[0].find("timetable floor of 3 replica(s) in force"), std::string::npos)
      << plan.log[0];
  for (int port : {18101, 18102}) {
    in.jobs.push_back(Job(port - 18099, "m", port, "RUNNING", "inference_floor", "oss02"));
    in.backends[Url(port)] = BackendView{.healthy = true};
  }
  // Idle all morning: the floor holds them.
  for (double t = kNine - 118; t < kNoon; t += 10) {
    plan = PlanPass(settings_, in, T(t), memory_);
    EXPECT_TRUE(plan.submits.empty()) << t;
    EXPECT_TRUE(plan.cancels.empty()) << t;
    for (const ReplicaRecord& r : plan.replicas) EXPECT_EQ(r.state, ReplicaState::kReady) << t;
  }
  // At noon they are replicas above the floor: drained one at a time by the idle rules.
  std::vector<int64_t> drained;
  bool ended_logged = false;
  for (double t = kNoon; t < kNoon + 1200; t += 2) {
    plan = PlanPass(settings_, in, T(t), memory_);
    for (const std::string& line : plan.log) {
      ended_logged |= line.find("timetable floor ended") != std::string::npos;
    }
    for (const ReplicaRecord& r : plan.replicas) {
      if (r.state == ReplicaState::kDraining &&
          std::find(drained.begin(), drained.end(), r.job_id) == drained.end()) {
        drained.push_back(r.job_id);
        in.backends[r.url].draining = true;
      }
    }
    for (int64_t id : plan.cancels) {
      std::erase_if(in.jobs, [&](const JobInfo& j) { return j.id == id; });
    }
  }
  EXPECT_TRUE(ended_logged);
  EXPECT_EQ(drained.size(), 2u);
  EXPECT_EQ(in.jobs.size(), 1u);
}

TEST_F(ControllerTest, ATimetableFloorIsReadInTheControllersTimeZone) {
  auto berlin = TimeZone::Named("Europe/Berlin");
  ASSERT_TRUE(berlin) << berlin.error().message;
  settings_.timezone = *berlin;
  settings_.timetable_lead = Duration(0);
  Deployment d{.model = "m", .min_replicas = 0, .max_replicas = 2};
  d.timetable = {{0x1f, 9 * 60, 12 * 60, 2}};
  ControllerInput in = In({d}, {});
  // Mon 2026-11-30 08:00 UTC is 09:00 in Berlin (CET).
  EXPECT_TRUE(PlanPass(settings_, in, T(1795996800 + 8 * 3600 - 2), memory_).submits.empty());
  EXPECT_EQ(PlanPass(settings_, in, T(1795996800 + 8 * 3600), memory_).submits.size(), 2u);
}

}  // namespace
}  // namespace bmas::autoscale
