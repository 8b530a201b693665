#include "slurm/gpu_cap.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "slurm/fake_slurm_api.h"

namespace bmas {
namespace {

using ::testing::HasSubstr;

// A lab partition capping each user at 4 GPUs, a bigger one without a cap, with accounting.
Cluster LabCluster() {
  Cluster c;
  c.slurm.accounting = true;
  Partition lab;
  lab.name = "lab";
  lab.max_gpus_per_user = 4;
  lab.nodes = {"oss01", "oss02"};
  Partition big;
  big.name = "big";
  big.nodes = {"oss01", "oss02"};
  c.partitions = {lab, big};
  return c;
}

JobShape Shape(const std::string& partition, int nodes, int gpus_per_node) {
  JobShape s;
  s.partition = partition;
  s.nodes = nodes;
  s.gpus_per_node = gpus_per_node;
  return s;
}

// A job of `user` in `partition` holding `gpus`, in `state`.
int64_t AddJob(FakeSlurmApi& slurm, const std::string& user, const std::string& partition,
               int gpus, const std::string& state) {
  JobSpec spec;
  spec.partition = partition;
  spec.gpus_per_node = gpus;
  const int64_t id = *slurm.Submit(spec);
  slurm.jobs[id].user = user;
  slurm.jobs[id].state = ParseJobState(state);
  return id;
}

TEST(GpuCapTest, AJobWithinTheCapIsLetThrough) {
  FakeSlurmApi slurm;
  AddJob(slurm, "alice", "lab", 2, "RUNNING");
  EXPECT_TRUE(CheckGpuCap(slurm, LabCluster(), Shape("lab", 1, 2), "alice"));
}

TEST(GpuCapTest, AJobOverTheCapAloneNamesAPartitionThatTakesIt) {
  FakeSlurmApi slurm;
  auto r = CheckGpuCap(slurm, LabCluster(), Shape("lab", 2, 4), "alice");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message, HasSubstr("at most 4 GPU(s) at once and this job asks for 8"));
  EXPECT_THAT(r.error().message, HasSubstr("--partition big"));
}

TEST(GpuCapTest, RunningAndPendingJobsCountButFinishedAndOthersDoNot) {
  FakeSlurmApi slurm;
  const int64_t running = AddJob(slurm, "alice", "lab", 2, "RUNNING");
  const int64_t pending = AddJob(slurm, "alice", "lab", 1, "PENDING");
  AddJob(slurm, "alice", "lab", 4, "COMPLETED");  // ended: holds nothing
  AddJob(slurm, "bob", "lab", 4, "RUNNING");      // another user's
  AddJob(slurm, "alice", "big", 4, "RUNNING");    // another partition's
  auto r = CheckGpuCap(slurm, LabCluster(), Shape("lab", 1, 2), "alice");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(r.error().message,
              HasSubstr(fmt::format("alice holds or waits for 3 (job(s) {}, {})", running, pending)));
  EXPECT_THAT(r.error().message, HasSubstr("ask for at most 1"));
  EXPECT_TRUE(CheckGpuCap(slurm, LabCluster(), Shape("lab", 1, 1), "alice"));
}

TEST(GpuCapTest, NoCapWithoutAccountingOrOnAnUncappedPartition) {
  FakeSlurmApi slurm;
  Cluster no_accounting = LabCluster();
  no_accounting.slurm.accounting = false;
  // Jobs that would go over the cap, where one applied.
  AddJob(slurm, "alice", "lab", 4, "RUNNING");
  EXPECT_TRUE(CheckGpuCap(slurm, no_accounting, Shape("lab", 1, 4), "alice"));
  EXPECT_TRUE(CheckGpuCap(slurm, LabCluster(), Shape("big", 2, 4), "alice"));
  EXPECT_TRUE(CheckGpuCap(slurm, LabCluster(), Shape("nosuch", 1, 1), "alice"));
}

}  // namespace
}  // namespace bmas
