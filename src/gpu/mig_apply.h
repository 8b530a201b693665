#pragma once

// Puts one GPU into a MIG layout through NVML, as `nvidia-smi mig -dci; -dgi; -cgi ... -C`
// would: every compute and GPU instance of the GPU destroyed, MIG mode set, then one GPU
// instance per slice at its placement with one compute instance spanning it. The GPU must hold
// no process: NVML refuses to destroy an instance in use, and bmas checks first. Loads the
// library with dlopen, as gpu/nvml.h does.

#include <string>
#include <vector>

#include "common/result.h"

namespace bmas {

// One GPU instance to create: its NVML_GPU_INSTANCE_PROFILE_* (core/mig.h's MigProfile), the
// memory slice it starts at and its size, and its compute slices.
struct MigInstanceSpec {
  unsigned nvml_profile = 0;
  unsigned start = 0;
  unsigned memory_slices = 0;
  unsigned compute_slices = 0;
};

struct MigApplyResult {
  bool changed = false;                 // the GPU was touched (instances destroyed or made)
  std::vector<unsigned> gpu_instances;  // the new instances' ids, in the layout's order
};

// GPU `index` of the NVML in `library` ("" = the driver's) in `layout` (empty: MIG off, the
// whole GPU). An error says which call failed and why; with `changed` set in `result`, the GPU
// was left part-way (its old instances gone).
Result<MigApplyResult> ApplyMigLayout(const std::string& library, unsigned index,
                                      const std::vector<MigInstanceSpec>& layout);

}  // namespace bmas
