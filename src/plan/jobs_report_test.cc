#include "plan/jobs_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

namespace bmas::plan {
namespace {

using ::testing::HasSubstr;

TEST(JobsReportTest, PercentilesAreNearestRank) {
  std::vector<double> xs;
  for (int i = 1; i <= 100; ++i) xs.push_back(i);
  Stats s = Summarize(xs);
  EXPECT_EQ(s.count, 100);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_DOUBLE_EQ(s.p50, 50);
  EXPECT_DOUBLE_EQ(s.p95, 95);
  EXPECT_DOUBLE_EQ(s.p99, 99);
  EXPECT_EQ(Summarize({}).count, 0);
}

TEST(JobsReportTest, JsonHasTheFieldsThePlannerPromises) {
  Cluster cluster = ParseCluster(
      "[cluster]\ncontroller = { name = \"c\", address = \"127.0.0.1\" }\n[cluster.slurm]\nlocal = true\n"
      "[[cluster.nodes]]\nnames = \"n[1-2]\"\naddress = \"127.0.0.1\"\ncpus = 8\nmemory_gb = 16\n"
      "gpus = { count = 4, type = \"h100\" }\n",
      "two.toml");
  std::vector<SimJob> jobs = {
      SimJob{.id = 1, .partition = "training", .gpus = 8, .submit = TimePoint{0},
             .duration = Duration{100}},
      SimJob{.id = 2, .partition = "training", .gpus = 4, .submit = TimePoint{10},
             .duration = Duration{50}},
      SimJob{.id = 3, .partition = "training", .gpus = 64, .submit = TimePoint{10},
             .duration = Duration{50}},
  };
  JobsReport r = ReportJobs(cluster, jobs, RunSlurmModel(cluster, jobs, {}));
  EXPECT_EQ(r.started, 2);
  EXPECT_EQ(r.cannot_run, 1);
  EXPECT_DOUBLE_EQ(r.makespan_s, 150);
  EXPECT_DOUBLE_EQ(r.wait_s.p99, 90);
  EXPECT_NEAR(r.allocated_fraction, (8 * 100 + 4 * 50) / (8 * 150.0), 1e-9);
  EXPECT_THAT(JobsVerdict(r), HasSubstr("1 job(s) could not run"));

  rapidjson::Document d;
  d.Parse(JobsPlanJson(r, SimInfo{0.01, 150, 7}).c_str());
  ASSERT_FALSE(d.HasParseError());
  EXPECT_TRUE(d["verdict"].IsString());
  EXPECT_EQ(d["jobs"]["count"].GetInt(), 3);
  for (const char* k : {"mean", "p50", "p95", "p99"}) {
    EXPECT_TRUE(d["jobs"]["wait_s"][k].IsNumber()) << k;
    EXPECT_TRUE(d["jobs"]["completion_s"][k].IsNumber()) << k;
  }
  EXPECT_DOUBLE_EQ(d["jobs"]["makespan_s"].GetDouble(), 150);
  EXPECT_TRUE(d["inference"].IsNull());
  EXPECT_TRUE(d["gpus"]["allocated_fraction"].IsNumber());
  EXPECT_TRUE(d["gpus"]["inference_fraction"].IsNumber());
  EXPECT_TRUE(d["gpus"]["training_fraction"].IsNumber());
  EXPECT_TRUE(d["cost"].IsNull());
  EXPECT_EQ(d["sim"]["events"].GetInt(), 7);
  EXPECT_DOUBLE_EQ(d["sim"]["simulated_s"].GetDouble(), 150);
}

}  // namespace
}  // namespace bmas::plan
