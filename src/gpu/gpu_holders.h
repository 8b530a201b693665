#pragma once

// Which job holds each GPU, from the processes NVML sees on it: a process's cgroup names its
// Slurm job (".../job_<id>/..." under slurmd's cgroup plugin, or ".../bmas-job-<id>" inside a
// workspace), as jobstats and the DCGM exporter's HPC mapping tell jobs apart. A GPU whose
// processes belong to no job, or that has none, is held by no one.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpu/dcgm_metrics.h"
#include "gpu/gpu_telemetry.h"

namespace bmas {

// The Slurm job named by a /proc/PID/cgroup text, if any.
std::optional<int64_t> JobOfCgroup(const std::string& proc_cgroup);

// For each GPU, the first of its processes that `holder_of` maps to a job.
std::map<int, GpuHolder> HoldersOf(const std::vector<GpuReading>& gpus,
                                   const std::function<std::optional<GpuHolder>(pid_t)>& holder_of);

// For each MIG device, the first of its processes that `holder_of` maps to a job.
MigHolders MigHoldersOf(const std::vector<GpuReading>& gpus,
                        const std::function<std::optional<GpuHolder>(pid_t)>& holder_of);

}  // namespace bmas
