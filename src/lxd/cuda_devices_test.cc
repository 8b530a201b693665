#include "lxd/cuda_devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lxd/fake_lxd_api.h"
#include "lxd/gpu_binding.h"

namespace bmas::lxd {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Source(int g) { return "/dev/bmas-x/oss01/nvidia" + std::to_string(g); }

const CudaSupport kCuda = {
    {"/dev/bmas-x/oss01/nvidiactl", "/dev/bmas-x/oss01/nvidia-uvm",
     "/dev/bmas-x/oss01/nvidia-uvm-tools"},
    {{"/drv/usr/lib/x86_64-linux-gnu/libcuda.so.550.54", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
     {"/drv/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"}}};

std::vector<std::string> NamesOf(const std::map<std::string, StringMap>& devices) {
  std::vector<std::string> names;
  for (const auto& [name, spec] : devices) names.push_back(name);
  return names;
}

TEST(CudaDevicesTest, ControlDevicesAreCharDevicesAndDriverFilesReadOnlyMounts) {
  auto devices = CudaDevices({}, kCuda);
  EXPECT_THAT(NamesOf(devices),
              ElementsAre("bmas-cuda-libcuda.so.1", "bmas-cuda-nvidia-smi", "bmas-cuda-nvidia-uvm",
                          "bmas-cuda-nvidia-uvm-tools", "bmas-cuda-nvidiactl"));
  EXPECT_EQ(devices.at("bmas-cuda-nvidiactl"), (StringMap{{"type", "unix-char"},
                                                          {"source", "/dev/bmas-x/oss01/nvidiactl"},
                                                          {"path", "/dev/nvidiactl"},
                                                          {"mode", "0666"}}));
  EXPECT_EQ(devices.at("bmas-cuda-libcuda.so.1"),
            (StringMap{{"type", "disk"},
                       {"source", "/drv/usr/lib/x86_64-linux-gnu/libcuda.so.550.54"},
                       {"path", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
                       {"readonly", "true"}}));
  for (const auto& [name, spec] : devices) EXPECT_TRUE(IsCudaDevice(name)) << name;
  EXPECT_FALSE(IsCudaDevice("bmas-j7-oss01-gpu0"));
  // What the instance has already is not added again.
  EXPECT_EQ(CudaDevices(devices, kCuda).size(), 0u);
}

// A fake driver root: the driver's libraries (a versioned file and its links), a tool, a library
// that is not the driver's, and links that lead out of the root.
class DriverFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = fs::temp_directory_path() / "bmas-driver-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    const fs::path lib = root_ / "usr/lib/x86_64-linux-gnu";
    fs::create_directories(lib);
    fs::create_directories(root_ / "usr/bin");
    for (const char* f : {"libcuda.so.550.54", "libnvidia-ml.so.550.54", "libz.so.1"}) {
      std::ofstream(lib / f) << f;
      chmod((lib / f).c_str(), 0644);
    }
    fs::create_symlink("libcuda.so.550.54", lib / "libcuda.so.1");
    fs::create_symlink("libnvidia-ml.so.550.54", lib / "libnvidia-ml.so.1");
    std::ofstream(root_ / "usr/bin/nvidia-smi") << "#!/bin/sh\n";
    chmod((root_ / "usr/bin/nvidia-smi").c_str(), 0755);
    // Out of the root: a link to another host file, and one through "..".
    std::ofstream(root_.parent_path() / (root_.filename().string() + "-secret")) << "secret";
    fs::create_symlink("/etc/passwd", lib / "libnvidia-cfg.so.1");
    fs::create_symlink("../../../../" + root_.filename().string() + "-secret",
                       lib / "libnvidia-opencl.so.1");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
    fs::remove(root_.parent_path() / (root_.filename().string() + "-secret"), ec);
  }
  fs::path root_;
};

TEST_F(DriverFilesTest, TheDriversFilesAreFoundAtTheirPathsAndNothingOutsideTheRoot) {
  std::vector<std::string> refused;
  const std::vector<DriverFile> files = FindDriverFiles(root_.string(), refused);
  std::vector<std::string> paths, sources;
  for (const DriverFile& f : files) {
    paths.push_back(f.path);
    sources.push_back(f.source);
  }
  if (geteuid() != 0) {
    // Files a user made are not the driver's: only root's are mounted.
    EXPECT_THAT(paths, ::testing::IsEmpty());
    EXPECT_THAT(::testing::PrintToString(refused), HasSubstr("is not owned by root"));
  } else {
    EXPECT_THAT(paths, ElementsAre("/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                                   "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54",
                                   "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                                   "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54",
                                   "/usr/bin/nvidia-smi"));
    // A link is mounted as the file it leads to.
    EXPECT_EQ(sources[0], (root_ / "usr/lib/x86_64-linux-gnu/libcuda.so.550.54").string());
  }
  // Links out of the root are refused, by name.
  const std::string why = ::testing::PrintToString(refused);
  EXPECT_THAT(why, HasSubstr("libnvidia-cfg.so.1: leads out of the driver root, to /etc/passwd"));
  EXPECT_THAT(why, HasSubstr("libnvidia-opencl.so.1: leads out of the driver root"));
  EXPECT_THAT(why, ::testing::Not(HasSubstr("libz")));
  // A file others may write is not the driver's either.
  refused.clear();
  chmod((root_ / "usr/bin/nvidia-smi").c_str(), 0777);
  FindDriverFiles(root_.string(), refused);
  if (geteuid() == 0) {
    EXPECT_THAT(::testing::PrintToString(refused), HasSubstr("nvidia-smi: is writable by others"));
  }
  // No root, no files; a root that is not there says so.
  EXPECT_THAT(FindDriverFiles("", refused), ::testing::IsEmpty());
  refused.clear();
  EXPECT_THAT(FindDriverFiles((root_ / "nope").string(), refused), ::testing::IsEmpty());
  EXPECT_THAT(::testing::PrintToString(refused), HasSubstr("the driver root does not resolve"));
}

TEST_F(DriverFilesTest, ControlDevicesAreThoseThatExistAsCharDevices) {
  std::ofstream(root_ / "nvidiactl") << "not a device";
  EXPECT_THAT(ControlDevices(root_.string()), ::testing::IsEmpty());
  // /dev/null is a character device; named as nvidia-uvm through a link it counts.
  fs::create_symlink("/dev/null", root_ / "nvidia-uvm");
  EXPECT_THAT(ControlDevices(root_.string()), ElementsAre((root_ / "nvidia-uvm").string()));
}

// Against the in-memory LXD: the workspace's first GPU brings CUDA's devices, a second job
// (its own GPU, or a slice of the same one) adds none, and they go with the last job's GPUs,
// by release or by the reconcile pass.
class CudaBindingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lxd_.instances["ws-bob"] = {.name = "ws-bob", .status = InstanceStatus::kRunning};
    lxd_.instances["ws-bob"].devices["home"] = {{"type", "disk"}, {"path", "/home/bob"}};
  }
  std::vector<std::string> Devices() { return NamesOf(lxd_.instances["ws-bob"].devices); }
  size_t CudaCount() {
    size_t n = 0;
    for (const std::string& d : Devices()) n += IsCudaDevice(d) ? 1 : 0;
    return n;
  }
  FakeLxdApi lxd_;
};

