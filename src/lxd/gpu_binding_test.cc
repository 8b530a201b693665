#include "lxd/gpu_binding.h"

#include <gtest/gtest.h>

#include "lxd/fake_lxd_api.h"

namespace bmas::lxd {
namespace {

std::string Source(int g) { return "/dev/bmas-x/oss01/nvidia" + std::to_string(g); }

TEST(GpuBindingTest, DeviceNamesRoundTrip) {
  const JobDevice d{1230001, "gpu-node-7", 3};
  EXPECT_EQ(JobDeviceName(d), "bmas-j1230001-gpu-node-7-gpu3");
  auto back = ParseJobDeviceName(JobDeviceName(d));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->job, 1230001);
  EXPECT_EQ(back->node, "gpu-node-7");
  EXPECT_EQ(back->gpu, 3);
  EXPECT_FALSE(ParseJobDeviceName("home"));
  EXPECT_FALSE(ParseJobDeviceName("bmas-jx-oss01-gpu1"));
  EXPECT_FALSE(ParseJobDeviceName("bmas-j12-oss01"));
}

TEST(GpuBindingTest, GpusAppearAtTheirIndexAsCharDevices) {
  auto devices = GpuDevices({{"home", {{"type", "disk"}, {"path", "/home/a"}}}}, 7, "oss01",
                            {0, 2}, Source);
  ASSERT_EQ(devices.size(), 2u);
  const StringMap& g2 = devices.at("bmas-j7-oss01-gpu2");
  EXPECT_EQ(g2.at("type"), "unix-char");
  EXPECT_EQ(g2.at("source"), "/dev/bmas-x/oss01/nvidia2");
  EXPECT_EQ(g2.at("path"), "/dev/nvidia2");
  EXPECT_EQ(devices.at("bmas-j7-oss01-gpu0").at("path"), "/dev/nvidia0");
}

// Two nodes of one job in one workspace (a local cluster): the second node's GPU 0 moves on.
TEST(GpuBindingTest, AClashingPathMovesToTheNextFreeIndex) {
  auto first = GpuDevices({}, 7, "oss01", {0, 1}, Source);
  auto second = GpuDevices(first, 7, "oss02", {0, 1},
                           [](int g) { return "/dev/bmas-x/oss02/nvidia" + std::to_string(g); });
  EXPECT_EQ(second.at("bmas-j7-oss02-gpu0").at("path"), "/dev/nvidia2");
  EXPECT_EQ(second.at("bmas-j7-oss02-gpu1").at("path"), "/dev/nvidia3");
}

// A job on a MIG slice: its GPU's device node and its slice's two access capabilities, named so
// that release and the reconcile pass find them again.
TEST(GpuBindingTest, ASlicesCapabilitiesComeBesideItsGpu) {
  const JobDevice cap{7, "gpu-cap-node", 2, 300};
  EXPECT_EQ(JobDeviceName(cap), "bmas-j7-gpu-cap-node-gpu2-cap300");
  auto back = ParseJobDeviceName(JobDeviceName(cap));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->node, "gpu-cap-node");
  EXPECT_EQ(back->gpu, 2);
  EXPECT_EQ(back->cap, 300);
  EXPECT_EQ(ParseJobDeviceName("bmas-j7-oss01-gpu2")->cap, -1);
  EXPECT_FALSE(ParseJobDeviceName("bmas-j7-oss01-gpu2-capx"));
  auto devices = GpuDevices({}, 7, "oss02", {2}, Source,
                            {{2, "/dev/bmas-x/oss02/nvidia-caps/nvidia-cap300"},
                             {2, "/dev/bmas-x/oss02/nvidia-caps/nvidia-cap301"}});
  ASSERT_EQ(devices.size(), 3u);
  const StringMap& c = devices.at("bmas-j7-oss02-gpu2-cap301");
  EXPECT_EQ(c.at("type"), "unix-char");
  EXPECT_EQ(c.at("source"), "/dev/bmas-x/oss02/nvidia-caps/nvidia-cap301");
  EXPECT_EQ(c.at("path"), "/dev/nvidia-caps/nvidia-cap301");
  EXPECT_EQ(devices.at("bmas-j7-oss02-gpu2").at("path"), "/dev/nvidia2");
}

TEST(GpuBindingTest, SlurmGpuListsParse) {
  EXPECT_EQ(*ParseGpuList("0,1"), (std::vector<int>{0, 1}));
  EXPECT_EQ(*ParseGpuList("0-2,5"), (std::vector<int>{0, 1, 2, 5}));
  EXPECT_EQ(*ParseGpuList(""), std::vector<int>{});
  EXPECT_FALSE(ParseGpuList("a,b"));
  EXPECT_FALSE(ParseGpuList("3-1"));
}

}  // namespace
}  // namespace bmas::lxd

namespace bmas::lxd {
namespace {

// Against the in-memory LXD: no root, no LXD, milliseconds.
class GpuBindingFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lxd_.instances["ws-alice"] = {.name = "ws-alice", .status = InstanceStatus::kStopped};
    lxd_.instances["ws-bob"] = {.name = "ws-bob", .status = InstanceStatus::kRunning};
  }
  std::vector<std::string> DevicesOf(const std::string& instance) {
    std::vector<std::string> names;
    for (const auto& [name, spec] : lxd_.instances[instance].devices) names.push_back(name);
    return names;
  }

  FakeLxdApi lxd_;
};

