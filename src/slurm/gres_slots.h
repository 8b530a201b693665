#pragma once

// Which GPU or MIG slice each of a node's gpu gres indexes is. Slurm 22.05 numbers a node's
// gres devices (what SLURM_JOB_GPUS and SLURM_STEP_GPUS list) type by type, the types in the
// order they first appear in gres.conf and each type's lines in their order: observed with
// real Slurm, where GPU 3's lines 2g, 2g, 2g, 1g after GPU 2's 3g, 2g, 1g, 1g made the 2g
// slices 3-6 and the 1g ones 7-9 (in file order the 1g of GPU 2 would be 4 and 5). Strictly,
// the types go in the order of the node's Gres= in slurm.conf (seen when the two differed), and
// bmas writes both in one order (slurm_config.h's NodeGres). A shared GPU's shards carry its
// gpu index (a shard job's SLURM_JOB_GPUS names its GPU's). bmas's gres.conf gives a whole GPU
// its /dev/nvidiaN and a slice its GPU's file and its GPU instance's access capability
// (slurm_config.h). The task prolog reads them back to name a job's slices by MIG UUID in
// CUDA_VISIBLE_DEVICES, as NVIDIA's container runtime does; Slurm itself does that only when
// it detects GPUs through NVML (AutoDetect=nvml), which bmas's gres.conf does not use. Pure.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "gpu/gpu_telemetry.h"

namespace bmas::slurm {

struct GresSlot {
  int gpu = -1;           // the GPU's index on the node (/dev/nvidia<gpu>)
  int gpu_instance = -1;  // the slice's GPU instance id; -1 for a whole GPU
  std::string gpu_file;   // the GPU's device node, as gres.conf names it
  std::vector<std::string> cap_files;  // a slice's access capabilities' device nodes
  std::string type;                    // its Type= ("h100", "1g.10gb"; "" when untyped)
};

// The gpu gres lines of `node` in `gres_conf` (gres.conf's text), in Slurm's index order. A line
// whose files name no /dev/...nvidiaN is InvalidArgument, with its line number.
Result<std::vector<GresSlot>> GpuGresSlots(std::string_view gres_conf, std::string_view node);

// The gpu gres lines of `node` in the gres.conf beside `slurm_conf` ("" = $SLURM_CONF, else
// /etc/slurm/slurm.conf); empty when that file cannot be read, or lists no GPU of the node
// (AutoDetect, or a gres.conf kept elsewhere): then a gres index is taken as the GPU's number.
std::vector<GresSlot> ReadNodeGresSlots(const std::string& node, const std::string& slurm_conf = "");

// What the gres indexes `allocated` (SLURM_JOB_GPUS) give a job on the node: its GPUs' numbers,
// once each and in order (a slice's GPU too), and its slices' access capabilities as (GPU,
// device node). NotFound for an index the node's gres.conf lacks.
struct JobGres {
  std::vector<int> gpus;
  std::vector<std::pair<int, std::string>> caps;
};
Result<JobGres> JobGresOf(const std::vector<GresSlot>& slots, const std::vector<int>& allocated);

// CUDA_VISIBLE_DEVICES for the gres indexes `allocated` (SLURM_STEP_GPUS) when any of them is
// a MIG slice: each slice's MIG UUID and each whole GPU's UUID, in `allocated`'s order, from
// `gpus` (NVML's readings of this node). "" when none is a slice (Slurm's own value stands).
// NotFound when an index, GPU or slice has no reading: the caller leaves Slurm's value.
Result<std::string> MigVisibleDevices(const std::vector<GresSlot>& slots,
                                      const std::vector<int>& allocated,
                                      const std::vector<GpuReading>& gpus);

}  // namespace bmas::slurm
