#include "gpu/dcgm_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas {
namespace {

using ::testing::HasSubstr;

TEST(DcgmMetricsTest, EachGpuIsLabelledWithItsNodeJobAndUser) {
  GpuReading held;
  held.index = 0;
  held.uuid = "GPU-a";
  held.name = "NVIDIA H100 80GB HBM3";
  held.util_pct = 35;
  held.mem_used_bytes = 2048ull << 20;
  held.mem_total_bytes = 81920ull << 20;
  held.power_w = 250.5;
  GpuReading idle = held;
  idle.index = 1;
  idle.uuid = "GPU-b";
  idle.util_pct = 0;
  const std::string text = RenderDcgmMetrics({held, idle}, "oss01", {{0, {42, "alice"}}});
  EXPECT_THAT(text, HasSubstr("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\",modelName=\"NVIDIA "
                              "H100 80GB HBM3\",Hostname=\"oss01\",hpc_job=\"42\",user=\"alice\"} "
                              "35\n"));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\",modelName=\"NVIDIA "
                              "H100 80GB HBM3\",Hostname=\"oss01\",hpc_job=\"\",user=\"\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_FB_USED{gpu=\"0\""));
  EXPECT_THAT(text, HasSubstr("user=\"alice\"} 2048\n"));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_FB_FREE{gpu=\"0\""));
  EXPECT_THAT(text, HasSubstr("user=\"alice\"} 79872\n"));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\""));
  EXPECT_THAT(text, HasSubstr("user=\"alice\"} 250.5\n"));
}

TEST(DcgmMetricsTest, LabelValuesAreEscaped) {
  GpuReading g;
  g.name = "odd \"name\"\n";
  const std::string text = RenderDcgmMetrics({g}, "n", {});
  EXPECT_THAT(text, HasSubstr("modelName=\"odd \\\"name\\\"\\n\""));
}

}  // namespace
}  // namespace bmas
