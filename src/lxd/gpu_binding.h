#pragma once

// GPUs bound into a user's workspace for a job's lifetime. The Slurm prolog plugs exactly the
// GPU device nodes Slurm allocated on that node into the user's workspace (the job container
// is the workspace itself, or on a node that lacks it a copy: lxd/job_copy.h and the README),
// the epilog unplugs them, and a reconcile
// pass unplugs any left behind by a job that is gone (a crashed epilog, a killed node).
//
// A job's devices are named "bmas-j<job>-<node>-gpu<index>", so that they can be found again
// from the name alone. Inside the container GPU i appears at /dev/nvidia<i>; when a local
// cluster puts several nodes of one job into the same workspace (all its nodes share one
// LXD), a clashing index moves to the next free /dev/nvidiaN.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "lxd/cuda_devices.h"
#include "lxd/lxd_api.h"

namespace bmas::lxd {

struct JobDevice {
  int64_t job = 0;
  std::string node;
  int gpu = 0;
  int cap = -1;  // a MIG slice's access capability nvidia-cap<cap> on GPU `gpu`; -1: the GPU
};

// A MIG slice's access capability to plug in beside its GPU: the host's device node
// (.../nvidia-caps/nvidia-cap<minor>), at /dev/nvidia-caps/nvidia-cap<minor> inside.
struct CapDevice {
  int gpu = 0;
  std::string source;
};

// "bmas-j<job>-<node>-gpu<gpu>", or for a capability "...-gpu<gpu>-cap<cap>".
std::string JobDeviceName(const JobDevice& d);
// The reverse; nullopt for a name bmas did not make.
std::optional<JobDevice> ParseJobDeviceName(const std::string& name);

// The devices to add to an instance that already has `existing` so that the job's `gpus` on
// `node` appear: unix-char devices from `source(gpu)` at /dev/nvidia<gpu>, or the next free
// /dev/nvidiaN when that path is taken. A job on MIG slices also gets their capabilities
// `caps`. A device node another job of the instance already has in (slices or shards of one
// GPU) is not plugged twice: the job gets a reference to it, a "none" device of its own name,
// which ReleaseGpus and ReconcileGpus turn into the device when the other job's goes. With
// them come what of `cuda` (CUDA's control devices and driver files) the instance lacks.
std::map<std::string, StringMap> GpuDevices(const std::map<std::string, StringMap>& existing,
                                            int64_t job, const std::string& node,
                                            const std::vector<int>& gpus,
                                            const std::function<std::string(int)>& source,
                                            const std::vector<CapDevice>& caps = {},
                                            const CudaSupport& cuda = {});

// Plugs the job's GPUs on `node` (and its slices' capabilities, and what of `cuda` it lacks)
// into `instance`, starting it first if it is stopped. Returns the paths the GPUs and
// capabilities appear at inside.
Result<std::vector<std::string>> BindGpus(LxdApi& client, const std::string& instance, int64_t job,
                                          const std::string& node, const std::vector<int>& gpus,
                                          const std::function<std::string(int)>& source,
                                          const std::vector<CapDevice>& caps = {},
                                          const CudaSupport& cuda = {});

// Unplugs the devices of `job` on `node` from `instance`; returns how many it had. A device node
// another job refers to stays, under that job's name, in the same change. CUDA's devices go in
// the same change when no other job's device stays.
Result<int> ReleaseGpus(LxdApi& client, const std::string& instance, int64_t job,
                        const std::string& node);

// Every instance, every bmas job device whose job `alive` says is gone: unplugged, once
// `end_job` (when given) has ended that job's processes there and returned true. Returns
// "<instance>/<device>" for each one removed. A job whose state cannot be told (alive returns
// an error) keeps its devices. CUDA's devices go with the instance's last job device.
using EndJobFn =
    std::function<bool(const std::string& instance, int64_t job, const std::string& node)>;
Result<std::vector<std::string>> ReconcileGpus(
    LxdApi& client, const std::function<Result<bool>(int64_t job)>& alive,
    const EndJobFn& end_job = {});

// "0,1,3" (SLURM_JOB_GPUS) as indexes; ranges "0-3" too. InvalidArgument otherwise.
Result<std::vector<int>> ParseGpuList(const std::string& text);

}  // namespace bmas::lxd
