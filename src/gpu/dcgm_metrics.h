#pragma once

// GPU readings as Prometheus metrics named as NVIDIA's DCGM exporter names them, so that
// dashboards and alerts written for it work on bmas's agents unchanged. Labels: gpu, UUID,
// modelName and Hostname as DCGM's; hpc_job (DCGM's label for its HPC job mapping; not `job`,
// which Prometheus keeps for the scrape job) and user for who holds the GPU, "" when no one.
//
// A GPU in MIG mode is reported as DCGM reports it: its power, temperature, MIG mode and links
// once for the GPU, its memory and processes once per MIG device, labelled with DCGM's
// GPU_I_ID (the GPU instance) and GPU_I_PROFILE ("1g.10gb"), and no utilization (NVML has none
// in MIG mode; DCGM's profiling fields would need DCGM itself).

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gpu_telemetry.h"

namespace bmas {

// Who holds a GPU: a Slurm job and its user.
struct GpuHolder {
  int64_t job = 0;
  std::string user;
};

// Who holds each MIG device, by (GPU index, GPU instance id).
using MigHolders = std::map<std::pair<int, int>, GpuHolder>;

// The exposition text for `gpus` of node `node`; `holders` by GPU index, `mig_holders` by MIG
// device.
std::string RenderDcgmMetrics(const std::vector<GpuReading>& gpus, const std::string& node,
                              const std::map<int, GpuHolder>& holders,
                              const MigHolders& mig_holders = {});

// The same readings as JSON for the dashboard (the agent's /gpus): {"node", "gpus": [{"index",
// "uuid", "name", "util", "mem_used_mb", "mem_total_mb", "power_w", "temperature_c", "job_id",
// "user", "mig": [{"gpu_instance", "profile", "uuid", "mem_used_mb", "mem_total_mb", "util"
// (null until GPM gave it), "job_id", "user"}]}]}; job_id 0 and user "" for a GPU or MIG device no job holds, "mig" empty outside
// MIG mode.
std::string RenderGpuJson(const std::vector<GpuReading>& gpus, const std::string& node,
                          const std::map<int, GpuHolder>& holders,
                          const MigHolders& mig_holders = {});

}  // namespace bmas
