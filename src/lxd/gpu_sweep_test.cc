#include "lxd/gpu_sweep.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "lxd/holder_testing.h"

namespace bmas::lxd {
namespace {

using ::testing::HasSubstr;

GpuUse Use(uid_t uid, std::optional<int64_t> job, bool by_nvml = false) {
  GpuUse u;
  u.gpu = {"oss01", 0};
  u.pid = 4242;
  u.command = "python";
  u.uid = uid;
  u.job = job;
  u.by_nvml = by_nvml;
  return u;
}

const std::set<uid_t> kServices = {0, 998};
bool Seven(int64_t job) { return job == 7; }

TEST(MayUseGpuTest, AGpuPluggedForAJobIsForThatJobsProcessesAlone) {
  EXPECT_TRUE(MayUseGpu(Use(1001, 7), 7, Seven, kServices));
  EXPECT_FALSE(MayUseGpu(Use(1001, 8), 7, Seven, kServices)) << "another job, even a live one";
  EXPECT_FALSE(MayUseGpu(Use(1001, std::nullopt), 7, Seven, kServices)) << "a session";
  EXPECT_FALSE(MayUseGpu(Use(1001, std::nullopt, true), 7, Seven, kServices));
}

TEST(MayUseGpuTest, AGpuPluggedForNoJobIsForRunningJobsOnly) {
  EXPECT_TRUE(MayUseGpu(Use(1001, 7), std::nullopt, Seven, kServices)) << "a plain Slurm job";
  EXPECT_FALSE(MayUseGpu(Use(1001, 9), std::nullopt, Seven, kServices)) << "a job that ended";
  EXPECT_FALSE(MayUseGpu(Use(1001, std::nullopt), std::nullopt, Seven, kServices));
}

TEST(MayUseGpuTest, TheNodesServicesAreLeftAloneAndAProcessThatIsGoneIsNot) {
  EXPECT_TRUE(MayUseGpu(Use(0, std::nullopt), std::nullopt, Seven, kServices));
  EXPECT_TRUE(MayUseGpu(Use(998, std::nullopt, true), 7, Seven, kServices));
  GpuUse gone = Use(0, std::nullopt, true);
  gone.known = false;
  EXPECT_FALSE(MayUseGpu(gone, std::nullopt, Seven, kServices));
  EXPECT_EQ(DescribeUse(gone), "pid 4242 (gone) on oss01's GPU 0 (a compute context NVML lists), "
                               "in no job");
  EXPECT_EQ(DescribeUse(Use(1001, 7)),
            "pid 4242 (python) of uid 1001 on oss01's GPU 0 (its device node held open), in job 7");
}

// A GPU device node of the test's own (a character device number no driver has), held by a
// child with O_PATH as a process outside any job would.
class GpuSweepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (mknod, /proc of other processes)";
    char dir[] = "/tmp/bmas-sweep-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    ASSERT_EQ(mknod((dir_ + "/nvidia3").c_str(), S_IFCHR | 0600, makedev(241, 77)), 0);
  }
  void TearDown() override {
    if (child_ > 0) {
      kill(child_, SIGKILL);
      waitpid(child_, nullptr, 0);
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void Hold() {
    child_ = testing::StartHolder([](const char* dir) {
      char gpu[256];
      snprintf(gpu, sizeof gpu, "%s/nvidia3", dir);
      if (open(gpu, O_PATH) < 0) _exit(1);
    }, dir_.c_str());
    ASSERT_GT(child_, 0);
  }
  GpuSweepInput Input() {
    GpuSweepInput in;
    in.dirs = {{dir_, "oss07"}};
    in.alive = [](int64_t) -> Result<bool> { return false; };
    in.grace = std::chrono::milliseconds(300);
    return in;
  }

  std::string dir_;
  pid_t child_ = -1;
};

TEST_F(GpuSweepTest, AProcessOutsideAnyJobThatHoldsAGpuIsKilled) {
  Hold();
  GpuSweepReport r = SweepGpus(Input());
  ASSERT_EQ(r.killed.size(), 1u);
  EXPECT_THAT(r.killed[0], HasSubstr(fmt::format("pid {} (", child_)));
  EXPECT_THAT(r.killed[0], HasSubstr("on oss07's GPU 3 (its device node held open), in no job"));
  EXPECT_TRUE(r.stuck.empty());
  int status = 0;
  ASSERT_EQ(waitpid(child_, &status, 0), child_);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  child_ = -1;
}

TEST_F(GpuSweepTest, TheNodesOwnServicesAreLeftAlone) {
  Hold();
  GpuSweepInput in = Input();
  in.services = {0};
  GpuSweepReport r = SweepGpus(in);
  EXPECT_TRUE(r.killed.empty());
  EXPECT_EQ(kill(child_, 0), 0);
}

// NVML lists a process on a GPU that SIGKILL does not end (kthreadd stands in for one stuck in
// the driver): the node is named, with it, for draining. The whole grace passes in virtual
// time, so the test does not wait it.
TEST_F(GpuSweepTest, AUseThatOutlivesSigkillNamesItsNode) {
  ManualEnv env;
  GpuSweepInput in = Input();
  in.env = &env;
  in.grace = std::chrono::seconds(1);
  in.nvml = []() -> Result<std::map<int, std::vector<pid_t>>> {
    return std::map<int, std::vector<pid_t>>{{1, {2}}};
  };
  in.nvml_node = "oss02";
  GpuSweepReport r = SweepGpus(in);
  ASSERT_EQ(r.stuck.size(), 1u);
  EXPECT_EQ(r.stuck["oss02"],
            "pid 2 (kthreadd) of uid 0 on oss02's GPU 1 (a compute context NVML lists), in no job");
  EXPECT_GT(env.Now().count(), 1.0);
}

}  // namespace
}  // namespace bmas::lxd
