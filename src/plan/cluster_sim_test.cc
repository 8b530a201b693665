#include "plan/cluster_sim.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <rapidjson/document.h>

#include <cstdio>
#include <string>

#include "engine/timing.h"
#include "plan/plan_report.h"
#include "plan/sweep.h"
#include "plan/workload.h"
#include "common/config_table.h"

namespace bmas::plan {
namespace {

using ::testing::HasSubstr;

const std::string kExamples = std::string(BMAS_SOURCE_DIR) + "/examples/";

Scenario Parse(const std::string& text) {
  return ParseScenario("cluster = \"cluster-12x4.toml\"\n" + text, kExamples + "test.toml");
}

// 100 students at work from 10:00 to 12:00 on Monday only, for one day.
const char* kLab = R"(
[simulation]
days = 1
[[cohorts]]
name = "students"
count = 100
hours = [{ days = ["mon"], start_hour = 10, end_hour = 12 }]
[cohorts.inference]
sessions_per_hour = 2
requests_per_session = 3
think_time_s = 30
prompt_tokens = 100
output_tokens = 200
system_prompt_tokens = 1000
system_prompts = 2
[cohorts.training]
jobs_per_week = 1
gpus_per_job = [{ gpus = 1, share = 0.5 }, { gpus = 4, share = 0.5 }]
partition = "lab"
)";

const engine::Profile& Llama() { return engine::BuiltinProfiles().at("llama-3.1-8b-h100"); }

TEST(WorkloadTest, SessionsFollowTheHoursAndTheRate) {
  const Scenario s = Parse(kLab);
  const std::vector<SessionPlan> sessions = GenerateSessions(s);
  // 100 members x 2 sessions an hour x 2 hours: 400 expected; Poisson spread is +-20.
  EXPECT_GT(sessions.size(), 340u);
  EXPECT_LT(sessions.size(), 460u);
  for (const SessionPlan& p : sessions) {
    EXPECT_GE(p.start, 10 * 3600);
    EXPECT_LT(p.start, 12 * 3600);
    EXPECT_GE(p.member, 1);
    EXPECT_LE(p.member, 100);
    EXPECT_GE(p.requests, 1);
  }
}

TEST(WorkloadTest, JobsComeInTheHoursWithTheirShares) {
  const Scenario s = Parse(kLab);
  std::vector<int> cohort_of;
  const std::vector<SimJob> jobs = GenerateJobs(s, cohort_of);
  // One a week each, all in the week's two hours: 100 expected.
  EXPECT_GT(jobs.size(), 70u);
  EXPECT_LT(jobs.size(), 130u);
  ASSERT_EQ(cohort_of.size(), jobs.size());
  int four = 0;
  for (const SimJob& j : jobs) {
    EXPECT_GE(j.submit.count(), 10 * 3600);
    EXPECT_LT(j.submit.count(), 12 * 3600);
    EXPECT_EQ(j.partition, "lab");
    EXPECT_TRUE(j.gpus == 1 || j.gpus == 4);
    four += j.gpus == 4;
    EXPECT_GE(j.duration.count(), 1);
  }
  EXPECT_GT(four, static_cast<int>(jobs.size()) / 4);
  EXPECT_LT(four, 3 * static_cast<int>(jobs.size()) / 4);
}

TEST(WorkloadTest, TheSameSeedDrawsTheSameWorkloadAndAnotherDoesNot) {
  Scenario a = Parse(kLab);
  Scenario b = a;
  const auto sa = GenerateSessions(a), sb = GenerateSessions(b);
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].start, sb[i].start);
    EXPECT_EQ(sa[i].seed, sb[i].seed);
  }
  b.simulation.seed = 2;
  const auto sc = GenerateSessions(b);
  EXPECT_TRUE(sc.size() != sa.size() || sc[0].start != sa[0].start);
}

// A floor of one replica serves a light load: every request completes, none fails, and the
// course's shared system prompt comes from the prefix cache (TTFT far below a 1,100-token
// prefill's).
TEST(InferenceSimTest, AFloorReplicaServesALightLoad) {
  Scenario s = Parse(kLab);
  s.policies.autoscale.min_replicas = 1;
  const std::vector<SessionPlan> sessions = GenerateSessions(s);
  const InferenceResult r = RunInference(s, Llama(), sessions, {{0, 0}}, {.horizon_s = 86400});
  ASSERT_FALSE(r.requests.empty());
  for (const RequestRecord& q : r.requests) {
    EXPECT_FALSE(q.failed);
    EXPECT_GT(q.ttft, 0);
    EXPECT_GE(q.e2e, q.ttft);
    EXPECT_GE(q.output_tokens, 100);
  }
  EXPECT_EQ(r.preemptions, 0);
  EXPECT_EQ(r.replicas_max, 1);
  // The floor holds its GPU all day, sampled every control period.
  EXPECT_NEAR(r.gpu_seconds, 86400, 10);
}

