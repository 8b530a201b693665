#include "slurm/node_view.h"

#include <gtest/gtest.h>

namespace bmas::slurm {
namespace {

JobInfo Running(int64_t id, const std::string& user, const std::string& name,
                std::vector<std::string> nodes, JobState state = JobState::kRunning) {
  JobInfo j;
  j.id = id;
  j.user = user;
  j.name = name;
  j.state = state;
  j.nodes = std::move(nodes);
  return j;
}

TEST(NodeViewTest, RowsCountJobsAndReplicasPerNodeAndShowTheDrain) {
  NodeInfo a{.name = "oss01", .state = "mixed", .state_flags = {"DRAIN"}, .address = "10.0.0.11"};
  a.reason = "bmas node drain by root: disk";
  a.gpus = 4;
  a.gpus_used = 3;
  NodeInfo b{.name = "oss02", .state = "idle", .address = "10.0.0.12"};
  const std::vector<JobInfo> jobs = {
      Running(1, "ada", "train", {"oss01", "oss02"}),
      Running(2, "bmas", "bmas-replica:18100:m", {"oss01"}),
      Running(3, "ada", "done", {"oss01"}, JobState::kCompleted),
      Running(4, "bob", "pending", {}, JobState::kPending),
  };
  auto replica = [](const JobInfo& j) { return j.user == "bmas" && j.name.starts_with("bmas-replica:"); };
  const std::vector<NodeRow> rows = NodeRows({a, b}, jobs, replica);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].state, "mixed+drain");
  EXPECT_TRUE(rows[0].drained);
  EXPECT_EQ(rows[0].jobs, 2);
  EXPECT_EQ(rows[0].replicas, 1);
  EXPECT_EQ(rows[0].gpus_used, 3);
  EXPECT_EQ(rows[0].reason, "bmas node drain by root: disk");
  EXPECT_EQ(rows[1].state, "idle");
  EXPECT_FALSE(rows[1].drained);
  EXPECT_EQ(rows[1].jobs, 1);
  EXPECT_EQ(rows[1].replicas, 0);
  // Requeued by --requeue: running jobs there, not replicas (they move by themselves).
  EXPECT_EQ(JobsToRequeue(jobs, "oss01", replica), (std::vector<int64_t>{1}));
  EXPECT_TRUE(JobsToRequeue(jobs, "oss03", replica).empty());
  // A node Slurm reports as "drained" (idle and drained) has no flag to add.
  NodeInfo c{.name = "oss03", .state = "drained", .state_flags = {"DRAIN"}};
  EXPECT_EQ(NodeRows({c}, {}, replica)[0].state, "drained");
  EXPECT_TRUE(NodeRows({c}, {}, replica)[0].drained);
}

}  // namespace
}  // namespace bmas::slurm
