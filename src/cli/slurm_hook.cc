#include "cli/slurm_hook.h"

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "agent/agent.h"
#include "cli/lxd_commands.h"
#include "common/config.h"
#include "common/private_files.h"
#include "daemon/services.h"
#include "lxd/device_fence.h"
#include "lxd/gpu_binding.h"
#include "lxd/job_cgroup.h"
#include "lxd/job_copy.h"
#include "lxd/peer_trust.h"
#include "lxd/local_lxd.h"
#include "lxd/workspace.h"
#include "slurm/gres_slots.h"
#include "slurm/local_cluster.h"
#include "slurm/node_drain.h"

namespace bmas {
namespace {

namespace fs = std::filesystem;

std::string Variable(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// Closes an fd, and so drops its flock, at the end of its scope.
struct ClosesFd {
  int fd = -1;
  ~ClosesFd() {
    if (fd >= 0) close(fd);
  }
};

double MillisecondsSince(const Clock& clock, TimePoint start) {
  return (clock.Now() - start).count() * 1000;
}

// The processes NVML sees on GPUs `gpus` of this node (none where there is no driver).
std::vector<pid_t> NvmlProcesses(Services& services, const std::vector<int>& gpus) {
  std::vector<pid_t> pids;
  auto readings = services.Gpus()->Read();
  if (!readings) return pids;
  for (const GpuReading& r : *readings) {
    if (std::find(gpus.begin(), gpus.end(), r.index) != gpus.end()) {
      pids.insert(pids.end(), r.pids.begin(), r.pids.end());
    }
  }
  return pids;
}

// The job's GPUs and slices on `node` from its gres indexes. Without a gres.conf that lists
// the node's GPUs (one kept elsewhere), each index is taken as the GPU's number.
Result<slurm::JobGres> JobGresOnNode(const std::vector<int>& indexes, const std::string& node,
                                     const std::string& slurm_conf) {
  const std::vector<slurm::GresSlot> slots = slurm::ReadNodeGresSlots(node, slurm_conf);
  if (slots.empty()) {
    slurm::JobGres whole;
    whole.gpus = indexes;
    return whole;
  }
  return slurm::JobGresOf(slots, indexes);
}

// Slurm's TaskProlog, as the job's user before each task: a job on MIG slices gets them by
// MIG UUID in CUDA_VISIBLE_DEVICES (slurm/gres_slots.h). slurmstepd reads "export NAME=VALUE"
// lines from stdout into the task's environment and shows "print TEXT" lines in its output.
// Nothing is printed for a job without slices.
int RunTaskProlog(GlobalOptions& global) {
  std::string allocated_text = Variable("SLURM_STEP_GPUS");
  if (allocated_text.empty()) allocated_text = Variable("SLURM_JOB_GPUS");
  const std::string node = Variable("SLURMD_NODENAME");
  if (allocated_text.empty() || node.empty()) return 0;
  auto allocated = lxd::ParseGpuList(allocated_text);
  const std::vector<slurm::GresSlot> slots = slurm::ReadNodeGresSlots(node);
  // No GPUs of bmas's gres.conf: Slurm's value stands.
  if (!allocated || slots.empty()) return 0;
  const bool any_slice = std::any_of(allocated->begin(), allocated->end(), [&](int i) {
    return i >= 0 && static_cast<size_t>(i) < slots.size() && slots[i].gpu_instance >= 0;
  });
  if (!any_slice) return 0;
  const Config config = global.LoadConfigOrDefaults();
  auto readings = global.services->Gpus(config.telemetry.nvml_library)->Read();
  auto visible = readings ? slurm::MigVisibleDevices(slots, *allocated, *readings)
                          : Result<std::string>(readings.error());
  if (!visible) {
    fmt::print("print bmas: CUDA_VISIBLE_DEVICES stays Slurm's ({}): {}\n",
               Variable("CUDA_VISIBLE_DEVICES"), visible.error().message);
    return 0;
  }
  if (!visible->empty()) fmt::print("export CUDA_VISIBLE_DEVICES={}\n", *visible);
  return 0;
}

}  // namespace

int RunSlurmHook(GlobalOptions& global, const std::string& phase) {
  if (phase == "task-prolog") return RunTaskProlog(global);
  const Env& env = global.services->env();
  const TimePoint start = env.Now();
  const std::string job_text = Variable("SLURM_JOB_ID"), user = Variable("SLURM_JOB_USER"),
                    node = Variable("SLURMD_NODENAME");
  // One line per job and phase in the hooks' log (Slurm's own output of a hook is dropped).
  auto note = [&](const std::string& what) {
    fmt::print("{} job {} user {} node {}: {}\n", phase, job_text, user, node, what);
  };
  char* end = nullptr;
  const int64_t job = std::strtoll(job_text.c_str(), &end, 10);
  if (job <= 0 || *end != '\0' || user.empty() || node.empty()) {
    note("not run by Slurm (no SLURM_JOB_ID, SLURM_JOB_USER or SLURMD_NODENAME); nothing done");
    return 0;
  }
  const Config config = global.LoadConfigOrDefaults();
  const std::string state_dir = ResolveStateDir(global.state_dir, config);
  auto local_lxd = lxd::ReadLocalLxd(state_dir);
  const std::string socket = local_lxd ? local_lxd->socket : lxd::SocketPath(config.lxd);
  if (!fs::exists(socket)) return 0;  // no LXD on this node: plain Slurm jobs

  auto lxd = global.services->Lxd(socket, std::chrono::seconds(30));
  lxd::LxdApi& client = *lxd;
  const std::string instance = lxd::WorkspaceName(user);
  if (phase == "prolog") {
    // The job's container: the workspace when it lives on this node, else a copy pulled from
    // the peer that holds it (lxd/job_copy.h).
    auto account = lxd::LookUpAccount(user);
    if (!account) {
      note(account.error().message);
      return 0;
    }
    // A copy is configured from this node's own template and the user's limits; of a peer's
    // instance only the file system comes over.
    auto limits = WorkspaceLimitsFor(*global.services, config, state_dir, user);
    if (!limits) {
      note(limits.error().message);
      return 0;
    }
    const lxd::InstanceSpec spec = lxd::WorkspaceInstance(
        *account, "", *limits, local_lxd ? local_lxd->pool_driver : "");
    auto container = lxd::EnsureJobContainer(
        client, spec, job, config.lxd.peers,
        [&, id = lxd::ChoosePeerIdentity(config.lxd, lxd::HasJoined(config.lxd))](
            const LxdPeer& peer) {
          return lxd::OpenPeer(peer.url, id.cert, id.key, peer.fingerprint);
        },
        [&]() -> Result<void> { return lxd::MapUserIds(*account); });
    if (!container) {
      // No workspace anywhere: a plain Slurm job. Anything else is said in the hooks' log.
      if (container.error().code != ErrorCode::kNotFound || !config.lxd.peers.empty()) {
        note(container.error().message);
      }
      return 0;
    }
    if (!container->copied_from.empty()) {
      note(fmt::format("copied {} from {} in {:.0f} ms", instance, container->copied_from,
                       MillisecondsSince(env, start)));
    }
    auto indexes = lxd::ParseGpuList(Variable("SLURM_JOB_GPUS"));
    if (!indexes) {
      note(indexes.error().message);
      return 0;
    }
    if (indexes->empty()) return 0;
    // Where this node's GPU device nodes are: per node under /dev/bmas-<id>/ on a local
    // cluster, /dev/nvidiaN on a real one.
    auto cluster = slurm::ReadLocalCluster(state_dir);
    std::string dir = cluster ? cluster->device_dir + "/" + node : "/dev";
    auto source = [&](int g) { return fmt::format("{}/nvidia{}", dir, g); };
    // Slurm's indexes are the node's gres.conf lines: a GPU, or a MIG slice of one with its
    // access capabilities (slurm/gres_slots.h).
    auto job_gres = JobGresOnNode(*indexes, node, cluster ? cluster->conf : "");
    if (!job_gres) {
      note("GPUs not bound: " + job_gres.error().message);
      return 0;
    }
    const std::vector<int>* gpus = &job_gres->gpus;
    std::vector<lxd::CapDevice> caps;
    for (const auto& [gpu, file] : job_gres->caps) caps.push_back({gpu, file});
    // One plug at a time per workspace: LXD refuses an instance update while another one runs
    // ("A matching non-reusable operation has now succeeded"), and a user's jobs start together.
    auto lock = LockPrivateFile((fs::path(state_dir) / "run").string(), "plug-" + instance + ".lock",
                                /*wait=*/true);
    if (!lock) note("plugging without the workspace's lock: " + lock.error().message);
    const ClosesFd held{lock ? *lock : -1};
    // Before the plug: only the job's cgroup may open its GPUs (lxd/device_fence.h). A GPU that
    // cannot be fenced is not plugged in.
    std::vector<std::string> sources;
    for (int g : *gpus) sources.push_back(source(g));
    for (const lxd::CapDevice& c : caps) sources.push_back(c.source);
    if (auto fenced = lxd::FenceWorkspaceGpus(client, instance, job, lxd::NodeGpuDevices(dir),
                                              sources);
        !fenced) {
      note("GPUs not bound: " + fenced.error().message);
      return 0;
    }
    // What CUDA needs beside the GPUs: the node's control devices and the driver's files,
    // read-only (lxd/cuda_devices.h).
    lxd::CudaSupport cuda{lxd::ControlDevices(dir), {}};
    std::vector<std::string> refused;
    // The driver root `bmas lxd up` recorded on a node it prepared (the hooks get no --config).
    cuda.files = lxd::FindDriverFiles(
        local_lxd ? local_lxd->gpu_driver_root : config.gpu.driver_root, refused);
    for (const std::string& r : refused) note("driver file not mounted: " + r);
    auto paths = lxd::BindGpus(client, instance, job, node, *gpus, source, caps, cuda);
    note(paths ? fmt::format("bound {} in {} in {:.0f} ms", fmt::join(*paths, ","), instance,
                             MillisecondsSince(env, start))
               : "binding failed: " + paths.error().message);
    if (paths) {
      AgentObserve(AgentSocketPath(state_dir), "bound", MillisecondsSince(env, start) / 1000);
    }
    return 0;
  }
  auto workspace = client.GetInstance(instance);
  if (!workspace) {
    if (workspace.error().code != ErrorCode::kNotFound) note(workspace.error().message);
    return 0;  // no workspace: a plain Slurm job
  }
  if (phase == "epilog") {
    if (fs::exists(fs::path(state_dir) / kFailReleaseFile)) {
      note(fmt::format("unplugging skipped: {} exists (a test of the reconcile pass)",
                       kFailReleaseFile));
      return 0;
    }
    // The job's processes first: a process that still holds a device open keeps using it
    // after the unplug. The agent ends the commands it runs; then root kills the job's cgroup
    // and whatever in the workspace holds the job's GPUs, which holds even when no agent
    // answers.
    if (auto killed = AgentKillJob(AgentSocketPath(state_dir), job);
        !killed && killed.error().code != ErrorCode::kNotFound) {
      note("the agent: " + killed.error().message);
    }
    if (auto ended = lxd::EndJobInWorkspace(
            client, instance, job, node,
            [&global](const std::vector<int>& gpus) { return NvmlProcesses(*global.services, gpus); });
        !ended) {
      // The GPU must not go to the next job while something still holds it.
      note("GPUs left plugged for the reconcile pass: " + ended.error().message);
      auto cluster = slurm::ReadLocalCluster(state_dir);
      auto drained = slurm::DrainNode(cluster ? cluster->conf : "", node,
                                      "bmas: " + ended.error().message);
      note(drained ? "drained " + node : drained.error().message);
      return 0;
    }
    auto lock = LockPrivateFile((fs::path(state_dir) / "run").string(), "plug-" + instance + ".lock",
                                /*wait=*/true);
    const ClosesFd held{lock ? *lock : -1};
    auto released = lxd::ReleaseGpus(client, instance, job, node);
    note(released ? fmt::format("released {} device(s) from {} in {:.0f} ms", *released, instance,
                                MillisecondsSince(env, start))
                  : "release failed: " + released.error().message);
    if (released && *released > 0) {
      AgentObserve(AgentSocketPath(state_dir), "released", MillisecondsSince(env, start) / 1000);
    }
    // A copy of a workspace from another node goes with the last job that uses it.
    auto dropped = lxd::ReleaseJobCopy(client, instance, job);
    if (!dropped) note("dropping the copy: " + dropped.error().message);
    if (dropped && *dropped) note(fmt::format("deleted {}, a copy no job uses", instance));
    return 0;
  }
  note("unknown phase (prolog or epilog)");
  return 0;
}

}  // namespace bmas