// A lab of 1,000 students on a floor of one: the autoscaler adds replicas in the slots; when
// training takes the slots for a minute mid-lab, replicas are preempted, their streams resume
// on the floor or on replicas that come back, and no request is lost.
TEST(InferenceSimTest, ReplicasFollowLoadAndYieldToTrainingWithoutLosingAStream) {
  Scenario s = Parse(kLab);
  s.cohorts[0].count = 1000;
  s.cohorts[0].inference.output_tokens = 300;
  s.policies.autoscale.min_replicas = 1;
  s.policies.autoscale.max_replicas = 8;
  s.policies.autoscale.max_in_flight_per_replica = 2;  // a small limit: the load needs several
  s.policies.queue_timeout_s = 3600;
  const std::vector<SessionPlan> sessions = GenerateSessions(s);
  const InferenceResult r =
      RunInference(s, Llama(), sessions, {{0, 7}, {11 * 3600, 0}, {11 * 3600 + 60, 7}},
                   {.horizon_s = 86400});
  EXPECT_GT(r.replicas_max, 1);
  EXPECT_GT(r.preemptions, 0);
  EXPECT_GT(r.resumed_streams, 0);
  int resumed = 0;
  for (const RequestRecord& q : r.requests) {
    EXPECT_FALSE(q.failed);
    EXPECT_GE(q.e2e, 0);
    resumed += q.resumed;
  }
  EXPECT_EQ(resumed, r.resumed_streams);
}

// The ramp: 1,000 students open their notebooks at 10:00 on a floor of one, and the replicas
// the load calls for need their start-up while requests queue. A timetable floor for the lab
// (the same autoscale::TimetableFloorAt the controller applies), started its lead early, has
// them serving at 10:00: fewer of the ramp's requests miss the TTFT objective.
TEST(InferenceSimTest, ATimetableFloorAtTheLabStartCutsTheRampsTtftBreaches) {
  auto ramp_breaches = [](bool timetable) {
    Scenario s = Parse(kLab);
    s.cohorts[0].count = 1000;
    s.policies.autoscale.min_replicas = 1;
    s.policies.autoscale.max_replicas = 8;
    s.policies.autoscale.max_in_flight_per_replica = 2;
    s.policies.queue_timeout_s = 3600;
    if (timetable) s.policies.timetable = {{0x01, 10 * 60, 12 * 60, 6}};  // Mon 10:00-12:00 min=6
    const std::vector<SessionPlan> sessions = GenerateSessions(s);
    const InferenceResult r = RunInference(s, Llama(), sessions, {{0, 7}}, {.horizon_s = 86400});
    int breaches = 0, ramp = 0;
    for (const RequestRecord& q : r.requests) {
      if (q.sent >= 10 * 3600 + 600) continue;  // the first ten minutes
      ++ramp;
      breaches += q.failed || q.ttft > s.slo.ttft_p95_s;
    }
    EXPECT_GT(ramp, 100);
    return breaches;
  };
  const int without = ramp_breaches(false);
  const int with = ramp_breaches(true);
  EXPECT_GT(without, 0);
  EXPECT_LT(with, without);
  RecordProperty("ramp_ttft_breaches_without", without);
  RecordProperty("ramp_ttft_breaches_with", with);
  std::printf("ramp TTFT breaches (first 10 min): %d without a timetable floor, %d with\n",
              without, with);
}

TEST(ClusterSimTest, TheSameSeedGivesTheSameReport) {
  Scenario s = Parse(kLab);
  AttachCluster(s, *s.cluster);
  auto json = [&](const Scenario& sc) {
    const PlanRun run = RunPlan(sc, Llama(), nullptr, {});
    std::string j = PlanJson(sc, BuildPlanReport(sc, run), nullptr);
    return j.substr(0, j.find("\"sim\""));  // the wall time differs
  };
  const std::string a = json(s);
  EXPECT_EQ(a, json(s));
  Scenario other = s;
  other.simulation.seed = 7;
  EXPECT_NE(a, json(other));
}

