#include "lxd/gpu_binding.h"

#include <gtest/gtest.h>

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
  auto second = GpuDevices(first, 7, "oss02", {0, 1}, Source);
  EXPECT_EQ(second.at("bmas-j7-oss02-gpu0").at("path"), "/dev/nvidia2");
  EXPECT_EQ(second.at("bmas-j7-oss02-gpu1").at("path"), "/dev/nvidia3");
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
