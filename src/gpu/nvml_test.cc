#include "gpu/nvml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace bmas {
namespace {

using ::testing::HasSubstr;

// The real NVML code path against tests/fake_nvml, whose values come from a file.
class NvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = std::filesystem::temp_directory_path() /
            ("bmas_fake_nvml_" + std::to_string(getpid()) + ".txt");
    setenv("BMAS_FAKE_NVML", file_.c_str(), 1);
  }
  void TearDown() override { std::filesystem::remove(file_); }
  void Write(const std::string& text) { std::ofstream(file_) << text; }

  std::filesystem::path file_;
};

TEST_F(NvmlTest, ReadsEveryGpusReadingsThroughTheLibrary) {
  Write("uuid=GPU-aaaa name=NVIDIA_H100_80GB_HBM3 util=35 mem_util=12 mem_used_mib=2048 "
        "mem_total_mib=81559 power_mw=250500 temp=61 mig=0 nvlinks=18 nvlinks_up=17 cc=9.0 "
        "pids=123,456\n"
        "# a second GPU that supports less\n"
        "uuid=GPU-bbbb name=NVIDIA_L4 util=0 mem_used_mib=0 mem_total_mib=23034 cc=8.9\n");
  auto nvml = OpenNvml(BMAS_FAKE_NVML_LIBRARY);
  auto gpus = nvml->Read();
  ASSERT_TRUE(gpus) << gpus.error().message;
  ASSERT_EQ(gpus->size(), 2u);
  const GpuReading& h100 = (*gpus)[0];
  EXPECT_EQ(h100.index, 0);
  EXPECT_EQ(h100.uuid, "GPU-aaaa");
  EXPECT_EQ(h100.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100.util_pct, 35u);
  EXPECT_EQ(h100.mem_util_pct, 12u);
  EXPECT_EQ(h100.mem_used_bytes, 2048ull << 20);
  EXPECT_EQ(h100.mem_total_bytes, 81559ull << 20);
  EXPECT_DOUBLE_EQ(h100.power_w, 250.5);
  EXPECT_EQ(h100.temperature_c, 61u);
  EXPECT_TRUE(h100.mig_capable);
  EXPECT_FALSE(h100.mig_enabled);
  EXPECT_EQ(h100.nvlinks_total, 18);
  EXPECT_EQ(h100.nvlinks_up, 17);
  EXPECT_EQ(h100.cuda_major, 9);
  EXPECT_EQ(h100.pids, (std::vector<pid_t>{123, 456}));
  // What a GPU does not support stays at its default.
  const GpuReading& l4 = (*gpus)[1];
  EXPECT_EQ(l4.index, 1);
  EXPECT_FALSE(l4.mig_capable);
  EXPECT_EQ(l4.nvlinks_total, 0);
  EXPECT_EQ(l4.power_w, 0);
  EXPECT_EQ(l4.cuda_minor, 9);
  EXPECT_TRUE(l4.pids.empty());
  EXPECT_THAT(nvml->Describe(), HasSubstr("NVML 12.555.42-fake (driver 555.42.06-fake)"));

  // Each read is a new sample.
  Write("uuid=GPU-aaaa name=NVIDIA_H100_80GB_HBM3 util=99 mem_total_mib=81559\n");
  gpus = nvml->Read();
  ASSERT_TRUE(gpus) << gpus.error().message;
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_EQ((*gpus)[0].util_pct, 99u);
}

