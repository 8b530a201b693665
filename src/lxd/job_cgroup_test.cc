#include "lxd/job_cgroup.h"

#include <gtest/gtest.h>

namespace bmas::lxd {
namespace {

TEST(JobCgroupTest, AJobsCgroupSitsInEachOfTheWorkspacesV1Hierarchies) {
  const std::string init =
      "12:memory:/lxc.payload.ws-u\n"
      "5:cpu,cpuacct:/lxc.payload.ws-u\n"
      "1:name=systemd:/lxc.payload.ws-u/init.scope\n"
      "3:freezer:/../escape\n";  // never followed out of the hierarchy
  EXPECT_EQ(JobCgroupDirs(init, 7),
            (std::vector<std::string>{"/sys/fs/cgroup/memory/lxc.payload.ws-u/bmas-job-7",
                                      "/sys/fs/cgroup/cpu,cpuacct/lxc.payload.ws-u/bmas-job-7",
                                      "/sys/fs/cgroup/systemd/lxc.payload.ws-u/init.scope/"
                                      "bmas-job-7"}));
}

}  // namespace
}  // namespace bmas::lxd
