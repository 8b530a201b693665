// What CUDA needs beside a job's GPUs in its workspace (lxd/cuda_devices.h), against a real LXD
// and a local Slurm cluster: the driver's control devices (the local cluster's fakes) and its
// user-space files from a fake driver root given as [gpu] driver_root, there during the job,
// read-only even for the container's root, and gone after. Needs root, LXD and Slurm.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "lxd_workspace_fixture.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kLibcuda = "/usr/lib/x86_64-linux-gnu/libcuda.so.1";

class WorkspaceCudaTest : public WorkspaceJobsTest {
 protected:
  WorkspaceCudaTest() {
    driver_ = fmt::format("/tmp/bmas-cuda-driver-{}", getpid());
    config_extra_ = fmt::format("[gpu]\ndriver_root = \"{}\"\n", driver_);
  }

  void SetUp() override {
    // A driver as the NVIDIA installer lays it out: versioned libraries with their links, and
    // a tool; and a link out to a host file, which must never come in.
    const fs::path lib = fs::path(driver_) / "usr/lib/x86_64-linux-gnu";
    fs::create_directories(lib);
    fs::create_directories(fs::path(driver_) / "usr/bin");
    for (const char* f : {"libcuda.so.550.54", "libnvidia-ml.so.550.54"}) {
      std::ofstream(lib / f) << "fake " << f << "\n";
      chmod((lib / f).c_str(), 0644);
    }
    fs::create_symlink("libcuda.so.550.54", lib / "libcuda.so.1");
    fs::create_symlink("libnvidia-ml.so.550.54", lib / "libnvidia-ml.so.1");
    fs::create_symlink("/etc/shadow", lib / "libnvidia-cfg.so.1");
    const fs::path smi = fs::path(driver_) / "usr/bin/nvidia-smi";
    std::ofstream(smi) << "#!/bin/sh\necho fake nvidia-smi\n";
    chmod(smi.c_str(), 0755);
    WorkspaceJobsTest::SetUp();
  }

  void TearDown() override {
    WorkspaceJobsTest::TearDown();
    std::error_code ec;
    fs::remove_all(driver_, ec);
  }

  // `sh -c SCRIPT` as root in bmastest1's workspace.
  CommandOutput AsRootInside(const std::string& script) {
    return Bmas({"workspace", "exec", "bmastest1", "--", "sh", "-c", script});
  }

  std::string HooksLog() {
    std::ifstream hooks(state_ + "/slurm/log/hooks.log");
    std::stringstream log;
    log << hooks.rdbuf();
    return log.str();
  }

  std::string driver_;
};

TEST_F(WorkspaceCudaTest, AJobGetsTheControlDevicesAndTheDriversFilesReadOnlyUntilItEnds) {
  // Outside a job the workspace has none of it.
  EXPECT_THAT(AsRootInside(fmt::format("ls /dev; cat {}", kLibcuda)).out, Not(HasSubstr("nvidia")));

  // The student's job, through bmas run: the devices and the files are there and read-only.
  CommandOutput r =
      InHome("bmastest1",
             {"run", "--gpus", "1", "--wait", "--", "sh", "-c",
              fmt::format("id -u; ls /dev; cat {0}; /usr/bin/nvidia-smi; "
                          "cat /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; "
                          "echo x >> {0} || echo REFUSED; "
                          "test -e /usr/lib/x86_64-linux-gnu/libnvidia-cfg.so.1 || echo NO-CFG",
                          kLibcuda)});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("{}\n", getpwnam("bmastest1")->pw_uid)));
  for (const char* dev :
       {"\nnvidia0\n", "\nnvidiactl\n", "\nnvidia-uvm\n", "\nnvidia-uvm-tools\n"}) {
    EXPECT_THAT(r.out, HasSubstr(dev)) << r.out;
  }
  EXPECT_THAT(r.out, HasSubstr("fake libcuda.so.550.54\n"));
  EXPECT_THAT(r.out, HasSubstr("fake libnvidia-ml.so.550.54\n"));
  EXPECT_THAT(r.out, HasSubstr("fake nvidia-smi\n"));
  EXPECT_THAT(r.out, HasSubstr("REFUSED\n"));
  EXPECT_THAT(r.out, HasSubstr("NO-CFG\n"));  // the link out to /etc/shadow stayed out
  EXPECT_THAT(HooksLog(), HasSubstr("libnvidia-cfg.so.1: leads out of the driver root"));
  // The epilog took all of it away with the job's GPU.
  auto gone = [&] {
    const std::string out = AsRootInside(fmt::format("ls /dev; cat {}", kLibcuda)).out;
    return out.find("nvidia") == std::string::npos && out.find("fake") == std::string::npos;
  };
  EXPECT_TRUE(Eventually(gone, std::chrono::seconds(10)))
      << AsRootInside(fmt::format("ls /dev; cat {}", kLibcuda)).out;

  // While a job runs, the container's root cannot write the host's driver files either, nor
  // make their mount writable.
  CommandOutput run = InHome("bmastest1", {"run", "--gpus", "1", "--", "sleep", "273"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string id = run.out.substr(0, run.out.find('\n'));
  ASSERT_TRUE(Eventually(
      [&] {
        return AsRootInside(fmt::format("cat {}", kLibcuda)).out.find("fake") != std::string::npos;
      },
      std::chrono::seconds(20)));
  CommandOutput root = AsRootInside(
      fmt::format("echo x >> {0} || echo REFUSED; mount -o remount,rw {0} || echo NO-REMOUNT; "
                  "echo x >> {0} || echo STILL-REFUSED",
                  kLibcuda));
  EXPECT_THAT(root.out, HasSubstr("REFUSED\n"));
  EXPECT_THAT(root.out, HasSubstr("STILL-REFUSED\n"));
  std::ifstream host(driver_ + "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54");
  std::stringstream content;
  content << host.rdbuf();
  EXPECT_EQ(content.str(), "fake libcuda.so.550.54\n");
  ASSERT_EQ(InHome("bmastest1", {"cancel", id}).exit_code, 0);
  EXPECT_TRUE(Eventually(gone, std::chrono::seconds(20)));
}

}  // namespace
}  // namespace bmas::testing
