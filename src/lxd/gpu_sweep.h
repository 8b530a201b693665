#pragma once

// The agent's sweep of a node's GPUs between jobs and during them: every process on the host
// that holds a GPU's device node (an fd or a mapping, lxd/device_holders.h) or that NVML lists
// on a GPU (a compute context) must be in the cgroup of the job the GPU is plugged in for, or
// of a running Slurm job where it is plugged in for none. Any other is killed. One that is
// still there after SIGKILL (stuck in the driver, or a context NVML does not free) makes the
// node be drained, with the reason.
//
// This is what catches what the epilog cannot see when it releases a GPU: a device fd that was
// in flight over a unix socket (SCM_RIGHTS) at that moment and is received later, a process
// that opened the GPU in a workspace restarted under its job before the fence was put back
// (lxd/device_fence.h), or a process that uses the GPU outside any job. Processes of the node's
// own services (root, the service account) that hold a device node are left alone: monitoring
// daemons and NVML readers open them outside jobs.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/env.h"
#include "common/result.h"

namespace bmas::lxd {

// A GPU of the host: the Slurm node it belongs to and its number there.
using GpuKey = std::pair<std::string, int>;

// One process's use of one GPU.
struct GpuUse {
  GpuKey gpu;
  pid_t pid = 0;
  std::string command;         // /proc/PID/comm
  bool by_nvml = false;        // NVML lists it on the GPU; else it holds the device node
  bool known = true;           // false: no such process in /proc (NVML lists one that is gone)
  uid_t uid = 0;               // its real uid on the host
  std::optional<int64_t> job;  // the Slurm job its cgroup names (gpu/gpu_holders.h)
};

// Whether `use` may go on. `owner`: the job whose workspace the GPU is plugged in, if any;
// `alive`: whether a Slurm job runs; `services`: the uids of the node's own services.
bool MayUseGpu(const GpuUse& use, std::optional<int64_t> owner,
               const std::function<bool(int64_t)>& alive, const std::set<uid_t>& services);

// "pid 12 (python) of uid 1001 on oss01's GPU 0 (its fd), in job 7".
std::string DescribeUse(const GpuUse& use);

struct GpuSweepInput {
  // The host's GPU device-node dirs (dir/nvidia<N>), each with the Slurm node it serves.
  std::map<std::string, std::string> dirs;
  // NVML's processes by GPU number, on `nvml_node`'s GPUs; unset: no NVML.
  std::function<Result<std::map<int, std::vector<pid_t>>>()> nvml;
  std::string nvml_node;
  // Which jobs' workspaces each GPU is plugged in for: one job, or for a GPU split into MIG
  // slices each job on one of its slices (they share the GPU's device node).
  std::map<GpuKey, std::set<int64_t>> plugged;
  std::set<uid_t> services;
  // Whether a Slurm job runs; an error counts as running (nothing is killed on a doubt).
  std::function<Result<bool>(int64_t)> alive;
  // How long a killed process may take to let go of the GPU (a large context takes seconds to
  // free), and whether to stop waiting sooner (the agent is stopping).
  std::chrono::milliseconds grace{10'000};
  std::function<bool()> stopping;
  // The grace's time and the sleeps between looks. Not owned.
  Env* env = &Env::Default();
};

struct GpuSweepReport {
  std::vector<std::string> killed;           // DescribeUse of each process killed
  std::map<std::string, std::string> stuck;  // node -> the uses still there after SIGKILL
};

GpuSweepReport SweepGpus(const GpuSweepInput& in);

}  // namespace bmas::lxd