TEST_F(CudaBindingTest, TheFirstGpuBringsThemAndTheLastTakesThemAway) {
  auto paths = BindGpus(lxd_, "ws-bob", 7, "oss01", {0}, Source, {}, kCuda);
  ASSERT_TRUE(paths) << paths.error().message;
  EXPECT_THAT(*paths, ElementsAre("/dev/nvidia0")) << "only the GPUs' paths";
  EXPECT_EQ(CudaCount(), 5u);
  // A second job on another GPU: nothing of CUDA's is added or replaced.
  const size_t changes = lxd_.instances["ws-bob"].devices.size();
  ASSERT_TRUE(BindGpus(lxd_, "ws-bob", 8, "oss01", {1}, Source, {}, kCuda));
  EXPECT_EQ(lxd_.instances["ws-bob"].devices.size(), changes + 1);
  // The first job ends: the second still has them.
  EXPECT_EQ(*ReleaseGpus(lxd_, "ws-bob", 7, "oss01"), 1);
  EXPECT_EQ(CudaCount(), 5u);
  // The last one ends: all of CUDA's go, the workspace's own devices stay.
  EXPECT_EQ(*ReleaseGpus(lxd_, "ws-bob", 8, "oss01"), 1);
  EXPECT_THAT(Devices(), ElementsAre("home"));
  // A job whose GPU was unplugged under it (a restarted workspace that could not be fenced
  // again): its release still takes CUDA's devices away.
  ASSERT_TRUE(BindGpus(lxd_, "ws-bob", 9, "oss01", {0}, Source, {}, kCuda));
  ASSERT_EQ(*lxd_.RemoveDevices("ws-bob", {"bmas-j9-oss01-gpu0"}), 1);
  EXPECT_EQ(*ReleaseGpus(lxd_, "ws-bob", 9, "oss01"), 0);
  EXPECT_THAT(Devices(), ElementsAre("home"));
}

TEST_F(CudaBindingTest, SlicesOfOneGpuShareThemAndTheReconcilePassTakesThemWithTheLastJob) {
  const std::vector<CapDevice> slice_a = {{2, "/dev/bmas-x/oss01/nvidia-caps/nvidia-cap21"},
                                          {2, "/dev/bmas-x/oss01/nvidia-caps/nvidia-cap22"}};
  const std::vector<CapDevice> slice_b = {{2, "/dev/bmas-x/oss01/nvidia-caps/nvidia-cap30"},
                                          {2, "/dev/bmas-x/oss01/nvidia-caps/nvidia-cap31"}};
  ASSERT_TRUE(BindGpus(lxd_, "ws-bob", 7, "oss01", {2}, Source, slice_a, kCuda));
  auto second = BindGpus(lxd_, "ws-bob", 8, "oss01", {2}, Source, slice_b, kCuda);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_THAT(*second, ElementsAre("/dev/nvidia2", "/dev/nvidia-caps/nvidia-cap30",
                                   "/dev/nvidia-caps/nvidia-cap31"));
  EXPECT_EQ(CudaCount(), 5u);
  // Job 7 is gone (its epilog did not run): its slice goes, CUDA's devices stay for job 8.
  auto alive = [](int64_t job) -> Result<bool> { return job == 8; };
  auto removed = ReconcileGpus(lxd_, alive);
  ASSERT_TRUE(removed) << removed.error().message;
  EXPECT_EQ(removed->size(), 3u);
  EXPECT_EQ(CudaCount(), 5u);
  EXPECT_EQ(lxd_.instances["ws-bob"].devices.at("bmas-j8-oss01-gpu2").at("path"), "/dev/nvidia2");
  // Job 8 is gone too: nothing of the jobs' or CUDA's is left.
  removed = ReconcileGpus(lxd_, [](int64_t) -> Result<bool> { return false; });
  ASSERT_TRUE(removed) << removed.error().message;
  EXPECT_THAT(Devices(), ElementsAre("home"));
}

}  // namespace
}  // namespace bmas::lxd
