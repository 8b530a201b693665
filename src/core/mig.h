#pragma once

// MIG (Multi-Instance GPU): the GPU instance profiles of the GPU models bmas knows, and where
// each may sit on the GPU, so that a layout in the inventory is checked before any node sees
// it. Pure: tables and a search, no NVML.
//
// The tables follow NVIDIA's "Supported MIG Profiles" (MIG User Guide,
// docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html): for A100
// 40GB, A100 80GB, H100 80GB and H200 141GB, each profile's fraction of compute (sevenths:
// the GPU has 7 compute slices) and of memory (eighths: 8 memory slices), and how many
// instances of it one GPU holds. The placements are the guide's placement diagrams, which
// NVML reports as nvmlDeviceGetGpuInstancePossiblePlacements_v2 (and `nvidia-smi mig -lgipp`)
// in memory slices: a 1-slice profile starts at slice 0..6, a 2-slice one at 0, 2, 4 (1g.20gb
// on an 80GB part: 0, 2, 4, 6), a 4-slice one at 0 or 4 (4g only at 0), the whole GPU at 0.
// One rule is not in the placements: the guide's list of valid combinations never puts a 4g
// beside a 3g.

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "core/cluster.h"

namespace bmas {

inline constexpr int kMigComputeSlices = 7;
inline constexpr int kMigMemorySlices = 8;

struct MigProfile {
  std::string_view name;  // "3g.40gb": compute slices, then memory; "+me": media engines
  int compute_slices = 0;
  int memory_slices = 0;
  int max_instances = 0;  // on one GPU
  // Memory slices where an instance of this profile may start.
  std::span<const int> starts;
  // NVML's NVML_GPU_INSTANCE_PROFILE_* for it (nvmlDeviceGetGpuInstanceProfileInfo).
  unsigned nvml_profile = 0;
};

struct MigGpuModel {
  std::string_view name;    // "H100 80GB"
  std::string_view family;  // "h100": what a GRES type names it by
  int memory_gb = 0;
  std::span<const MigProfile> profiles;
};

// Every model bmas has tables for.
std::span<const MigGpuModel> MigGpuModels();

// The model of GPUs with GRES `type` (which names the family: "h100", "h100_sxm", "a100") and
// `memory_gb`, or an error that lists the models bmas knows.
Result<const MigGpuModel*> FindMigGpuModel(std::string_view type, int memory_gb);

// Whether `name` reads as a MIG profile ("1g.10gb", "3g.40gb", "1g.18gb+me"), not a GPU
// model's GRES type ("h100").
bool IsMigProfileName(std::string_view name);

// `name`'s profile on `model`, or nullptr.
const MigProfile* FindMigProfile(const MigGpuModel& model, std::string_view name);

// One GPU instance of a layout: its profile and the memory slice it starts at.
struct MigPlacement {
  const MigProfile* profile = nullptr;
  int start = 0;
};

// Places `layout` (profile names, in any order) on one GPU of `model`: every instance gets a
// start from its profile's placements, no two overlap, and compute and instance counts stay
// within the GPU's. The placements come back in the layout's order. The error says why not,
// for example "3g.40gb + 4g.40gb + 1g.10gb needs 8 compute slices; an H100 80GB has 7".
Result<std::vector<MigPlacement>> PlaceMigLayout(const MigGpuModel& model,
                                                 const std::vector<std::string>& layout);

// One MIG instance of a node, as Slurm schedules it and a job gets it: a GPU instance with one
// compute instance that spans it (what `nvidia-smi mig -cgi ... -C` makes).
struct MigSlice {
  int gpu = 0;                // the GPU's index on its host (a GPU node's: its first_index)
  int gpu_instance = 0;       // its GPU instance id: 1, 2, ... in the layout's order
  int compute_instance = 0;   // 0: the one compute instance
  MigPlacement placement;
};

// Every MIG slice of a node's GPUs, GPU by GPU, each in its layout's order.
// REQUIRES: ValidateCluster accepted the node.
std::vector<MigSlice> MigSlicesOf(const GpuSpec& gpus);

// The minors of the access capabilities a MIG instance's user needs, the character devices
// /dev/nvidia-caps/nvidia-cap<minor>, as the driver numbers them in
// /proc/driver/nvidia-caps/mig-minors: "config" 1, "monitor" 2, then per GPU 15 GPU instances
// of 9 minors each, the GPU instance's "gpuG/giI/access" followed by its 8 compute instances'
// "gpuG/giI/ciC/access" (so gpu0/gi2/access is 21 and gpu0/gi2/ci0/access 22, as in Slurm's
// gres.conf example).
int MigGpuInstanceCapMinor(int gpu, int gpu_instance);
int MigComputeInstanceCapMinor(int gpu, int gpu_instance, int compute_instance);

}  // namespace bmas