TEST_F(NvmlTest, AGpuInMigModeListsItsMigDevicesWithTheirUuidsInstancesAndProfiles) {
  Write("uuid=GPU-aaaa name=NVIDIA_H100_80GB_HBM3 util=35 mem_used_mib=0 mem_total_mib=81559 "
        "mig=0 cc=9.0\n"
        "uuid=GPU-bbbb name=NVIDIA_H100_80GB_HBM3 util=35 mem_used_mib=700 mem_total_mib=81559 "
        "mig=1 cc=9.0\n"
        "mig uuid=MIG-b-1 gi=1 ci=0 profile=3g.40gb mem_used_mib=512 pids=701,702\n"
        "mig uuid=MIG-b-2 gi=2 ci=0 profile=2g.20gb\n"
        "mig uuid=MIG-b-3 gi=3 ci=0 profile=1g.10gb+me mem_used_mib=188 pids=703\n"
        "mig uuid=MIG-b-4 gi=4 ci=0 profile=1g.10gb\n"
        "uuid=GPU-cccc name=NVIDIA_H200 mem_total_mib=143771 mig=1 cc=9.0\n"
        "mig uuid=MIG-c-1 gi=1 ci=0 profile=7g.141gb\n");
  auto nvml = OpenNvml(BMAS_FAKE_NVML_LIBRARY);
  auto gpus = nvml->Read();
  ASSERT_TRUE(gpus) << gpus.error().message;
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_TRUE((*gpus)[0].mig_devices.empty());  // MIG capable, not in MIG mode
  EXPECT_EQ((*gpus)[0].util_pct, 35u);
  const GpuReading& split = (*gpus)[1];
  EXPECT_TRUE(split.mig_enabled);
  // In MIG mode NVML has no utilization for the GPU: the reading stays 0.
  EXPECT_EQ(split.util_pct, 0u);
  // The GPU lists every MIG device's processes.
  EXPECT_EQ(split.pids, (std::vector<pid_t>{701, 702, 703}));
  ASSERT_EQ(split.mig_devices.size(), 4u);
  const MigDeviceReading& big = split.mig_devices[0];
  EXPECT_EQ(big.index, 0);
  EXPECT_EQ(big.uuid, "MIG-b-1");
  EXPECT_EQ(big.gpu_instance, 1);
  EXPECT_EQ(big.compute_instance, 0);
  EXPECT_EQ(big.profile, "3g.40gb");
  EXPECT_EQ(big.compute_slices, 3);
  EXPECT_EQ(big.mem_used_bytes, 512ull << 20);
  EXPECT_EQ(big.mem_total_bytes, (81559ull / 8 * 4) << 20);
  EXPECT_EQ(big.pids, (std::vector<pid_t>{701, 702}));
  EXPECT_EQ(split.mig_devices[1].profile, "2g.20gb");
  EXPECT_TRUE(split.mig_devices[1].pids.empty());
  // 1g.10gb and 1g.10gb+me have the same slices and memory: the media engines tell them apart.
  EXPECT_EQ(split.mig_devices[2].profile, "1g.10gb+me");
  EXPECT_EQ(split.mig_devices[2].pids, (std::vector<pid_t>{703}));
  EXPECT_EQ(split.mig_devices[3].profile, "1g.10gb");
  EXPECT_EQ(split.mig_devices[3].gpu_instance, 4);
  ASSERT_EQ((*gpus)[2].mig_devices.size(), 1u);
  EXPECT_EQ((*gpus)[2].mig_devices[0].profile, "7g.141gb");
  EXPECT_EQ((*gpus)[2].mig_devices[0].compute_slices, 7);
  // No activity on a first read: GPM measures between two samples.
  EXPECT_FALSE(big.util_known);

  // The next read has each slice's engine activity since the last one (GPM); a slice whose
  // samples NVML refuses has none.
  Write("uuid=GPU-bbbb name=NVIDIA_H100_80GB_HBM3 mem_total_mib=81559 mig=1 cc=9.0\n"
        "mig uuid=MIG-b-1 gi=1 ci=0 profile=3g.40gb util=40\n"
        "mig uuid=MIG-b-2 gi=2 ci=0 profile=2g.20gb util=0\n"
        "mig uuid=MIG-b-3 gi=3 ci=0 profile=1g.10gb\n");
  ASSERT_TRUE(nvml->Read());
  Write("uuid=GPU-bbbb name=NVIDIA_H100_80GB_HBM3 mem_total_mib=81559 mig=1 cc=9.0\n"
        "mig uuid=MIG-b-1 gi=1 ci=0 profile=3g.40gb util=65\n"
        "mig uuid=MIG-b-2 gi=2 ci=0 profile=2g.20gb util=0\n"
        "mig uuid=MIG-b-3 gi=3 ci=0 profile=1g.10gb\n");
  gpus = nvml->Read();
  ASSERT_TRUE(gpus) << gpus.error().message;
  const auto& slices = (*gpus)[0].mig_devices;
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_TRUE(slices[0].util_known);
  EXPECT_DOUBLE_EQ(slices[0].util_pct, 65);
  EXPECT_TRUE(slices[1].util_known);
  EXPECT_DOUBLE_EQ(slices[1].util_pct, 0);
  EXPECT_FALSE(slices[2].util_known);
}

TEST_F(NvmlTest, NoLibraryOrNoDriverIsUnavailableAndSaysWhy) {
  auto missing = OpenNvml("/nonexistent/libnvidia-ml.so.1");
  auto none = missing->Read();
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(none.error().message, HasSubstr("no NVIDIA driver here: "
                                              "/nonexistent/libnvidia-ml.so.1: cannot open"));
  EXPECT_THAT(missing->Describe(), HasSubstr("no NVIDIA driver here"));
  // The library is there but the driver is not loaded (here: no values file).
  unsetenv("BMAS_FAKE_NVML");
  auto unloaded = OpenNvml(BMAS_FAKE_NVML_LIBRARY)->Read();
  ASSERT_FALSE(unloaded);
  EXPECT_THAT(unloaded.error().message, HasSubstr("nvmlInit failed: Driver Not Loaded (NVML error 9)"));
}

}  // namespace
}  // namespace bmas
