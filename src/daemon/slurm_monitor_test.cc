#include "daemon/slurm_monitor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

JobInfo Job(int64_t id, std::string user, std::string partition, std::string state, int gpus) {
  JobInfo j;
  j.id = id;
  j.user = std::move(user);
  j.partition = std::move(partition);
  j.state = ParseJobState(state);
  j.gpus = gpus;
  return j;
}

TEST(SlurmMetricsTest, CountsJobsAndGpusPerUserAndPartition) {
  SlurmSnapshot s;
  s.reachable = true;
  s.jobs = {Job(1, "alice", "lab", "RUNNING", 2), Job(2, "alice", "lab", "RUNNING", 1),
            Job(3, "alice", "lab", "PENDING", 4), Job(4, "bob", "training", "PENDING", 8),
            Job(5, "bob", "inference", "RUNNING", 1), Job(6, "bob", "lab", "COMPLETED", 4)};
  NodeInfo n1;
  n1.name = "oss01";
  n1.state = "mixed";
  n1.gpus = 4;
  n1.gpus_used = 3;
  NodeInfo n2 = n1;
  n2.name = "oss02";
  n2.state = "idle";
  n2.gpus_used = 0;
  s.nodes = {n1, n2};
  const std::string text = RenderSlurmMetrics(s, 5, 1);
  EXPECT_THAT(text, HasSubstr("bmas_slurm_up 1.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_slurm_jobs{user=\"alice\",partition=\"lab\",state=\"running\"} 2.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_slurm_jobs{user=\"alice\",partition=\"lab\",state=\"pending\"} 1.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_slurm_gpus_held{user=\"alice\",partition=\"lab\"} 3.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_slurm_gpus_held{user=\"bob\",partition=\"training\"} 0.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_slurm_gpus_held{user=\"bob\",partition=\"inference\"} 1.0\n"));
  // A finished job holds nothing.
  EXPECT_THAT(text, Not(HasSubstr("user=\"bob\",partition=\"lab\"")));
  EXPECT_THAT(text, HasSubstr("bmas_slurm_pending_jobs{partition=\"lab\"} 1.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_slurm_pending_jobs{partition=\"training\"} 1.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_slurm_gpus{state=\"allocated\"} 3.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_slurm_gpus{state=\"idle\"} 5.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_slurm_nodes{state=\"idle\"} 1.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_mode{mode=\"lab\"} 1.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_mode{mode=\"research\"} 0.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_slurm_jobs_recorded_total 5.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_slurm_poll_errors_total 1.0\n"));
}

TEST(SlurmMetricsTest, ShowsResearchModeAndAnUnreachableSlurm) {
  SlurmSnapshot s;
  s.mode.research = true;
  s.mode.users = {"alice"};
  s.mode.nodes = {"oss01", "oss02"};
  const std::string text = RenderSlurmMetrics(s, 0, 3);
  EXPECT_THAT(text, HasSubstr("bmas_slurm_up 0.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_mode{mode=\"research\"} 1.0\n"));
  EXPECT_THAT(text, HasSubstr("bmas_research_nodes 2.0\n"));
}

TEST(SlurmMetricsTest, OnlyFinishedJobsBecomeRecords) {
  JobInfo done = Job(7, "alice", "lab", "COMPLETED", 2);
  done.start_time = 100;
  done.end_time = 700;
  done.nodes = {"oss01"};
  JobInfo failed = Job(8, "bob", "lab", "FAILED", 1);
  failed.end_time = 50;
  failed.exit_code = 3;
  auto records = FinishedJobRecords(
      {done, failed, Job(9, "alice", "lab", "RUNNING", 1), Job(10, "x", "lab", "PENDING", 1)},
      "bmas-local");
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].cluster, "bmas-local");
  EXPECT_EQ(records[0].id, 7);
  EXPECT_EQ(records[0].gpus, 2);
  EXPECT_EQ(records[0].end_time - records[0].start_time, 600);
  EXPECT_EQ(records[1].exit_code, 3);
}

}  // namespace
}  // namespace bmas
