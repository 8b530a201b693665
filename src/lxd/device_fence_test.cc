#include "lxd/device_fence.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "lxd/lxd_internal.h"

namespace bmas::lxd {
namespace {

TEST(DeviceFenceTest, TheProgramChecksEachRefusedDeviceAndAllowsTheRest) {
  EXPECT_EQ(RefuseDevicesProgram({}).size(), 7u);
  const auto p = RefuseDevicesProgram({makedev(195, 0), makedev(195, 1)});
  ASSERT_EQ(p.size(), 15u);
  EXPECT_EQ(p[4].off, 8) << "a block device jumps past every check";
  EXPECT_EQ(p[5].imm, 195);
  EXPECT_EQ(p[6].imm, 0);
  EXPECT_EQ(p[10].imm, 1);
  EXPECT_EQ(p[13].imm, 1) << "allowed at the end";
}

TEST(DeviceFenceTest, TheWorkspaceTopIsLxdsPayloadCgroup) {
  const std::string init =
      "11:devices:/lxc.payload.ws-u/init.scope\n0::/lxc.payload.ws-u/init.scope\n";
  const std::string root =
      std::filesystem::exists("/sys/fs/cgroup/unified") ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup";
  EXPECT_EQ(UnifiedCgroupDir(init), root + "/lxc.payload.ws-u/init.scope");
  EXPECT_EQ(WorkspaceCgroupDir(init), root + "/lxc.payload.ws-u");
  EXPECT_EQ(WorkspaceCgroupDir("0::/elsewhere\n"), root + "/elsewhere");
  EXPECT_EQ(WorkspaceCgroupDir("4:memory:/x\n"), "");
}

// In the cgroup `dir`, whether open(path) fails with EPERM (1), succeeds (0) or else (2).
int OpenIn(const std::string& dir, const char* path) {
  const pid_t child = fork();
  if (child == 0) {
    const int procs = open((dir + "/cgroup.procs").c_str(), O_WRONLY);
    if (procs < 0 || write(procs, "0", 1) != 1) _exit(3);
    const int fd = open(path, O_RDONLY);
    _exit(fd >= 0 ? 0 : errno == EPERM ? 1 : 2);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 4;
}

// The real kernel: /dev/null refused in a cgroup and its children, except in a child that has
// a program of its own (a job's cgroup inside the workspace's).
TEST(DeviceFenceTest, ACgroupCannotOpenARefusedDeviceButAChildWithItsOwnProgramCan) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (bpf, cgroups)";
  const std::string self = UnifiedCgroupDir(internal::ReadText("/proc/self/cgroup"));
  if (self.empty() || !std::filesystem::exists(self + "/cgroup.procs")) {
    GTEST_SKIP() << "no cgroup v2 hierarchy";
  }
  const std::string ws = fmt::format("{}/bmas-fence-test-{}", self, getpid());
  const std::string job = ws + "/bmas-job-1", other = ws + "/session";
  ASSERT_EQ(mkdir(ws.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(job.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(other.c_str(), 0755), 0);
  struct stat null {};
  ASSERT_EQ(stat("/dev/null", &null), 0);
  auto fenced = RefuseDevicesIn(ws, {null.st_rdev});
  if (fenced) fenced = RefuseDevicesIn(job, {});
  EXPECT_TRUE(fenced) << fenced.error().message;
  if (fenced) {
    EXPECT_EQ(OpenIn(ws, "/dev/null"), 1);
    EXPECT_EQ(OpenIn(other, "/dev/null"), 1) << "a child cgroup without a program of its own";
    EXPECT_EQ(OpenIn(ws, "/dev/zero"), 0) << "other devices stay open";
    EXPECT_EQ(OpenIn(job, "/dev/null"), 0);
    // Refused again later (another job's GPU plugged in): the program is replaced.
    ASSERT_TRUE(RefuseDevicesIn(job, {null.st_rdev}));
    EXPECT_EQ(OpenIn(job, "/dev/null"), 1);
  }
  for (const std::string& d : {job, other, ws}) rmdir(d.c_str());
}

}  // namespace
}  // namespace bmas::lxd
