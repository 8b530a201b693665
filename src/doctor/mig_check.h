#pragma once

// `bmas doctor --cluster INVENTORY`'s "mig-layout": this node's GPUs as NVML reports them
// against the MIG layouts the inventory gives them. Slurm's gres.conf is written from the
// inventory (a slice per profile, fenced by its GPU instance's capabilities), so a GPU whose
// real layout differs would be scheduled as what it is not, and a GPU in MIG mode that the
// inventory counts as whole would be handed out whole. Pure.

#include <string>
#include <vector>

#include "common/result.h"
#include "core/cluster.h"
#include "doctor/checks.h"
#include "gpu/gpu_telemetry.h"

namespace bmas::doctor {

// What the inventory says of this node: `node` is nullptr when it lists no node called
// `node_name`.
struct InventoryNode {
  std::string source;     // the inventory's file
  std::string node_name;  // this node's name in it (--node, else the host name)
  const Node* node = nullptr;
};

// "mig-layout" (kBmas): every GPU the inventory splits is in MIG mode with exactly its
// layout's profiles, at the GPU instance ids gres.conf fences (1, 2, ... in the layout's
// order); every other GPU is not in MIG mode. The fix gives the nvidia-smi commands.
Check MigLayoutCheck(const Result<std::vector<GpuReading>>& gpus, const InventoryNode& inventory);

}  // namespace bmas::doctor
