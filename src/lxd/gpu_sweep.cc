#include "lxd/gpu_sweep.h"

#include <signal.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "gpu/gpu_holders.h"
#include "lxd/device_fence.h"
#include "lxd/device_holders.h"
#include "lxd/lxd_internal.h"

namespace bmas::lxd {
namespace {

// Fills in who `use.pid` is: its uid and its job, or that it is gone.
void LookUp(GpuUse& use) {
  const std::string status = internal::ReadText(fmt::format("/proc/{}/status", use.pid));
  std::istringstream lines(status);
  use.known = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("Uid:")) {
      std::istringstream words(line.substr(4));
      long uid = -1;
      if (words >> uid && uid >= 0) {
        use.uid = static_cast<uid_t>(uid);
        use.known = true;
      }
    }
  }
  if (!use.known) return;
  use.job = JobOfCgroup(internal::ReadText(fmt::format("/proc/{}/cgroup", use.pid)));
  if (use.command.empty()) {
    use.command = internal::ReadText(fmt::format("/proc/{}/comm", use.pid));
    while (!use.command.empty() && use.command.back() == '\n') use.command.pop_back();
  }
}

// Every use of the host's GPUs now: device nodes held, then NVML's processes.
std::vector<GpuUse> FindUses(const GpuSweepInput& in) {
  std::vector<GpuUse> uses;
  std::map<dev_t, GpuKey> by_device;
  for (const auto& [dir, node] : in.dirs) {
    for (const auto& [gpu, rdev] : NodeGpus(dir)) by_device[rdev] = {node, gpu};
  }
  std::vector<dev_t> devices;
  for (const auto& [rdev, key] : by_device) devices.push_back(rdev);
  if (!devices.empty()) {
    for (const DeviceHold& h : FindDeviceHolds(devices)) {
      GpuUse use;
      use.gpu = by_device[h.rdev];
      use.pid = h.pid;
      use.command = h.command;
      uses.push_back(use);
    }
  }
  if (in.nvml) {
    if (auto processes = in.nvml()) {
      for (const auto& [gpu, pids] : *processes) {
        for (pid_t pid : pids) {
          GpuUse use;
          use.gpu = {in.nvml_node, gpu};
          use.pid = pid;
          use.by_nvml = true;
          uses.push_back(use);
        }
      }
    }
  }
  for (GpuUse& use : uses) LookUp(use);
  return uses;
}

bool SameUse(const GpuUse& a, const GpuUse& b) {
  return a.gpu == b.gpu && a.pid == b.pid && a.by_nvml == b.by_nvml;
}

}  // namespace

bool MayUseGpu(const GpuUse& use, std::optional<int64_t> owner,
               const std::function<bool(int64_t)>& alive, const std::set<uid_t>& services) {
  if (!use.known) return false;
  if (services.contains(use.uid)) return true;
  if (!use.job) return false;
  return owner ? *use.job == *owner : alive(*use.job);
}

std::string DescribeUse(const GpuUse& use) {
  std::string who = use.known ? fmt::format("pid {} ({}) of uid {}", use.pid, use.command, use.uid)
                              : fmt::format("pid {} (gone)", use.pid);
  return fmt::format("{} on {}'s GPU {} ({}), {}", who, use.gpu.first, use.gpu.second,
                     use.by_nvml ? "a compute context NVML lists" : "its device node held open",
                     use.job ? fmt::format("in job {}", *use.job) : std::string("in no job"));
}

GpuSweepReport SweepGpus(const GpuSweepInput& in) {
  GpuSweepReport report;
  std::map<int64_t, bool> alive;  // each job asked once
  auto running = [&](int64_t job) {
    auto it = alive.find(job);
    if (it == alive.end()) {
      auto r = in.alive ? in.alive(job) : Result<bool>(true);
      it = alive.emplace(job, !r || *r).first;
    }
    return it->second;
  };
  std::vector<GpuUse> foreign;
  for (const GpuUse& use : FindUses(in)) {
    std::optional<int64_t> owner;
    if (auto jobs = in.plugged.find(use.gpu); jobs != in.plugged.end() && !jobs->second.empty()) {
      owner = use.job && jobs->second.contains(*use.job) ? *use.job : *jobs->second.begin();
    }
    if (MayUseGpu(use, owner, running, in.services)) {
      continue;
    }
    foreign.push_back(use);
    if (use.known && use.pid > 1 && kill(use.pid, SIGKILL) == 0) {
      report.killed.push_back(DescribeUse(use));
    }
  }
  // What is still there once they had their time to go.
  const TimePoint deadline = in.env->Now() + in.grace;
  while (!foreign.empty()) {
    in.env->SleepFor(std::chrono::milliseconds(50));
    const std::vector<GpuUse> now = FindUses(in);
    std::vector<GpuUse> left;  // as they are now (a process may be gone, its context not)
    for (const GpuUse& f : foreign) {
      auto it = std::find_if(now.begin(), now.end(), [&](const GpuUse& u) { return SameUse(f, u); });
      if (it != now.end()) left.push_back(*it);
    }
    foreign = std::move(left);
    if (in.env->Now() > deadline || (in.stopping && in.stopping())) break;
  }
  for (const GpuUse& f : foreign) {
    std::string& why = report.stuck[f.gpu.first];
    why += fmt::format("{}{}", why.empty() ? "" : "; ", DescribeUse(f));
  }
  return report;
}

}  // namespace bmas::lxd
