#pragma once

// The agent's GPU telemetry: reads this node's GPUs every interval through a GpuTelemetry
// (NVML), finds which job and user hold each one from the processes on it, and keeps the
// DCGM-named metrics for the agent's /metrics. A node without a driver says so once and serves
// bmas_agent_gpu_telemetry_up 0.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/env.h"
#include "gpu/dcgm_metrics.h"
#include "gpu/gpu_telemetry.h"

namespace bmas {

class GpuSampler {
 public:
  // Called after each good sample, with who holds each GPU and MIG slice, outside the
  // sampler's lock.
  using SampleHook = std::function<void(const std::vector<GpuReading>&,
                                        const std::map<int, GpuHolder>&, const MigHolders&)>;

  GpuSampler(Env& env, std::shared_ptr<GpuTelemetry> gpus, std::string node,
             std::chrono::milliseconds interval, SampleHook on_sample = {});
  ~GpuSampler();  // stops

  void Start();
  void Stop();

  // The exposition text of the last sample (and whether there was one).
  std::string Metrics();
  // The last good sample as JSON (gpu/dcgm_metrics.h RenderGpuJson), with "up" and "error".
  std::string Json();

 private:
  void Loop();
  void SampleOnce();

  Env& env_;
  std::shared_ptr<GpuTelemetry> gpus_;
  const std::string node_;
  const SampleHook on_sample_;
  const std::chrono::milliseconds interval_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string text_;        // DCGM metrics of the last good sample
  std::string json_ = "{\"gpus\":[]}";  // the same as JSON
  bool up_ = false;         // the last sample succeeded
  std::string last_error_;  // logged when it changes
  double sample_seconds_ = 0;  // how long the last sample took (its cost)
};

}  // namespace bmas
