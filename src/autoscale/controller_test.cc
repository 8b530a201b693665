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
    in.every_gateway_reached = true;
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
  // A training job waits for GPUs: replicas are cancelled, not put to sleep.
  in.gpus_wanted = "job 9 of ada in training waits for GPUs (Resources)";
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

// Runs passes every 2 s from `from` to `to`, the gateway following the store as it does:
// draining replicas drain (nothing in flight), sleeping ones are not listed, cancelled jobs end.
// Returns the jobs put to sleep, in order.
std::vector<int64_t> RunPasses(const ControllerSettings& settings, ControllerInput& in,
                               ControllerMemory& memory, double from, double to,
                               std::vector<ControllerPlan>* plans = nullptr) {
  std::vector<int64_t> slept;
  for (double t = from; t < to; t += 2) {
    ControllerPlan plan = PlanPass(settings, in, T(t), memory);
    for (const ReplicaCall& c : plan.sleeps) {
      // Put to sleep only once the gateway drained it.
      EXPECT_TRUE(in.backends[c.url].draining && in.backends[c.url].in_flight == 0) << c.job;
      slept.push_back(c.job);
    }
    for (const ReplicaRecord& r : plan.replicas) {
      if (r.state == ReplicaState::kDraining) in.backends[r.url].draining = true;
      if (r.state == ReplicaState::kSleeping) in.backends.erase(r.url);
    }
    for (int64_t id : plan.cancels) {
      std::erase_if(in.jobs, [&](const JobInfo& j) { return j.id == id; });
    }
    if (plans != nullptr) plans->push_back(std::move(plan));
  }
  return slept;
}

