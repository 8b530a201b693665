#pragma once

// Which cgroups may open a node's GPUs. A workspace lives in one cgroup tree; a job's processes
// in its bmas-job-<id> cgroup inside it (job_cgroup.h). The workspace's top cgroup gets a
// device program that refuses every GPU of the node, and each job's cgroup one that refuses
// every GPU but the job's own, which takes the place of the workspace's there (the kernel runs
// only the nearest program attached with BPF_F_ALLOW_OVERRIDE). So a session, or any process of
// the workspace outside the job, cannot open the job's GPU even while it is plugged in, and one
// job cannot open another's. An fd opened earlier is not revoked: release finds those
// (device_holders.h).
//
// Cgroup v2 device programs (BPF_CGROUP_DEVICE), on the unified hierarchy: a pure v2 host or
// a hybrid one (/sys/fs/cgroup/unified). Root only (CAP_SYS_ADMIN for bpf()).

#include <linux/bpf.h>
#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "lxd/lxd_api.h"

namespace bmas::lxd {

// A BPF_PROG_TYPE_CGROUP_DEVICE program that refuses the character devices `refused` (for any
// access, mknod included) and allows everything else.
std::vector<bpf_insn> RefuseDevicesProgram(const std::vector<dev_t>& refused);

// Loads RefuseDevicesProgram(refused) and attaches it to the cgroup v2 directory `cgroup_dir`
// with BPF_F_ALLOW_OVERRIDE, replacing the program bmas attached there before. An error names
// the directory and what the kernel said.
Result<void> RefuseDevicesIn(const std::string& cgroup_dir, const std::vector<dev_t>& refused);

// The unified hierarchy's directory among CgroupDirs(proc_cgroup) ("" when it has none).
std::string UnifiedCgroupDir(const std::string& proc_cgroup);

// The top of a workspace's cgroup tree from its init's /proc/PID/cgroup text: the outermost
// "lxc.payload.*" directory of the unified hierarchy (LXD's container cgroup), else init's own.
// "" when the host has no unified hierarchy.
std::string WorkspaceCgroupDir(const std::string& init_proc_cgroup);

// Fences the node's GPUs `node_gpus` for job `job` in the workspace whose init has
// `init_proc_cgroup`: the workspace's top cgroup refuses them all, the job's cgroup (made here
// when missing) all but `job_gpus`. Call before the GPUs are plugged in.
Result<void> FenceJobGpus(const std::string& init_proc_cgroup, int64_t job,
                          const std::vector<dev_t>& node_gpus, const std::vector<dev_t>& job_gpus);

// The character devices dir/nvidia<N> (a node's GPUs) and dir/nvidia-caps/nvidia-cap<M> (the
// access capabilities of its MIG instances, and MIG's config and monitor): their device
// numbers, all of which a workspace outside its jobs is refused.
std::vector<dev_t> NodeGpuDevices(const std::string& dir);

// The same, by GPU number N.
std::map<int, dev_t> NodeGpus(const std::string& dir);

// FenceJobGpus for `instance`, started first if it is stopped; `job_gpu_paths` are the device
// nodes on the host that will be plugged in for the job.
Result<void> FenceWorkspaceGpus(LxdApi& client, const std::string& instance, int64_t job,
                                const std::vector<dev_t>& node_gpus,
                                const std::vector<std::string>& job_gpu_paths);

// Fences again the GPUs of live jobs in running workspaces whose job cgroup is gone: a workspace
// restarted while a job of its ran comes back in cgroups made anew, with no device program, and
// LXD plugs the job's GPUs back in at its start, open to every process in it. Returns
// "INSTANCE (job N)" for each workspace fenced again. `alive` says whether a job still runs.
Result<std::vector<std::string>> ReconcileFences(
    LxdApi& client, const std::function<Result<bool>(int64_t job)>& alive);

}  // namespace bmas::lxd
