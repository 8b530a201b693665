#include "gpu/dcgm_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

TEST(DcgmMetricsTest, AGpuInMigModeReportsMemoryAndProcessesPerMigDeviceAsDcgmDoes) {
  GpuReading g;
  g.index = 2;
  g.uuid = "GPU-c";
  g.name = "NVIDIA H100 80GB HBM3";
  g.power_w = 120;
  g.mig_capable = g.mig_enabled = true;
  g.pids = {7};
  MigDeviceReading big{0, "MIG-c-1", 1, 0, "3g.40gb", 3, 512ull << 20, 40768ull << 20, {7}};
  MigDeviceReading small{1, "MIG-c-2", 2, 0, "1g.10gb", 1, 0, 10192ull << 20, {}, true, 25};
  g.mig_devices = {big, small};
  const std::string text =
      RenderDcgmMetrics({g}, "oss02", {{2, {42, "alice"}}}, {{{2, 1}, {42, "alice"}}});
  // No utilization in MIG mode: NVML has none.
  EXPECT_THAT(text, Not(HasSubstr("DCGM_FI_DEV_GPU_UTIL{")));
  // The GPU's own readings once, without instance labels.
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_POWER_USAGE{gpu=\"2\",UUID=\"GPU-c\",modelName=\"NVIDIA "
                              "H100 80GB HBM3\",Hostname=\"oss02\",hpc_job=\"42\",user=\"alice\"} "
                              "120\n"));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_MIG_MODE{gpu=\"2\""));
  // Memory and processes per MIG device, with DCGM's labels and each one's own holder.
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_FB_USED{gpu=\"2\",UUID=\"GPU-c\",modelName=\"NVIDIA "
                              "H100 80GB HBM3\",Hostname=\"oss02\",GPU_I_ID=\"1\","
                              "GPU_I_PROFILE=\"3g.40gb\",hpc_job=\"42\",user=\"alice\"} 512\n"));
  EXPECT_THAT(text, HasSubstr("GPU_I_ID=\"2\",GPU_I_PROFILE=\"1g.10gb\",hpc_job=\"\",user=\"\"} "
                              "10192\n"));
  EXPECT_THAT(text, HasSubstr("bmas_gpu_processes{gpu=\"2\",UUID=\"GPU-c\",modelName=\"NVIDIA "
                              "H100 80GB HBM3\",Hostname=\"oss02\",GPU_I_ID=\"1\","
                              "GPU_I_PROFILE=\"3g.40gb\",hpc_job=\"42\",user=\"alice\"} 1\n"));
  // The slice's engine activity where GPM gave it, as DCGM's profiling field (a ratio).
  EXPECT_THAT(text, HasSubstr("DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"2\",UUID=\"GPU-c\",modelName="
                              "\"NVIDIA H100 80GB HBM3\",Hostname=\"oss02\",GPU_I_ID=\"2\","
                              "GPU_I_PROFILE=\"1g.10gb\",hpc_job=\"\",user=\"\"} 0.25\n"));
  EXPECT_THAT(text, Not(HasSubstr("GR_ENGINE_ACTIVE{gpu=\"2\",UUID=\"GPU-c\",modelName=\"NVIDIA "
                                  "H100 80GB HBM3\",Hostname=\"oss02\",GPU_I_ID=\"1\"")));
  const std::string json = RenderGpuJson({g}, "oss02", {}, {{{2, 2}, {43, "bob"}}});
  EXPECT_THAT(json, HasSubstr("\"mig\":[{\"gpu_instance\":1,\"profile\":\"3g.40gb\","
                              "\"uuid\":\"MIG-c-1\",\"mem_used_mb\":512,\"mem_total_mb\":40768,"
                              "\"util\":null,\"job_id\":0,\"user\":\"\"},{\"gpu_instance\":2"));
  EXPECT_THAT(json, HasSubstr("\"job_id\":43,\"user\":\"bob\"}]"));
}

TEST(DcgmMetricsTest, LabelValuesAreEscaped) {
  GpuReading g;
  g.name = "odd \"name\"\n";
  const std::string text = RenderDcgmMetrics({g}, "n", {});
  EXPECT_THAT(text, HasSubstr("modelName=\"odd \\\"name\\\"\\n\""));
}

}  // namespace
}  // namespace bmas
