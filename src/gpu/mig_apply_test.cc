#include "gpu/mig_apply.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gpu/nvml.h"

namespace bmas {
namespace {

using ::testing::HasSubstr;

// NVML's own layout calls against tests/fake_nvml, read back through the real NVML reader.
class MigApplyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = std::filesystem::temp_directory_path() /
            ("bmas_fake_nvml_apply_" + std::to_string(getpid()) + ".txt");
    setenv("BMAS_FAKE_NVML", file_.c_str(), 1);
  }
  void TearDown() override { std::filesystem::remove(file_); }
  void Write(const std::string& text) { std::ofstream(file_) << text; }
  std::vector<GpuReading> Read() {
    auto gpus = OpenNvml(BMAS_FAKE_NVML_LIBRARY)->Read();
    EXPECT_TRUE(gpus) << gpus.error().message;
    return gpus ? *gpus : std::vector<GpuReading>{};
  }

  std::filesystem::path file_;
};

constexpr char kTwoH100s[] =
    "uuid=GPU-aaaa name=NVIDIA_H100_80GB_HBM3 util=0 mem_used_mib=0 mem_total_mib=81559 mig=0 "
    "cc=9.0\n"
    "uuid=GPU-bbbb name=NVIDIA_H100_80GB_HBM3 util=50 mem_used_mib=0 mem_total_mib=81559 mig=0 "
    "cc=9.0 pids=4242\n";

// 3g.40gb at 0, 2g.20gb at 4, two 1g.10gb at 6 and 7 (NVML_GPU_INSTANCE_PROFILE_3_SLICE is 2,
// 2_SLICE 1, 1_SLICE 0).
const std::vector<MigInstanceSpec> kMixed = {
    {2, 0, 4, 3}, {1, 4, 2, 2}, {0, 6, 1, 1}, {0, 7, 1, 1}};

TEST_F(MigApplyTest, AWholeGpuIsSplitThenSplitOtherwiseThenMadeWholeAgain) {
  Write(kTwoH100s);
  auto applied = ApplyMigLayout(BMAS_FAKE_NVML_LIBRARY, 0, kMixed);
  ASSERT_TRUE(applied) << applied.error().message;
  EXPECT_TRUE(applied->changed);
  EXPECT_EQ(applied->gpu_instances, (std::vector<unsigned>{1, 2, 3, 4}));
  std::vector<GpuReading> gpus = Read();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_TRUE(gpus[0].mig_enabled);
  ASSERT_EQ(gpus[0].mig_devices.size(), 4u);
  EXPECT_EQ(gpus[0].mig_devices[0].profile, "3g.40gb");
  EXPECT_EQ(gpus[0].mig_devices[1].profile, "2g.20gb");
  EXPECT_EQ(gpus[0].mig_devices[3].profile, "1g.10gb");
  EXPECT_EQ(gpus[0].mig_devices[3].gpu_instance, 4);
  EXPECT_FALSE(gpus[1].mig_enabled);  // the other GPU is untouched

  // Seven 1g.10gb: the old instances go first.
  std::vector<MigInstanceSpec> ones;
  for (unsigned s = 0; s < 7; ++s) ones.push_back({0, s, 1, 1});
  applied = ApplyMigLayout(BMAS_FAKE_NVML_LIBRARY, 0, ones);
  ASSERT_TRUE(applied) << applied.error().message;
  gpus = Read();
  ASSERT_EQ(gpus[0].mig_devices.size(), 7u);
  for (const MigDeviceReading& m : gpus[0].mig_devices) EXPECT_EQ(m.profile, "1g.10gb");

  applied = ApplyMigLayout(BMAS_FAKE_NVML_LIBRARY, 0, {});
  ASSERT_TRUE(applied) << applied.error().message;
  gpus = Read();
  EXPECT_FALSE(gpus[0].mig_enabled);
  EXPECT_TRUE(gpus[0].mig_devices.empty());
}

TEST_F(MigApplyTest, AGpuWithAProcessIsRefusedAndLeftAsItWas) {
  Write(kTwoH100s);
  auto applied = ApplyMigLayout(BMAS_FAKE_NVML_LIBRARY, 1, kMixed);
  ASSERT_FALSE(applied);
  EXPECT_EQ(applied.error().code, ErrorCode::kAlreadyExists);
  EXPECT_THAT(applied.error().message,
              HasSubstr("GPU 1 has 1 process(es) (pid 4242): a GPU in use is never re-partitioned"));
  EXPECT_FALSE(Read()[1].mig_enabled);
}

TEST_F(MigApplyTest, APlacementTheDriverRefusesSaysWhichCallAndLeavesTheGpuPartWay) {
  Write(kTwoH100s);
  // Two 3g.40gb both at 0 overlap.
  auto applied = ApplyMigLayout(BMAS_FAKE_NVML_LIBRARY, 0, {{2, 0, 4, 3}, {2, 0, 4, 3}});
  ASSERT_FALSE(applied);
  EXPECT_THAT(applied.error().message,
              HasSubstr("nvmlDeviceCreateGpuInstanceWithPlacement(MIG 3g.40gb at 0) failed"));
  EXPECT_THAT(applied.error().message, HasSubstr("left part-way"));
  auto missing = ApplyMigLayout("/nonexistent/libnvidia-ml.so.1", 0, kMixed);
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, HasSubstr("no NVIDIA driver here"));
}

}  // namespace
}  // namespace bmas
