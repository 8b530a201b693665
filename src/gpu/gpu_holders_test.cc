#include "gpu/gpu_holders.h"

#include <gtest/gtest.h>

namespace bmas {
namespace {

TEST(GpuHoldersTest, ACgroupNamesItsSlurmJobOrItsWorkspaceJob) {
  // cgroup v1 (slurmd's plugin) and v2 layouts, and bmas's cgroup inside a workspace.
  EXPECT_EQ(JobOfCgroup("12:devices:/slurm/uid_1001/job_42/step_batch/task_0\n"
                        "0::/system.slice\n"),
            42);
  EXPECT_EQ(JobOfCgroup("0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n"), 7);
  EXPECT_EQ(JobOfCgroup("4:memory:/lxc.payload.ws-alice/bmas-job-913\n"), 913);
  EXPECT_EQ(JobOfCgroup("0::/lxc.payload.ws-alice/bmas-job-913/sub\n"), 913);
  // Not a job: no number, a longer name, a session.
  EXPECT_EQ(JobOfCgroup("0::/user.slice/user-1001.slice/session-3.scope\n"), std::nullopt);
  EXPECT_EQ(JobOfCgroup("0::/job_/x\n"), std::nullopt);
  EXPECT_EQ(JobOfCgroup("0::/job_12abc/x\n"), std::nullopt);
  EXPECT_EQ(JobOfCgroup(""), std::nullopt);
}

TEST(GpuHoldersTest, EachGpuIsHeldByTheFirstOfItsProcessesInAJob) {
  GpuReading a, b, c;
  a.index = 0;
  a.pids = {10, 20};
  b.index = 1;
  b.pids = {30};
  c.index = 2;  // no process
  auto holders = HoldersOf({a, b, c}, [](pid_t pid) -> std::optional<GpuHolder> {
    if (pid == 20) return GpuHolder{42, "alice"};
    if (pid == 30) return GpuHolder{43, "bob"};
    return std::nullopt;  // pid 10: not in a job (a monitoring tool, say)
  });
  ASSERT_EQ(holders.size(), 2u);
  EXPECT_EQ(holders[0].job, 42);
  EXPECT_EQ(holders[0].user, "alice");
  EXPECT_EQ(holders[1].user, "bob");
  EXPECT_EQ(holders.count(2), 0u);
}

}  // namespace
}  // namespace bmas
