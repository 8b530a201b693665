#pragma once

// Applies the idle-GPU policy (idle/idle_policy.h) to each GPU sample of the agent: Slurm's
// allocations say which of this node's GPUs each job holds, and who owns it and in which
// partition; the node's telemetry says which of them a process of the job runs on, and how
// busy they are. What to do about a warning or a cancellation is the caller's (`act`): the
// agent writes the warning to the job's output, cancels through Slurm and records both.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "idle/idle_policy.h"
#include "gpu/dcgm_metrics.h"
#include "gpu/gpu_telemetry.h"
#include "slurm/gres_slots.h"
#include "slurm/slurm_json.h"

namespace bmas {

struct IdlePoliceHooks {
  // Slurm's jobs (SlurmApi::Jobs): their allocations, owners, partitions and output files.
  std::function<Result<std::vector<JobInfo>>()> jobs;
  // A warning or a cancellation to carry out, with the job it is about.
  std::function<void(const IdleAction& action, const JobInfo& job)> act;
  // The gpu gres lines (slurm/gres_slots.h) of a Slurm node of this host: the host's own, or one
  // of its layout nodes' ("<host>-gpu<N>-<k>", a GPU whose layout follows demand): what the
  // indexes in Slurm's allocations there are, a GPU or a MIG slice. Unset or empty for the host:
  // each index is the GPU's number; empty for a layout node: its jobs are not judged.
  std::function<std::vector<slurm::GresSlot>(const std::string& slurm_node)> gres_slots;
};

class IdlePolice {
 public:
  // `node`: this node's name in Slurm, or its host name (a domain is dropped). Its GPU indexes
  // in Slurm's allocations (gres.conf's order, NVML's with AutoDetect=nvml) are the telemetry's;
  // so are those of its layout nodes, through their gres.conf lines.
  IdlePolice(IdleSettings settings, std::string node, IdlePoliceHooks hooks)
      : settings_(std::move(settings)), node_(std::move(node)), hooks_(std::move(hooks)) {}

  // One sample of this node's GPUs and who holds them and their MIG slices, taken at `now`
  // (unix seconds). Without Slurm's answer nothing is judged. A slice is judged as a GPU is,
  // by its own engine activity (GPM) and its own processes; one whose activity NVML did not
  // give is idle only when no process of the job is on it.
  void OnSample(const std::vector<GpuReading>& gpus, const std::map<int, GpuHolder>& holders,
                int64_t now, const MigHolders& mig_holders = {});

 private:
  IdleSettings settings_;
  const std::string node_;
  IdlePoliceHooks hooks_;
  IdleState state_;
};

// Appends `line` to the job's output file as the job's user: a child drops to the user's ids
// (setgroups, setgid, setuid, checked) and opens the path there without following any symlink
// (openat2 RESOLVE_NO_SYMLINKS), so root never opens a path the user chose. Only a regular file
// that the user owns is written. Errors name the file and why.
Result<void> AppendToJobOutput(const JobInfo& job, const std::string& line);

}  // namespace bmas
