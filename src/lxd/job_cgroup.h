#pragma once

// A job's processes in a workspace live in a cgroup of their own, <workspace cgroup>/bmas-job-<id>
// in every hierarchy the workspace's init is in (cgroup v1, v2, or both on a hybrid host). It
// carries the CPUs and memory Slurm gave the job, and it is how the job ends: every process in
// it is killed, whatever it did to detach (setsid, double fork). Root only.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/result.h"
#include "lxd/lxd_api.h"

namespace bmas::lxd {

// The cgroup directories (one per hierarchy, under /sys/fs/cgroup) that /proc/PID/cgroup's text
// names: v1 hierarchies by their controllers' mount, the v2 one under unified/ on a hybrid host.
std::vector<std::string> CgroupDirs(const std::string& proc_cgroup);

// "bmas-job-<job>" under each of those directories.
std::vector<std::string> JobCgroupDirs(const std::string& workspace_proc_cgroup, int64_t job);

// What Slurm allows job `job`, read from the job's own cgroup (a process of the job has
// `caller_proc_cgroup`). Empty strings when Slurm set nothing there.
struct JobLimits {
  std::string cpus;    // a cpuset list, "0-3,8"
  std::string mems;    // the cpuset's memory nodes (v1 needs them before a process joins)
  std::string memory;  // bytes, or "max"
};
JobLimits SlurmJobLimits(const std::string& caller_proc_cgroup, int64_t job);

// Makes the job cgroup `dirs` (JobCgroupDirs) carrying `limits`; returns the cgroup.procs files
// a process writes "0" to so that it joins. An error only when none could be made.
Result<std::vector<std::string>> MakeJobCgroup(const std::vector<std::string>& dirs,
                                               const JobLimits& limits);

// Kills every process in `dirs` (cgroup.kill where the kernel has it, else freezer and SIGKILL
// to each pid), waits until they are empty and removes them. Returns how many processes were
// signalled; Unavailable when some still run after `timeout`. `env` gives the deadline's time and
// the sleeps between looks (a ManualEnv: no waiting).
Result<int> KillCgroups(const std::vector<std::string>& dirs, std::chrono::milliseconds timeout,
                        Env& env = Env::Default());

// The processes the GPU driver (NVML) sees on GPUs `gpus` of this node.
using GpuProcessesFn = std::function<std::vector<pid_t>(const std::vector<int>& gpus)>;

// Job `job` ends in `instance`: its cgroup killed, then every process anywhere on the host that
// still holds one of the job's GPUs on `node` (device_holders.h), and those `gpu_processes`
// names. The epilog and the reconcile pass call it before they unplug; an error (which names
// the processes left) means something may still use the GPUs: do not unplug, drain the node.
// Returns how many processes were killed.
Result<int> EndJobInWorkspace(LxdApi& client, const std::string& instance, int64_t job,
                              const std::string& node, const GpuProcessesFn& gpu_processes = {});

// Every running instance, every job cgroup in it whose job `alive` says is gone: killed and
// removed (the epilog did not run, or failed). Returns "<instance>/bmas-job-<id>" for each.
Result<std::vector<std::string>> ReconcileJobCgroups(
    LxdApi& client, const std::function<Result<bool>(int64_t job)>& alive);

}  // namespace bmas::lxd