TEST(ClusterSimTest, TheReportHasTheFieldsTheIssueNames) {
  const Scenario s = Parse(kLab);
  const PlanRun run = RunPlan(s, Llama(), nullptr, {});
  ASSERT_TRUE(run.error.empty()) << run.error;
  const PlanReport report = BuildPlanReport(s, run);
  rapidjson::Document d;
  d.Parse(PlanJson(s, report, nullptr).c_str());
  ASSERT_FALSE(d.HasParseError());
  EXPECT_TRUE(d["verdict"].IsString());
  for (const char* k : {"mean", "p50", "p95", "p99"}) {
    EXPECT_TRUE(d["jobs"]["wait_s"][k].IsNumber()) << k;
    EXPECT_TRUE(d["jobs"]["completion_s"][k].IsNumber()) << k;
  }
  EXPECT_TRUE(d["jobs"]["count"].IsInt64());
  ASSERT_GT(d["jobs"]["by_gpus"].Size(), 0u);
  EXPECT_TRUE(d["jobs"]["by_gpus"][0]["completion_s"]["p95"].IsNumber());
  EXPECT_TRUE(d["jobs"]["makespan_s"].IsNumber());
  for (const char* k : {"p50", "p95", "p99"}) EXPECT_TRUE(d["inference"]["ttft_s"][k].IsNumber());
  EXPECT_TRUE(d["inference"]["slo_hours_met_fraction"].IsNumber());
  for (const char* k : {"allocated_fraction", "inference_fraction", "training_fraction"}) {
    EXPECT_TRUE(d["gpus"][k].IsNumber()) << k;
  }
  for (const char* k : {"per_user_month", "per_gpu_hour", "cloud_on_demand_per_user_month"}) {
    EXPECT_TRUE(d["cost"][k].IsNumber()) << k;
  }
  for (const char* k : {"wall_s", "simulated_s", "events"}) EXPECT_TRUE(d["sim"][k].IsNumber());
  // Where the model's timing came from (the command sets it; empty here).
  EXPECT_TRUE(d["sim"]["calibration"]["launch_delay_s"].IsNumber());
  EXPECT_TRUE(d["sim"]["calibration"]["launch_delay_source"].IsString());
  EXPECT_EQ(d["timeline"].Size(), 24u);
  EXPECT_DOUBLE_EQ(d["sim"]["simulated_s"].GetDouble(), 86400);
  // The floor's 2 replicas (the default min is 1: one GPU) hold GPUs all day.
  EXPECT_GT(d["gpus"]["inference_fraction"].GetDouble(), 0);
  EXPECT_THAT(report.verdict, HasSubstr("100 users on 48 GPUs"));
}

// A cluster too small for its jobs misses the wait objective; the verdict says which hour.
TEST(ClusterSimTest, AnOverloadedClusterMissesAndTheVerdictSaysWhere) {
  Scenario s = Parse(kLab);
  s.cohorts[0].training.jobs_per_week = 10;
  s.cohorts[0].training.duration_median_s = 7200;
  s.cohorts[0].training.duration_p90_s = 14400;
  AttachCluster(s, ResizeCluster(*s.cluster, 8));
  const PlanReport report = BuildPlanReport(s, RunPlan(s, Llama(), nullptr, {}));
  EXPECT_FALSE(report.met);
  EXPECT_THAT(report.verdict, HasSubstr("do not meet"));
  EXPECT_THAT(report.verdict, HasSubstr("Monday 1"));
  EXPECT_GT(report.jobs.wait_s.p95, s.slo.job_wait_p95_s);
}

TEST(SweepTest, ResizingCutsOrAddsNodesLikeTheLast) {
  const Scenario s = Parse(kLab);
  const Cluster small = ResizeCluster(*s.cluster, 24);
  EXPECT_EQ(small.nodes.size(), 6u);
  for (const Partition& p : small.partitions) EXPECT_EQ(p.nodes.size(), 6u) << p.name;
  const Cluster big = ResizeCluster(*s.cluster, 64);
  ASSERT_EQ(big.nodes.size(), 16u);
  EXPECT_EQ(big.nodes[12].name, "oss13");
  EXPECT_EQ(big.nodes[15].name, "oss16");
  EXPECT_EQ(big.nodes[15].gpus.count, 4);
  for (const Partition& p : big.partitions) EXPECT_EQ(p.nodes.size(), 16u) << p.name;
}

TEST(SweepTest, UsersScaleEveryCohort) {
  Scenario s = Parse(std::string(kLab) + "[[cohorts]]\nname = \"researchers\"\ncount = 25\n");
  const Scenario doubled = SweepScenario(s, ParseSweep("users=250"), 250);
  EXPECT_EQ(doubled.cohorts[0].count, 200);
  EXPECT_EQ(doubled.cohorts[1].count, 50);
}

TEST(SweepTest, ABadSweepSaysWhatToWrite) {
  EXPECT_EQ(ParseSweep("gpus=24,32").values, (std::vector<int>{24, 32}));
  for (const char* bad : {"gpus", "nodes=1,2", "gpus=24,,32", "gpus=0", "gpus=x"}) {
    try {
      ParseSweep(bad);
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("--sweep")) << bad;
    }
  }
}

}  // namespace
}  // namespace bmas::plan