TEST_F(GpuBindingFakeTest, BindingStartsAStoppedWorkspaceAndPlugsTheJobsGpusIn) {
  auto paths = BindGpus(lxd_, "ws-alice", 7, "oss01", {0, 2}, Source);
  ASSERT_TRUE(paths) << paths.error().message;
  EXPECT_EQ(*paths, (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidia2"}));
  EXPECT_EQ(lxd_.instances["ws-alice"].status, InstanceStatus::kRunning);
  const StringMap& gpu2 = lxd_.instances["ws-alice"].devices.at("bmas-j7-oss01-gpu2");
  EXPECT_EQ(gpu2.at("source"), "/dev/bmas-x/oss01/nvidia2");
  EXPECT_EQ(gpu2.at("type"), "unix-char");
  EXPECT_FALSE(BindGpus(lxd_, "ws-carol", 7, "oss01", {0}, Source)) << "no such workspace";
}

TEST_F(GpuBindingFakeTest, ReleaseTakesOnlyThatJobsGpusOnThatNode) {
  ASSERT_TRUE(BindGpus(lxd_, "ws-bob", 7, "oss01", {0}, Source));
  ASSERT_TRUE(BindGpus(lxd_, "ws-bob", 7, "oss02", {0}, Source));
  ASSERT_TRUE(BindGpus(lxd_, "ws-bob", 8, "oss01", {1}, Source));
  lxd_.instances["ws-bob"].devices["home"] = {{"type", "disk"}};
  auto released = ReleaseGpus(lxd_, "ws-bob", 7, "oss01");
  ASSERT_TRUE(released) << released.error().message;
  EXPECT_EQ(*released, 1);
  EXPECT_EQ(DevicesOf("ws-bob"),
            (std::vector<std::string>{"bmas-j7-oss02-gpu0", "bmas-j8-oss01-gpu1", "home"}));
  EXPECT_EQ(*ReleaseGpus(lxd_, "ws-bob", 7, "oss01"), 0) << "twice is nothing";
}

// Two jobs of one user on one GPU (shards, or slices of it): the GPU's device node is plugged
// once, where the job's framework looks for it, and the second job refers to it. When the first
// ends, the second's reference becomes the device, at the same path; when both end, it goes.
TEST_F(GpuBindingFakeTest, TwoJobsOnOneGpuShareItsDeviceNodeAndTheLastOneTakesItAway) {
  ASSERT_TRUE(BindGpus(lxd_, "ws-bob", 7, "oss03", {2}, Source));
  auto second = BindGpus(lxd_, "ws-bob", 8, "oss03", {2}, Source);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(*second, (std::vector<std::string>{"/dev/nvidia2"}));
  auto& devices = lxd_.instances["ws-bob"].devices;
  EXPECT_EQ(devices.at("bmas-j8-oss03-gpu2"), (StringMap{{"type", "none"}}));
  EXPECT_EQ(devices.at("bmas-j7-oss03-gpu2").at("path"), "/dev/nvidia2");

  auto released = ReleaseGpus(lxd_, "ws-bob", 7, "oss03");
  ASSERT_TRUE(released) << released.error().message;
  EXPECT_EQ(*released, 1);
  EXPECT_EQ(DevicesOf("ws-bob"), (std::vector<std::string>{"bmas-j8-oss03-gpu2"}));
  EXPECT_EQ(devices.at("bmas-j8-oss03-gpu2").at("path"), "/dev/nvidia2");
  EXPECT_EQ(devices.at("bmas-j8-oss03-gpu2").at("source"), Source(2));
  EXPECT_EQ(*ReleaseGpus(lxd_, "ws-bob", 8, "oss03"), 1);
  EXPECT_TRUE(DevicesOf("ws-bob").empty());
}

TEST_F(GpuBindingFakeTest, ReconcileUnplugsTheGpusOfJobsThatAreGoneOnceTheirProcessesAreEnded) {
  ASSERT_TRUE(BindGpus(lxd_, "ws-bob", 7, "oss01", {0}, Source));     // gone
  ASSERT_TRUE(BindGpus(lxd_, "ws-bob", 8, "oss01", {1}, Source));     // running
  ASSERT_TRUE(BindGpus(lxd_, "ws-alice", 9, "oss01", {2}, Source));   // Slurm does not answer
  ASSERT_TRUE(BindGpus(lxd_, "ws-alice", 10, "oss01", {3}, Source));  // gone, will not end
  auto alive = [](int64_t job) -> Result<bool> {
    if (job == 9) return Error{ErrorCode::kUnavailable, "slurmrestd is down"};
    return job == 8;
  };
  std::vector<std::string> ended;
  auto end = [&](const std::string& i, int64_t job, const std::string& node) {
    ended.push_back(i + " " + std::to_string(job) + " " + node);
    return job != 10;
  };
  auto removed = ReconcileGpus(lxd_, alive, end);
  ASSERT_TRUE(removed) << removed.error().message;
  EXPECT_EQ(*removed, (std::vector<std::string>{"ws-bob/bmas-j7-oss01-gpu0"}));
  EXPECT_EQ(ended, (std::vector<std::string>{"ws-alice 10 oss01", "ws-bob 7 oss01"}));
  EXPECT_EQ(DevicesOf("ws-bob"), (std::vector<std::string>{"bmas-j8-oss01-gpu1"}));
  EXPECT_EQ(DevicesOf("ws-alice"),
            (std::vector<std::string>{"bmas-j10-oss01-gpu3", "bmas-j9-oss01-gpu2"}));
  lxd_.down = true;
  auto down = ReconcileGpus(lxd_, alive);
  ASSERT_FALSE(down);
  EXPECT_EQ(down.error().code, ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace bmas::lxd
