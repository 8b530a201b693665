#pragma once

// GPU readings as Prometheus metrics named as NVIDIA's DCGM exporter names them, so that
// dashboards and alerts written for it work on bmas's agents unchanged. Labels: gpu, UUID,
// modelName and Hostname as DCGM's; hpc_job (DCGM's label for its HPC job mapping; not `job`,
// which Prometheus keeps for the scrape job) and user for who holds the GPU, "" when no one.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpu/gpu_telemetry.h"

namespace bmas {

// Who holds a GPU: a Slurm job and its user.
struct GpuHolder {
  int64_t job = 0;
  std::string user;
};

// The exposition text for `gpus` of node `node`; `holders` by GPU index.
std::string RenderDcgmMetrics(const std::vector<GpuReading>& gpus, const std::string& node,
                              const std::map<int, GpuHolder>& holders);

// The same readings as JSON for the dashboard (the agent's /gpus): {"node", "gpus": [{"index",
// "uuid", "name", "util", "mem_used_mb", "mem_total_mb", "power_w", "temperature_c", "job_id",
// "user"}]}; job_id 0 and user "" for a GPU no job holds.
std::string RenderGpuJson(const std::vector<GpuReading>& gpus, const std::string& node,
                          const std::map<int, GpuHolder>& holders);

}  // namespace bmas