TEST_F(ControllerTest, IdleReplicasAboveTheFloorAreDrainedThenPutToSleepInsteadOfCancelled) {
  ControllerInput in = In({Deployment{.model = "m", .min_replicas = 1, .max_replicas = 3}},
                          {Job(1, "m", 18100, "RUNNING", "inference_floor"),
                           Job(2, "m", 18101, "RUNNING", "inference", "oss02"),
                           Job(3, "m", 18102, "RUNNING", "inference", "oss02")});
  for (int p : {18100, 18101, 18102}) in.backends[Url(p)] = BackendView{.healthy = true};
  std::vector<ControllerPlan> plans;
  std::vector<int64_t> slept = RunPasses(settings_, in, memory_, 1000, 2000, &plans);
  std::sort(slept.begin(), slept.end());
  EXPECT_EQ(slept, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(in.jobs.size(), 3u);  // still running, holding their GPUs
  for (const ControllerPlan& p : plans) EXPECT_TRUE(p.cancels.empty() && p.submits.empty());
  const ControllerPlan& last = plans.back();
  ASSERT_EQ(last.replicas.size(), 3u);
  for (const ReplicaRecord& r : last.replicas) {
    EXPECT_EQ(r.state, r.floor ? ReplicaState::kReady : ReplicaState::kSleeping) << r.job_id;
  }
}

TEST_F(ControllerTest, WhileOneGatewayIsUnreadAReplicaItMayStillUseIsNotPutToSleep) {
  ControllerInput in = In({Deployment{.model = "m", .min_replicas = 1, .max_replicas = 2}},
                          {Job(1, "m", 18100, "RUNNING", "inference_floor"),
                           Job(2, "m", 18101, "RUNNING", "inference", "oss02")});
  for (int p : {18100, 18101}) in.backends[Url(p)] = BackendView{.healthy = true};
  // Two gateways: the one that answered has drained job 2, the other did not answer.
  in.every_gateway_reached = false;
  std::vector<ControllerPlan> plans;
  EXPECT_TRUE(RunPasses(settings_, in, memory_, 1000, 1400, &plans).empty());
  for (const ControllerPlan& p : plans) EXPECT_TRUE(p.cancels.empty());
  EXPECT_EQ(in.jobs.size(), 2u);
  ASSERT_TRUE(std::any_of(plans.back().replicas.begin(), plans.back().replicas.end(),
                          [](const ReplicaRecord& r) { return r.state == ReplicaState::kDraining; }));
  // Both answer again (and both have drained it): it goes to sleep.
  in.every_gateway_reached = true;
  EXPECT_EQ(RunPasses(settings_, in, memory_, 1400, 1410), (std::vector<int64_t>{2}));
}

TEST_F(ControllerTest, AReplicaOnADrainedNodeServesUntilItsReplacementDoesThenDrainsAndGoes) {
  ControllerInput in = In({Deployment{.model = "m", .min_replicas = 1, .max_replicas = 3}},
                          {Job(1, "m", 18100, "RUNNING", "inference_floor", "oss01"),
                           Job(4, "m", 18104, "RUNNING", "inference", "oss01")});
  in.backends[Url(18100)] = BackendView{.healthy = true};
  in.backends[Url(18104)] = BackendView{.healthy = true};
  memory_.sleeping[4] = {T(900), 110};  // asleep on that node
  in.drained_nodes = {"oss01"};
  auto state_of = [](const ControllerPlan& p, int64_t job) {
    for (const ReplicaRecord& r : p.replicas) {
      if (r.job_id == job) return r.state;
    }
    return ReplicaState::kPending;
  };
  // The floor moves: a floor replacement is submitted (not the sleeper woken there), and the
  // replica on the drained node still serves meanwhile; the sleeper there is cancelled.
  ControllerPlan plan = PlanPass(settings_, in, T(1000), memory_);
  ASSERT_EQ(plan.submits.size(), 1u);
  EXPECT_TRUE(plan.submits[0].floor);
  EXPECT_TRUE(plan.wakes.empty());
  EXPECT_EQ(plan.cancels, (std::vector<int64_t>{4}));
  EXPECT_EQ(state_of(plan, 1), ReplicaState::kReady);
  std::erase_if(in.jobs, [](const JobInfo& j) { return j.id == 4; });
  // The replacement runs elsewhere but does not serve yet: still no drain.
  const int port = plan.submits[0].port;
  in.jobs.push_back(Job(2, "m", port, "RUNNING", "inference_floor", "oss02"));
  plan = PlanPass(settings_, in, T(1002), memory_);
  EXPECT_TRUE(plan.submits.empty());
  EXPECT_EQ(state_of(plan, 1), ReplicaState::kReady);
  // It serves: the old one drains, and goes once the gateway has nothing in flight on it.
  in.backends[Url(port)] = BackendView{.healthy = true};
  plan = PlanPass(settings_, in, T(1004), memory_);
  EXPECT_EQ(state_of(plan, 2), ReplicaState::kReady);
  EXPECT_EQ(state_of(plan, 1), ReplicaState::kDraining);
  EXPECT_TRUE(plan.cancels.empty());
  EXPECT_TRUE(plan.submits.empty());
  in.backends[Url(18100)].draining = true;
  plan = PlanPass(settings_, in, T(1006), memory_);
  EXPECT_EQ(plan.cancels, (std::vector<int64_t>{1}));
  EXPECT_TRUE(plan.sleeps.empty());
}

TEST_F(ControllerTest, FloorReplicasAboveTheFloorDrainWhileTrainingWaitsAndComeBackPreemptible) {
  // A timetable window ended while load held its three floor-partition replicas.
  ControllerInput in = In({Deployment{.model = "m", .min_replicas = 1, .max_replicas = 4}},
                          {Job(1, "m", 18100, "RUNNING", "inference_floor"),
                           Job(2, "m", 18101, "RUNNING", "inference_floor"),
                           Job(3, "m", 18102, "RUNNING", "inference_floor")});
  for (int p : {18100, 18101, 18102}) {
    in.backends[Url(p)] = BackendView{.healthy = true, .in_flight = 2, .capacity = 2};
  }
  ControllerPlan plan = PlanPass(settings_, in, T(1000), memory_);
  for (const ReplicaRecord& r : plan.replicas) EXPECT_EQ(r.state, ReplicaState::kReady);
  // Training waits: one of them drains, and what the load needs is submitted in the
  // partition training preempts.
  in.gpus_wanted = "job 9 of ada in training waits for GPUs (Resources)";
  auto draining = [](const ControllerPlan& p) {
    std::vector<int64_t> out;
    for (const ReplicaRecord& r : p.replicas) {
      if (r.state == ReplicaState::kDraining) out.push_back(r.job_id);
    }
    return out;
  };
  plan = PlanPass(settings_, in, T(1002), memory_);
  ASSERT_EQ(draining(plan).size(), 1u);
  const int64_t first = draining(plan)[0];
  ASSERT_FALSE(plan.submits.empty());
  for (const ReplicaSubmit& s : plan.submits) EXPECT_FALSE(s.floor);
  // Not the next one while the first still drains.
  plan = PlanPass(settings_, in, T(1004), memory_);
  EXPECT_EQ(draining(plan), (std::vector<int64_t>{first}));
  // It is gone and the job still waits: the next drains; the floor itself never does.
  std::erase_if(in.jobs, [&](const JobInfo& j) { return j.id == first; });
  in.backends.erase(Url(18100 + static_cast<int>(first) - 1));
  plan = PlanPass(settings_, in, T(1006), memory_);
  ASSERT_EQ(draining(plan).size(), 1u);
  EXPECT_NE(draining(plan)[0], first);
  const int64_t second = draining(plan)[0];
  std::erase_if(in.jobs, [&](const JobInfo& j) { return j.id == second; });
  in.backends.erase(Url(18100 + static_cast<int>(second) - 1));
  plan = PlanPass(settings_, in, T(1008), memory_);
  EXPECT_TRUE(draining(plan).empty());
}

TEST_F(ControllerTest, TheFloorIsNeverPutToSleep) {
  // The floor lowered to 0: the floor partition's replica may go, but it is cancelled.
  ControllerInput in = In({Deployment{.model = "m", .min_replicas = 0, .max_replicas = 2}},
                          {Job(1, "m", 18100, "RUNNING", "inference_floor")});
  in.backends[Url(18100)] = BackendView{.healthy = true};
  EXPECT_TRUE(RunPasses(settings_, in, memory_, 1000, 2000).empty());
  EXPECT_TRUE(in.jobs.empty());
}

TEST_F(ControllerTest, ARealVllmDeploymentIsCancelledNotPutToSleep) {
  ControllerInput in = In({Deployment{.model = "m",
                                      .min_replicas = 0,
                                      .max_replicas = 2,
                                      .command = "vllm serve {model} --port {port}"}},
                          {Job(2, "m", 18101, "RUNNING")});
  in.backends[Url(18101)] = BackendView{.healthy = true};
  EXPECT_TRUE(RunPasses(settings_, in, memory_, 1000, 2000).empty());
  EXPECT_TRUE(in.jobs.empty());
}

TEST_F(ControllerTest, ABreachWakesASleepingReplicaBeforeItSubmitsAnyJob) {
  ControllerInput in =
      In({Deployment{.model = "m", .min_replicas = 1, .max_replicas = 2}},
         {Job(1, "m", 18100, "RUNNING", "inference_floor"), Job(2, "m", 18101, "RUNNING")});
  in.backends[Url(18100)] = BackendView{.healthy = true, .capacity = 64};
  memory_.sleeping[2] = {T(900), 110};
  ControllerPlan plan = PlanPass(settings_, in, T(1000), memory_);
  EXPECT_EQ(plan.replicas[1].state, ReplicaState::kSleeping);
  EXPECT_TRUE(plan.wakes.empty());
  // Past the floor's breach_settle: a queue that waits is a breach.
  in.backends[Url(18100)].in_flight = 64;
  in.queued["m"] = 20;
  in.oldest_wait_s["m"] = 10;
  plan = PlanPass(settings_, in, T(1040), memory_);
  ASSERT_EQ(plan.wakes.size(), 1u);
  EXPECT_EQ(plan.wakes[0].job, 2);
  EXPECT_EQ(plan.wakes[0].url, Url(18101));
  EXPECT_TRUE(plan.submits.empty());
  EXPECT_EQ(plan.replicas[1].state, ReplicaState::kStarting);  // the gateway may take it
  // Woken, not yet healthy in the gateway: coming, so the breach submits nothing more.
  plan = PlanPass(settings_, in, T(1042), memory_);
  EXPECT_TRUE(plan.wakes.empty());
  EXPECT_TRUE(plan.submits.empty());
  EXPECT_EQ(plan.replicas[1].state, ReplicaState::kStarting);
  in.backends[Url(18101)] = BackendView{.healthy = true};
  plan = PlanPass(settings_, in, T(1044), memory_);
  EXPECT_EQ(plan.replicas[1].state, ReplicaState::kReady);
  bool logged = false;
  for (const std::string& line : plan.log)
    logged |= line.find("4.0 s after it was woken") != std::string::npos;
  EXPECT_TRUE(logged);
}

TEST_F(ControllerTest, WakingCoversWhatItCanAndOnlyTheRestIsSubmitted) {
  ControllerInput in =
      In({Deployment{.model = "m", .min_replicas = 1, .max_replicas = 4}},
         {Job(1, "m", 18100, "RUNNING", "inference_floor"), Job(2, "m", 18101, "RUNNING")});
  in.backends[Url(18100)] = BackendView{.healthy = true, .in_flight = 64, .capacity = 64};
  memory_.sleeping[2] = {T(900), 110};
  in.queued["m"] = 150;  // four replicas' worth at 70%
  in.oldest_wait_s["m"] = 10;
  ControllerPlan plan = PlanPass(settings_, in, T(1000), memory_);
  ASSERT_EQ(plan.wakes.size(), 1u);
  EXPECT_EQ(plan.submits.size(), 2u);
  for (const ReplicaSubmit& s : plan.submits) EXPECT_FALSE(s.floor);
}

TEST_F(ControllerTest, WhileTrainingWaitsNoReplicaSleepsAndSleepingOnesAreCancelled) {
  ControllerInput in =
      In({Deployment{.model = "m", .min_replicas = 1, .max_replicas = 3}},
         {Job(1, "m", 18100, "RUNNING", "inference_floor"), Job(2, "m", 18101, "RUNNING")});
  in.backends[Url(18100)] = BackendView{.healthy = true};
  memory_.sleeping[2] = {T(900), 110};
  in.gpus_wanted = "job 9 of ada in training waits for GPUs (Resources)";
  ControllerPlan plan = PlanPass(settings_, in, T(1000), memory_);
  EXPECT_EQ(plan.cancels, std::vector<int64_t>{2});
  EXPECT_TRUE(plan.sleeps.empty());
}

TEST_F(ControllerTest, APreemptedSleepingReplicaStartsOverAwake) {
  ControllerInput in = In({Deployment{.model = "m", .min_replicas = 0, .max_replicas = 2}},
                          {Job(2, "m", 18101, "PENDING")});
  memory_.sleeping[2] = {T(900), 110};
  ControllerPlan plan = PlanPass(settings_, in, T(1000), memory_);  // requeued by Slurm
  EXPECT_EQ(plan.replicas[0].state, ReplicaState::kPending);
  EXPECT_FALSE(memory_.sleeping.contains(2));
  // Started again (a new start time): a fresh engine, awake.
  in.jobs = {Job(2, "m", 18101, "RUNNING")};
  in.jobs[0].start_time = 990;
  memory_.sleeping[2] = {T(900), 110};
  plan = PlanPass(settings_, in, T(1002), memory_);
  EXPECT_EQ(plan.replicas[0].state, ReplicaState::kStarting);
}

JobInfo Waiting(int64_t id, const std::string& partition, const std::string& reason, int gpus) {
  JobInfo j;
  j.id = id;
  j.name = "train";
  j.user = "ada";
  j.partition = partition;
  j.state = JobState::kPending;
  j.reason = reason;
  j.gpus = gpus;
  return j;
}

TEST(GpuDemandWaitingTest, OnlyAPendingGpuJobThatCouldTakeTheReplicasNodesCounts) {
  const std::vector<NodeInfo> nodes = {
      NodeInfo{.name = "oss01", .partitions = {"training", "inference", "inference_floor"}},
      NodeInfo{.name = "cpu01", .partitions = {"cpu"}}};
  auto wanted = GpuDemandWaiting({Waiting(9, "training", "Resources", 4)}, nodes, "inference");
  ASSERT_TRUE(wanted);
  EXPECT_EQ(*wanted, "job 9 of ada in training waits for GPUs (Resources)");
  EXPECT_TRUE(GpuDemandWaiting({Waiting(9, "cpu,training", "Priority", 1)}, nodes, "inference"));
  EXPECT_FALSE(GpuDemandWaiting({Waiting(9, "training", "Dependency", 4)}, nodes, "inference"));
  EXPECT_FALSE(GpuDemandWaiting({Waiting(9, "training", "JobHeldUser", 4)}, nodes, "inference"));
  EXPECT_FALSE(GpuDemandWaiting({Waiting(9, "training", "Resources", 0)}, nodes, "inference"));
  EXPECT_FALSE(GpuDemandWaiting({Waiting(9, "cpu", "Resources", 1)}, nodes, "inference"));
  JobInfo replica = Job(3, "m", 18101, "PENDING");
  replica.reason = "Resources";
  EXPECT_FALSE(GpuDemandWaiting({replica}, nodes, "inference"));
  JobInfo running = Waiting(9, "training", "None", 4);
  running.state = JobState::kRunning;
  EXPECT_FALSE(GpuDemandWaiting({running}, nodes, "inference"));
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
