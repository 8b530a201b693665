#include "daemon/agent.h"

#include <gtest/gtest.h>

namespace bmas {
namespace {

TEST(AgentTest, OnlyAProcessInTheJobsOwnCgroupIsPartOfIt) {
  // cgroup v1 (hybrid) as slurmd writes it for a local node, and cgroup v2.
  const std::string v1 =
      "12:memory:/slurm_oss01/uid_1003/job_6820001/step_batch/user/task_0\n"
      "11:devices:/slurm_oss01/uid_1003/job_6820001/step_batch\n"
      "1:name=systemd:/\n0::/\n";
  EXPECT_TRUE(InSlurmJobCgroup(v1, 6820001));
  EXPECT_FALSE(InSlurmJobCgroup(v1, 682000));  // a prefix of the id is another job
  EXPECT_FALSE(InSlurmJobCgroup(v1, 6820002));
  const std::string v2 = "0::/system.slice/oss01_slurmstepd.scope/job_77/step_batch/user/task_0\n";
  EXPECT_TRUE(InSlurmJobCgroup(v2, 77));
  EXPECT_FALSE(InSlurmJobCgroup("0::/user.slice/user-1003.slice/session-4.scope\n", 77));
}

}  // namespace
}  // namespace bmas
