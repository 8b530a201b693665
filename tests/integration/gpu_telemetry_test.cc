// The agent's GPU telemetry through the real NVML code path, against the fake libnvidia-ml
// (tests/fake_nvml): its /metrics carries each GPU's readings as the DCGM exporter names them,
// labelled with the Slurm job and user whose process holds the GPU. Needs root, LXD and Slurm
// (the job runs in a workspace), like the workspace tests.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "lxd_workspace_fixture.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;

class GpuTelemetryTest : public WorkspaceJobsTest {
 protected:
  void SetUp() override {
    // The fake reads the GPUs' values from this file, named in the agent's environment.
    values_ = "/tmp/bmas-fake-nvml-" + std::to_string(getpid()) + ".txt";
    Write("");
    setenv("BMAS_FAKE_NVML", values_.c_str(), 1);
    agent_flags_ = {"--nvml-library", BMAS_FAKE_NVML_LIBRARY, "--telemetry-interval", "0.2"};
    WorkspaceJobsTest::SetUp();
  }
  void TearDown() override {
    WorkspaceJobsTest::TearDown();
    unsetenv("BMAS_FAKE_NVML");
    std::remove(values_.c_str());
  }
  void Write(const std::string& text) { std::ofstream(values_) << text; }

  std::string values_;
};

TEST_F(GpuTelemetryTest, AJobsGpuMetricsCarryItsJobAndUser) {
  CommandOutput run = InHome("bmastest1", {"run", "--gpus", "1", "--", "sleep", "3007"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string job = run.out.substr(0, run.out.find('\n'));
  ASSERT_TRUE(Eventually([] { return !HostProcesses("sleep 3007").empty(); },
                         std::chrono::seconds(30)));
  const pid_t pid = HostProcesses("sleep 3007").front();
  // GPU 0 runs the job's process; GPU 1 runs nothing.
  Write("uuid=GPU-fake-0 name=NVIDIA_H100_80GB_HBM3 util=0 mem_used_mib=512 mem_total_mib=81559 "
        "power_mw=72000 temp=33 mig=0 nvlinks=18 nvlinks_up=18 cc=9.0 pids=" +
        std::to_string(pid) +
        "\n"
        "uuid=GPU-fake-1 name=NVIDIA_H100_80GB_HBM3 util=0 mem_used_mib=0 mem_total_mib=81559 "
        "power_mw=70000 temp=31 mig=0 nvlinks=18 nvlinks_up=18 cc=9.0\n");
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string held = fmt::format(
      "DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",UUID=\"GPU-fake-0\",modelName=\"NVIDIA H100 80GB HBM3\","
      "Hostname=\"{}\",hpc_job=\"{}\",user=\"bmastest1\"}} 0\n",
      host, job);
  std::string metrics;
  EXPECT_TRUE(Eventually(
      [&] {
        metrics = AgentMetrics();
        return metrics.find(held) != std::string::npos;
      },
      std::chrono::seconds(20)))
      << metrics;
  EXPECT_THAT(metrics, HasSubstr("bmas_agent_gpu_telemetry_up 1\n"));
  EXPECT_THAT(metrics, HasSubstr("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-fake-1\""));
  EXPECT_THAT(metrics, HasSubstr("hpc_job=\"\",user=\"\"} 0\n"));
  EXPECT_THAT(metrics, HasSubstr(fmt::format("hpc_job=\"{}\",user=\"bmastest1\"}} 72\n", job)));
  ASSERT_EQ(InHome("bmastest1", {"cancel", job}).exit_code, 0);

  // The driver goes away: the agent says so, and serves on.
  std::remove(values_.c_str());
  EXPECT_TRUE(Eventually([&] { return AgentMetrics().find("bmas_agent_gpu_telemetry_up 0") !=
                                      std::string::npos; },
                         std::chrono::seconds(20)));
  EXPECT_THAT(agent_->StderrText(), HasSubstr("GPU telemetry"));
}

}  // namespace
}  // namespace bmas::testing
