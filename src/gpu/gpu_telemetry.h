#pragma once

// What a node's GPUs report: the seam between bmas and NVML. The real reader (nvml.h) loads
// libnvidia-ml with dlopen at run time, so bmas builds and runs where there is no driver; tests
// point it at a fake library that reads its values from a file.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace bmas {

// One MIG device of a GPU in MIG mode: a GPU instance and its compute instance, as NVML's MIG
// device handles report them. NVML's utilization call has nothing for a MIG device (nor for a
// GPU in MIG mode); a slice's activity comes from GPU performance monitoring instead
// (nvmlGpmMigSampleGet, Hopper and later): the share of time its graphics or compute engine
// was active between two reads, DCGM's DCGM_FI_PROF_GR_ENGINE_ACTIVE.
struct MigDeviceReading {
  int index = 0;             // nvmlDeviceGetMigDeviceHandleByIndex's index on its GPU
  std::string uuid;          // "MIG-...": what CUDA_VISIBLE_DEVICES takes
  int gpu_instance = 0;      // DCGM's GPU_I_ID
  int compute_instance = 0;
  std::string profile;       // "3g.40gb", DCGM's GPU_I_PROFILE; "" when NVML did not say
  int compute_slices = 0;    // of the GPU's 7
  uint64_t mem_used_bytes = 0;
  uint64_t mem_total_bytes = 0;
  std::vector<pid_t> pids;  // processes with a compute context on it
  bool util_known = false;  // GPM answered, and this is not the first read of the slice
  double util_pct = 0;      // its engine's active time since the last read
};

struct GpuReading {
  int index = 0;
  std::string uuid;  // "GPU-..."
  std::string name;  // "NVIDIA H100 80GB HBM3"
  unsigned util_pct = 0;      // SM utilisation over the driver's last sample period
  unsigned mem_util_pct = 0;  // memory controller utilisation
  uint64_t mem_used_bytes = 0;
  uint64_t mem_total_bytes = 0;
  double power_w = 0;
  unsigned temperature_c = 0;
  bool mig_capable = false;
  bool mig_enabled = false;
  int nvlinks_up = 0;   // NVLink links whose state is active
  int nvlinks_total = 0;  // links the GPU has (those NVML answered for)
  int cuda_major = 0;     // compute capability: 8 Ampere, 9 Hopper; 8.9 Ada is (8, 9)
  int cuda_minor = 0;
  std::vector<pid_t> pids;  // processes with a compute context on it (its MIG devices' too)
  std::vector<MigDeviceReading> mig_devices;  // in MIG mode, by index
};

class GpuTelemetry {
 public:
  virtual ~GpuTelemetry() = default;
  // Every GPU of this node, in index order. kUnavailable (with why) where there is no driver.
  virtual Result<std::vector<GpuReading>> Read() = 0;
  // "NVML 12.555.42 (driver 555.42.06)", or why there is none.
  virtual std::string Describe() = 0;
};

}  // namespace bmas
