#include "plan/scenario.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/config.h"
#include "common/config_table.h"

namespace bmas::plan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kExamples = std::string(BMAS_SOURCE_DIR) + "/examples/";
// A scenario "in" examples/, so that a relative cluster path finds the reference cluster.
const std::string kSource = kExamples + "test-scenario.toml";

// The ConfigError that reading `text` throws, or "" when it reads.
std::string ErrorOf(const std::string& text) {
  try {
    ParseScenario(text, kSource);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The autoscaler's settings other than the replica counts and the TTFT objective.
void ExpectSameTuning(const autoscale::AutoscaleSettings& a,
                      const autoscale::AutoscaleSettings& b) {
  using S = autoscale::AutoscaleSettings;
  EXPECT_EQ(a.max_in_flight_per_replica, b.max_in_flight_per_replica);
  for (double S::*share : {&S::target_utilization, &S::scale_up_utilization,
                           &S::scale_down_utilization, &S::burst_utilization}) {
    EXPECT_EQ(a.*share, b.*share);
  }
  for (Duration S::*time :
       {&S::load_window, &S::burst_window, &S::queue_wait_breach, &S::startup_allowance,
        &S::breach_settle, &S::scale_down_idle, &S::scale_down_step}) {
    EXPECT_EQ((a.*time).count(), (b.*time).count());
  }
}

TEST(ScenarioTest, NoFileGivesTheDefaults) {
  Scenario s = LoadScenario("");
  EXPECT_EQ(s.source, "");
  EXPECT_EQ(s.cluster_file, "");
  EXPECT_FALSE(s.cluster.has_value());
  EXPECT_TRUE(s.cohorts.empty());
  EXPECT_EQ(s.trace.file, "");
  EXPECT_EQ(s.simulation.days, 7);
  EXPECT_EQ(s.engine.profile, "llama-3.1-8b-h100");
  EXPECT_EQ(s.slo.ttft_p95_s, 1);
  EXPECT_EQ(s.costs.cloud_on_demand_per_gpu_hour, 3.5);
  EXPECT_TRUE(s.policies.research.empty());
}

// The policies carry the gateway's and the autoscaler's own defaults, not copies that drift.
TEST(ScenarioTest, PolicyDefaultsAreTheGatewaysAndTheAutoscalers) {
  const Policies p;
  const GatewaySettings g;
  EXPECT_EQ(p.fairness, g.fairness);
  EXPECT_EQ(p.routing, g.routing);
  EXPECT_EQ(p.reserve_fraction, g.reserve_fraction);
  EXPECT_EQ(p.queue_timeout_s, g.queue_timeout_s);
  const autoscale::AutoscaleSettings a;
  EXPECT_EQ(p.autoscale.ttft_slo_ms, a.ttft_slo_ms);
  ExpectSameTuning(p.autoscale, a);
  // Two on purpose: the floor of `bmas inference deploy`, and "fill the cluster".
  EXPECT_EQ(p.autoscale.min_replicas, 1);
  EXPECT_EQ(p.autoscale.max_replicas, 0);
}

// The documented example lists every key; where it says "(default)" it must equal the default.
TEST(ScenarioTest, DocumentedExampleLoadsAndMatchesDefaults) {
  Scenario s = LoadScenario(kExamples + "plan-300x48.toml");
  const Scenario d;
  EXPECT_EQ(s.cluster_file, kExamples + "cluster-12x4.toml");
  ASSERT_TRUE(s.cluster.has_value());
  EXPECT_EQ(s.cluster->nodes.size(), 12u);

  EXPECT_EQ(s.simulation, d.simulation);
  EXPECT_EQ(s.trace, d.trace);
  EXPECT_EQ(s.slo, d.slo);
  EXPECT_EQ(s.costs, d.costs);
  EXPECT_EQ(s.engine.model, d.engine.model);
  EXPECT_EQ(s.engine.profile, d.engine.profile);
  EXPECT_EQ(s.engine.profiles_file, d.engine.profiles_file);
  EXPECT_EQ(s.engine.gpus_per_replica, d.engine.gpus_per_replica);

  const Policies& p = s.policies;
  EXPECT_EQ(p.fairness, d.policies.fairness);
  EXPECT_EQ(p.routing, d.policies.routing);
  EXPECT_EQ(p.reserve_fraction, d.policies.reserve_fraction);
  EXPECT_EQ(p.queue_timeout_s, d.policies.queue_timeout_s);
  EXPECT_EQ(p.inference_partition, d.policies.inference_partition);
  EXPECT_EQ(p.floor_partition, d.policies.floor_partition);
  const autoscale::AutoscaleSettings& a = p.autoscale;
  EXPECT_EQ(a.min_replicas, 2);
  EXPECT_EQ(a.max_replicas, 48);  // 0 in the file: the cluster's 48 GPUs, one per replica
  EXPECT_EQ(a.ttft_slo_ms, 1000);
  ExpectSameTuning(a, d.policies.autoscale);

  // The scenario's own: 280 students and 20 researchers.
  ASSERT_EQ(s.cohorts.size(), 2u);
  const Cohort& students = s.cohorts[0];
  EXPECT_EQ(students.name, "students");
  EXPECT_EQ(students.count, 280);
  EXPECT_EQ(students.hours.size(), 5u);
  EXPECT_EQ(students.inference.requests_per_session, InferenceBehaviour{}.requests_per_session);
  EXPECT_EQ(students.inference.output_tokens, InferenceBehaviour{}.output_tokens);
  EXPECT_EQ(students.inference.system_prompt_tokens, 1500);
  EXPECT_EQ(students.training.duration_median_s, TrainingBehaviour{}.duration_median_s);
  EXPECT_EQ(students.training.duration_p90_s, TrainingBehaviour{}.duration_p90_s);
  EXPECT_EQ(students.training.partition, "lab");
  ASSERT_EQ(students.training.gpus_per_job.size(), 2u);
  EXPECT_EQ(students.training.gpus_per_job[1].gpus, 4);
  EXPECT_EQ(students.training.gpus_per_job[0].mig_profile, "1g.10gb");
  EXPECT_EQ(students.training.gpus_per_job[0].mig_duration_factor, 1);
  EXPECT_EQ(students.training.gpus_per_job[1].mig_profile, "");
  EXPECT_EQ(p.relayout.every_s, RelayoutModelSettings{}.every_s);
  EXPECT_EQ(p.relayout.min_wait_s, RelayoutModelSettings{}.min_wait_s);
  EXPECT_EQ(p.relayout.hold_s, RelayoutModelSettings{}.hold_s);
  EXPECT_EQ(p.relayout.delay_s, RelayoutModelSettings{}.delay_s);
  const Cohort& researchers = s.cohorts[1];
  EXPECT_EQ(researchers.count, 20);
  EXPECT_EQ(researchers.inference.sessions_per_hour, InferenceBehaviour{}.sessions_per_hour);
  EXPECT_EQ(researchers.training.gpus_per_job.back().gpus, 16);
  EXPECT_TRUE(p.timetable.empty());
  EXPECT_EQ(p.timetable_lead_s, d.policies.timetable_lead_s);
  ASSERT_EQ(p.research.size(), 1u);
  EXPECT_THAT(p.research[0].nodes, ElementsAre("oss11", "oss12"));
  EXPECT_THAT(p.research[0].window.days, ElementsAre(5, 6));
}

TEST(ScenarioTest, ValuesAreRead) {
  Scenario s = ParseScenario(
      "[simulation]\ndays = 2.5\nseed = 42\n"
      "[[cohorts]]\nname = \"ml-101\"\ncount = 30\n"
      "hours = [{ days = [\"wed\", \"mon\"], start_hour = 8.5, end_hour = 10 }]\n"
      "[cohorts.training]\njobs_per_week = 2\n"
      "gpus_per_job = [{ gpus = 2, share = 0.25 }, { gpus = 1, share = 0.75 }]\n"
      "[trace]\nfile = \"jobs.csv\"\nformat = \"alibaba-v2023\"\nstart_s = 3600\n"
      "[policies]\nfairness = \"none\"\n[policies.autoscale]\nmax_replicas = 6\n"
      "load_window_s = 120\nburst_window_s = 3\n",
      kSource);
  EXPECT_EQ(s.simulation.days, 2.5);
  EXPECT_EQ(s.simulation.seed, 42u);
  ASSERT_EQ(s.cohorts.size(), 1u);
  EXPECT_EQ(s.cohorts[0].count, 30);
  EXPECT_EQ(s.cohorts[0].line, 4);
  ASSERT_EQ(s.cohorts[0].hours.size(), 1u);
  EXPECT_THAT(s.cohorts[0].hours[0].window.days, ElementsAre(0, 2));  // sorted
  EXPECT_EQ(s.cohorts[0].hours[0].window.start_hour, 8.5);
  EXPECT_EQ(s.cohorts[0].hours[0].active_fraction, 1);
  EXPECT_EQ(s.cohorts[0].training.gpus_per_job[0].gpus, 2);
  EXPECT_EQ(s.trace.file, kExamples + "jobs.csv");  // from the scenario's folder
  EXPECT_EQ(s.trace.format, TraceFormat::kAlibabaV2023);
  EXPECT_EQ(s.trace.start_s, 3600);
  EXPECT_EQ(s.policies.fairness, "none");
  EXPECT_EQ(s.policies.autoscale.max_replicas, 6);
  EXPECT_FALSE(s.policies.fill_max_replicas);
  EXPECT_EQ(s.policies.autoscale.load_window, Duration{120});
  EXPECT_EQ(s.policies.autoscale.burst_window, Duration{3});
}

TEST(ScenarioTest, ACohortWithoutHoursWorksWeekdayOfficeHours) {
  Scenario s = ParseScenario("[[cohorts]]\nname = \"staff\"\n", kSource);
  ASSERT_EQ(s.cohorts.size(), 1u);
  ASSERT_EQ(s.cohorts[0].hours.size(), 1u);
  const ActivityWindow& h = s.cohorts[0].hours[0];
  EXPECT_THAT(h.window.days, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(h.window.start_hour, 9);
  EXPECT_EQ(h.window.end_hour, 17);
  EXPECT_EQ(h.active_fraction, 1);
  EXPECT_EQ(s.cohorts[0].count, 1);
}

struct BadCase {
  const char* text;
  const char* expected;  // substrings of the error, after the file name
};

class BadScenarioTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadScenarioTest, ErrorNamesFileLineKeyAndFix) {
  std::string error = ErrorOf(GetParam().text);
  ASSERT_FALSE(error.empty()) << "no error for: " << GetParam().text;
  EXPECT_THAT(error, HasSubstr(kSource + ":"));
  EXPECT_THAT(error, HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Keys, BadScenarioTest,
    ::testing::Values(
        BadCase{"[slo]\nttft_p95 = 1\n",
                ":2: unknown key 'slo.ttft_p95' (examples/plan-300x48.toml documents every key)"},
        BadCase{"colour = 1\n", ":1: unknown key 'colour'"},
        BadCase{"[[cohorts]]\nname = \"a\"\n[cohorts.training]\njobs = 1\n",
                "unknown key 'cohorts[0].training.jobs'"},
        BadCase{"[cost]\npue = 0.5\n", ":2: cost.pue: 0.5 is out of range: expected 1..5"},
        BadCase{"[simulation]\ndays = 0\n", "simulation.days: 0 is out of range"},
        BadCase{"[[cohorts]]\nname = \"a\"\ncount = 0\n",
                ":3: cohorts[0].count: 0 is out of range: expected 1..1000000"},
        BadCase{"[slo]\nttft_p95_s = \"fast\"\n", "slo.ttft_p95_s: expected a number"},
        BadCase{"[[cohorts]]\ncount = 3\n", "cohorts[0].name: required"},
        BadCase{"[[cohorts]]\nname = \"Year 1\"\n", "\"Year 1\" is not a cohort name"},
        BadCase{"[[cohorts]]\nname = \"a\"\n[[cohorts]]\nname = \"a\"\n",
                ":4: cohorts[1].name: \"a\" names two cohorts"},
        BadCase{"[[cohorts]]\nname = \"a\"\nhours = [{ days = [\"tuesday\"] }]\n",
                "cohorts[0].hours[0].days: \"tuesday\" is not a day: give mon, tue"},
        BadCase{"[[cohorts]]\nname = \"a\"\nhours = [{ days = [\"mon\", \"mon\"] }]\n",
                "\"mon\" is given twice"},
        BadCase{"[[cohorts]]\nname = \"a\"\nhours = [{ start_hour = 22, end_hour = 2 }]\n",
                "end_hour: 2 is not after start_hour 22: a window ends by midnight"},
        BadCase{"[[cohorts]]\nname = \"a\"\nhours = []\n", "cohorts[0].hours: is empty"},
        BadCase{"[[cohorts]]\nname = \"a\"\nhours = [{ active_fraction = 1.5 }]\n",
                "active_fraction: 1.5 is out of range: expected 0..1"},
        BadCase{"[[cohorts]]\nname = \"a\"\n[cohorts.training]\n"
                "gpus_per_job = [{ gpus = 1, share = 0.5 }, { gpus = 2, share = 0.3 }]\n",
                "cohorts[0].training.gpus_per_job: the shares add up to 0.8: make them add up "
                "to 1"},
        BadCase{"[[cohorts]]\nname = \"a\"\n[cohorts.training]\n"
                "gpus_per_job = [{ gpus = 1, share = 1, mig_profile = \"h100\" }]\n",
                "mig_profile: \"h100\" is not a MIG profile; name one as the inventory's layouts "
                "do, e.g. \"1g.10gb\""},
        BadCase{"[policies.mig]\nevery = 30\n", "unknown key 'policies.mig.every'"},
        BadCase{"[[cohorts]]\nname = \"a\"\n[cohorts.training]\nduration_median_s = 100\n"
                "duration_p90_s = 50\n",
                "duration_p90_s: 50 is below duration_median_s 100"},
        BadCase{"[[cohorts]]\nname = \"a\"\n[cohorts.inference]\nprompt_tokens = 0\n",
                "cohorts[0].inference.prompt_tokens: 0 is out of range"},
        BadCase{"[engine]\nprofile = \"llama-70b-b200\"\n",
                "engine.profile: \"llama-70b-b200\" is not a built-in profile "
                "(instant, llama-3.1-8b-h100): name one, or give profiles_file"},
        BadCase{"[engine]\nmodel = \"\"\n", "engine.model: is empty"},
        BadCase{"[trace]\nformat = \"swf\"\n",
                "trace.format: \"swf\" is not one of: csv, alibaba-v2023"},
        BadCase{"[policies]\nrouting = \"random\"\n",
                "policies.routing: \"random\" is not one of: cache_aware"},
        BadCase{"[policies.autoscale]\nmin_replicas = 4\nmax_replicas = 2\n",
                "policies.autoscale.max_replicas: 2 is below min_replicas 4"},
        BadCase{"[policies.autoscale]\nscale_down_utilization = 0.9\n",
                "scale_down_utilization: 0.9 is not below scale_up_utilization 0.8"},
        BadCase{"[[policies.research]]\nnodes = \"oss01\"\n",
                "policies.research[0].users: required"},
        BadCase{"[[policies.research]]\nusers = [\"alice\"]\nnodes = \"oss01\"\n",
                "policies.research[0].users: \"alice\" is no cohort's member"},
        BadCase{"[[cohorts]]\nname = \"r\"\ncount = 2\n[[policies.research]]\n"
                "users = [\"r-3\"]\nnodes = \"oss01\"\n",
                "\"r-3\" is no cohort's member"},
        BadCase{"[[cohorts]]\nname = \"r\"\n[[policies.research]]\nusers = [\"r-1\"]\n"
                "nodes = \"oss[02-01]\"\n",
                "policies.research[0].nodes: "},
        BadCase{"[slo]\nttft_p95_s = 2\nttft_p99_s = 1\n",
                "slo.ttft_p99_s: 1 is below ttft_p95_s 2"},
        BadCase{"[cost]\ncurrency = \"\"\n", "cost.currency: is empty"},
        BadCase{"cluster = \"no-such-cluster.toml\"\n",
                ":1: cluster: " BMAS_SOURCE_DIR "/examples/no-such-cluster.toml: cannot read"},
        BadCase{"[slo\n", ":1: "}));

// Checks that need the cluster: examples/cluster-12x4.toml, 12 nodes oss01..oss12 of 4 GPUs,
// partitions lab (default), training, inference, inference_floor.
INSTANTIATE_TEST_SUITE_P(
    Cluster, BadScenarioTest,
    ::testing::Values(
        BadCase{"cluster = \"cluster-12x4.toml\"\n[[cohorts]]\nname = \"a\"\n"
                "[cohorts.training]\njobs_per_week = 1\npartition = \"gpu\"\n",
                ":2: cohorts[0].training.partition: \"gpu\" is not a partition of " BMAS_SOURCE_DIR
                "/examples/cluster-12x4.toml: name one of lab, training, inference, "
                "inference_floor"},
        BadCase{"cluster = \"cluster-12x4.toml\"\n[[cohorts]]\nname = \"a\"\n"
                "[cohorts.training]\njobs_per_week = 1\n"
                "gpus_per_job = [{ gpus = 64, share = 1 }]\n",
                "cohorts[0].training.gpus_per_job: jobs of 64 GPUs do not fit in partition lab "
                "(48 GPUs)"},
        BadCase{"cluster = \"cluster-12x4.toml\"\n[[cohorts]]\nname = \"a\"\n"
                "[cohorts.training]\njobs_per_week = 1\ntime_limit_s = 90000\n",
                ":2: cohorts[0].training.time_limit_s: 90000 s is over partition lab's max_time "
                "(1-00:00:00): Slurm would refuse the jobs; ask for 86400 s or less"},
        BadCase{"cluster = \"cluster-12x4.toml\"\n[engine]\ngpus_per_replica = 8\n",
                ":2: engine.gpus_per_replica: 8 GPUs do not fit on one node"},
        BadCase{"cluster = \"cluster-12x4.toml\"\n[policies]\nfloor_partition = \"floor\"\n",
                "policies.floor_partition: \"floor\" is not a partition of"},
        BadCase{"cluster = \"cluster-12x4.toml\"\n[policies.autoscale]\nmin_replicas = 49\n",
                "policies.autoscale.min_replicas: 49 replicas need 49 GPUs; " BMAS_SOURCE_DIR
                "/examples/cluster-12x4.toml has 48"},
        BadCase{"cluster = \"cluster-12x4.toml\"\n[[cohorts]]\nname = \"r\"\n"
                "[[policies.research]]\nusers = [\"r-1\"]\nnodes = \"oss[12-13]\"\n",
                ":4: policies.research[0].nodes: \"oss13\" is not a node of"},
        BadCase{"[[policies.timetable]]\ndays = \"Mon-Fry\"\nfrom = \"09:00\"\n"
                "to = \"12:00\"\nmin = 3\n",
                ":2: policies.timetable[0].days: 'Mon-Fry' in days \"Mon-Fry\" is not a day"},
        BadCase{"[policies.autoscale]\nmax_replicas = 2\n[[policies.timetable]]\n"
                "days = \"Mon\"\nfrom = \"09:00\"\nto = \"12:00\"\nmin = 3\n",
                "policies.timetable: the timetable floor Mon 09:00-12:00 min=3 is above --max 2"}));

TEST(ScenarioTest, TimetableFloorsAreReadAsTheDeploymentsAre) {
  const Scenario s = ParseScenario(
      "[policies]\ntimetable_lead_s = 300\n[[policies.timetable]]\ndays = \"Mon-Fri\"\n"
      "from = \"09:00\"\nto = \"12:00\"\nmin = 3\n",
      kSource);
  ASSERT_EQ(s.policies.timetable.size(), 1u);
  EXPECT_EQ(s.policies.timetable[0], (TimetableFloor{0x1f, 540, 720, 3}));
  EXPECT_EQ(s.policies.timetable_lead_s, 300);
}

TEST(ScenarioTest, ResearchUsersMayComeFromTheTrace) {
  Scenario s = ParseScenario(
      "[trace]\nfile = \"jobs.csv\"\n[[policies.research]]\nusers = [\"alice\"]\n"
      "nodes = \"oss[01-02]\"\ndays = [\"sat\"]\n",
      kSource);
  ASSERT_EQ(s.policies.research.size(), 1u);
  EXPECT_THAT(s.policies.research[0].users, ElementsAre("alice"));
  EXPECT_THAT(s.policies.research[0].nodes, ElementsAre("oss01", "oss02"));
}

TEST(ScenarioTest, ACohortWithoutJobsNeedsNoPartition) {
  Scenario s = ParseScenario(
      "cluster = \"cluster-12x4.toml\"\n[[cohorts]]\nname = \"a\"\n"
      "[cohorts.training]\npartition = \"gpu\"\n",
      kSource);
  EXPECT_TRUE(s.cluster.has_value());
}

TEST(ScenarioTest, AnotherClusterReplacesTheScenariosAndRefillsMaxReplicas) {
  Scenario s = LoadScenario("", kExamples + "cluster-local.toml");  // 3 nodes of 4 GPUs
  ASSERT_TRUE(s.cluster.has_value());
  EXPECT_EQ(s.cluster_file, kExamples + "cluster-local.toml");
  EXPECT_EQ(s.policies.autoscale.max_replicas, 12);
  AttachCluster(s, LoadCluster(kExamples + "cluster-12x4.toml"));
  EXPECT_EQ(s.cluster->nodes.size(), 12u);
  EXPECT_EQ(s.policies.autoscale.max_replicas, 48);

  Scenario given = ParseScenario("cluster = \"no-such-cluster.toml\"\n", kSource,
                                 kExamples + "cluster-local.toml");
  EXPECT_EQ(given.cluster->nodes.size(), 3u);
}

TEST(ScenarioTest, ClusterErrorsWithoutAScenarioSayTheDefaults) {
  Scenario s;
  s.policies.inference_partition = "gpu";
  try {
    AttachCluster(s, LoadCluster(kExamples + "cluster-12x4.toml"));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the default scenario: policies.inference_partition: \"gpu\""));
  }
}

struct WindowCase {
  double t;  // simulated seconds
  bool inside;
};

TEST(WeeklyWindowTest, ContainsItsHoursEveryWeek) {
  const WeeklyWindow tuesday_lab{.days = {1}, .start_hour = 14, .end_hour = 16};
  constexpr double kHour = 3600;
  constexpr double kDay = 24 * kHour;
  for (const WindowCase& c : {
           WindowCase{0, false},                 // Monday 00:00
           WindowCase{kDay + 14 * kHour, true},  // Tuesday 14:00
           WindowCase{kDay + 15.99 * kHour, true},
           WindowCase{kDay + 16 * kHour, false},  // the end is not inside
           WindowCase{kDay + 13.99 * kHour, false},
           WindowCase{2 * kDay + 15 * kHour, false},            // Wednesday
           WindowCase{kWeekSeconds + kDay + 15 * kHour, true},  // next week's Tuesday
       }) {
    EXPECT_EQ(tuesday_lab.Contains(c.t), c.inside) << c.t;
  }
  const WeeklyWindow always;
  EXPECT_TRUE(always.Contains(6 * kDay + 23.99 * kHour));  // Sunday night
}

TEST(ScenarioTest, MembersAreNamedByCohortAndNumber) {
  EXPECT_EQ(MemberName("students", 1), "students-1");
  EXPECT_EQ(MemberName("researchers", 20), "researchers-20");
}

}  // namespace
}  // namespace bmas::plan
