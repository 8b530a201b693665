// The agent's GPU telemetry, per sample: reading 8 GPUs through the NVML code path (here the
// fake libnvidia-ml of the tests, so this is bmas's own cost, not the driver's), finding each
// GPU's job from its processes' cgroups, and rendering the DCGM-named metrics.

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gpu/dcgm_metrics.h"
#include "gpu/gpu_holders.h"
#include "gpu/nvml.h"

namespace bmas {
namespace {

// Eight H100s, each with this process on it (so the holder lookup reads a real cgroup file).
std::string EightGpus() {
  std::string text;
  for (int i = 0; i < 8; ++i) {
    text += "uuid=GPU-" + std::to_string(i) +
            " name=NVIDIA_H100_80GB_HBM3 util=35 mem_util=10 mem_used_mib=2048 "
            "mem_total_mib=81559 power_mw=250000 temp=61 mig=0 nvlinks=18 nvlinks_up=18 cc=9.0 "
            "pids=" + std::to_string(getpid()) + "\n";
  }
  return text;
}

std::unique_ptr<GpuTelemetry> FakeEightGpus() {
  static const std::string path = [] {
    const std::string p = std::filesystem::temp_directory_path() / "bmas_telemetry_bench.txt";
    std::ofstream(p) << EightGpus();
    return p;
  }();
  setenv("BMAS_FAKE_NVML", path.c_str(), 1);
  return OpenNvml(BMAS_FAKE_NVML_LIBRARY);
}

std::optional<GpuHolder> HolderFromProc(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (auto job = JobOfCgroup(text)) return GpuHolder{*job, "user"};
  return std::nullopt;
}

void BM_NvmlRead8Gpus(benchmark::State& state) {
  auto nvml = FakeEightGpus();
  for (auto _ : state) benchmark::DoNotOptimize(nvml->Read());
}
BENCHMARK(BM_NvmlRead8Gpus)->Unit(benchmark::kMicrosecond);

void BM_WholeSample8Gpus(benchmark::State& state) {
  auto nvml = FakeEightGpus();
  for (auto _ : state) {
    auto gpus = nvml->Read();
    benchmark::DoNotOptimize(
        RenderDcgmMetrics(*gpus, "node01", HoldersOf(*gpus, HolderFromProc)));
  }
}
BENCHMARK(BM_WholeSample8Gpus)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace bmas

BENCHMARK_MAIN();
