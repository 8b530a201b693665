#include "lxd/job_cgroup.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "lxd/device_holders.h"
#include "lxd/gpu_binding.h"
#include "lxd/lxd_internal.h"

namespace bmas::lxd {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kJobPrefix = "bmas-job-";
using internal::ReadText;

struct CgroupLine {
  std::string root;  // the hierarchy's mount
  std::string path;  // inside it
};

std::vector<CgroupLine> ParseProcCgroup(const std::string& proc_cgroup) {
  std::vector<CgroupLine> out;
  std::istringstream lines(proc_cgroup);
  for (std::string line; std::getline(lines, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1);
    CgroupLine l;
    l.path = line.substr(b + 1);
    if (l.path.empty() || l.path[0] != '/' || l.path.find("/..") != std::string::npos) continue;
    if (controllers.empty()) {
      l.root = fs::exists("/sys/fs/cgroup/unified") ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup";
    } else {
      if (controllers.starts_with("name=")) controllers = controllers.substr(5);
      l.root = "/sys/fs/cgroup/" + controllers;
    }
    if (l.path == "/") l.path.clear();
    out.push_back(std::move(l));
  }
  return out;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Writes `text` to an existing cgroup file; false when it cannot.
bool WriteFile(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

std::set<pid_t> Procs(const std::vector<std::string>& dirs) {
  std::set<pid_t> pids;
  for (const std::string& d : dirs) {
    std::istringstream in(ReadText(d + "/cgroup.procs"));
    for (pid_t p; in >> p;) pids.insert(p);
  }
  return pids;
}

bool IsV1(const std::string& dir, const char* controller) {
  return dir.find(fmt::format("/sys/fs/cgroup/{}/", controller)) == 0;
}

}  // namespace

std::vector<std::string> CgroupDirs(const std::string& proc_cgroup) {
  std::vector<std::string> dirs;
  for (const CgroupLine& l : ParseProcCgroup(proc_cgroup)) dirs.push_back(l.root + l.path);
  return dirs;
}

std::vector<std::string> JobCgroupDirs(const std::string& workspace_proc_cgroup, int64_t job) {
  std::vector<std::string> dirs;
  for (const std::string& d : CgroupDirs(workspace_proc_cgroup)) {
    dirs.push_back(fmt::format("{}/{}{}", d, kJobPrefix, job));
  }
  return dirs;
}

JobLimits SlurmJobLimits(const std::string& caller_proc_cgroup, int64_t job) {
  JobLimits limits;
  const std::string component = fmt::format("/job_{}", job);
  for (const CgroupLine& l : ParseProcCgroup(caller_proc_cgroup)) {
    const size_t at = (l.path + "/").find(component + "/");
    if (at == std::string::npos) continue;
    const std::string dir = l.root + l.path.substr(0, at + component.size());
    auto first = [&](std::initializer_list<const char*> files) {
      for (const char* f : files) {
        std::string v = Trim(ReadText(dir + "/" + f));
        if (!v.empty()) return v;
      }
      return std::string();
    };
    if (limits.memory.empty()) limits.memory = first({"memory.limit_in_bytes", "memory.max"});
    if (limits.cpus.empty()) limits.cpus = first({"cpuset.cpus", "cpuset.cpus.effective"});
    if (limits.mems.empty()) limits.mems = first({"cpuset.mems", "cpuset.mems.effective"});
  }
  return limits;
}

Result<std::vector<std::string>> MakeJobCgroup(const std::vector<std::string>& dirs,
                                               const JobLimits& limits) {
  std::vector<std::string> procs;
  std::string failures;
  for (const std::string& d : dirs) {
    if (mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) {
      failures += fmt::format(" {}: {};", d, std::strerror(errno));
      continue;
    }
    const std::string parent = fs::path(d).parent_path().string();
    if (IsV1(d, "cpuset")) {
      // A v1 cpuset starts empty: nothing can join it until it has CPUs and memory nodes.
      for (const auto& [file, want] :
           {std::pair<const char*, std::string>{"cpuset.cpus", limits.cpus},
            {"cpuset.mems", limits.mems}}) {
        const std::string path = d + "/" + file;
        if (want.empty() || !WriteFile(path, want)) {
          WriteFile(path, Trim(ReadText(parent + "/" + file)));
        }
      }
    } else if (!limits.cpus.empty() && fs::exists(d + "/cpuset.cpus")) {
      WriteFile(d + "/cpuset.cpus", limits.cpus);
    }
    if (!limits.memory.empty()) {
      for (const char* file : {"memory.limit_in_bytes", "memory.max"}) {
        if (fs::exists(d + "/" + file)) WriteFile(d + "/" + file, limits.memory);
      }
    }
    procs.push_back(d + "/cgroup.procs");
  }
  if (procs.empty()) {
    return Error{ErrorCode::kInternal, "cannot make the job's cgroup:" + failures};
  }
  return procs;
}

Result<int> KillCgroups(const std::vector<std::string>& dirs, std::chrono::milliseconds timeout,
                        Env& env) {
  std::vector<std::string> present;
  for (const std::string& d : dirs) {
    if (fs::exists(d)) present.push_back(d);
  }
  std::set<pid_t> signalled;
  const TimePoint deadline = env.Now() + timeout;
  while (true) {
    const std::set<pid_t> pids = Procs(present);
    if (pids.empty()) break;
    if (env.Now() > deadline) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("{} process(es) of the job's cgroup still run", pids.size())};
    }
    std::string freezer;
    for (const std::string& d : present) {
      WriteFile(d + "/cgroup.kill", "1");  // v2 (kernel 5.14+): the whole cgroup at once
      if (IsV1(d, "freezer")) freezer = d;
    }
    // v1: frozen, a process cannot fork away between the read of the list and the kill.
    if (!freezer.empty()) WriteFile(freezer + "/freezer.state", "FROZEN");
    for (pid_t p : Procs(present)) {
      if (p > 1 && kill(p, SIGKILL) == 0) signalled.insert(p);
    }
    if (!freezer.empty()) WriteFile(freezer + "/freezer.state", "THAWED");
    signalled.insert(pids.begin(), pids.end());
    env.SleepFor(std::chrono::milliseconds(20));
  }
  for (const std::string& d : present) rmdir(d.c_str());
  return static_cast<int>(signalled.size());
}

Result<int> EndJobInWorkspace(LxdApi& client, const std::string& instance, int64_t job,
                              const std::string& node, const GpuProcessesFn& gpu_processes) {
  auto ws = client.GetInstance(instance);
  if (!ws) return ws.error().code == ErrorCode::kNotFound ? Result<int>(0) : ws.error();
  if (ws->status != InstanceStatus::kRunning) return 0;
  auto init = client.InitPid(instance);
  if (!init) return init.error();
  const std::string cgroup = ReadText(fmt::format("/proc/{}/cgroup", *init));
  auto killed = KillCgroups(JobCgroupDirs(cgroup, job), std::chrono::seconds(10));
  if (!killed) return killed.error();
  std::vector<dev_t> rdevs;
  std::vector<int> gpus;
  for (const auto& [name, spec] : ws->devices) {
    auto d = ParseJobDeviceName(name);
    auto source = spec.find("source");
    struct stat st {};
    if (d && d->job == job && d->node == node && source != spec.end() &&
        stat(source->second.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) {
      rdevs.push_back(st.st_rdev);
      gpus.push_back(d->gpu);
    }
  }
  if (rdevs.empty()) return *killed;
  // Anywhere on the host: a process in a pid namespace of its own, one handed the fd over a
  // unix socket, one that mapped the device and closed the fd.
  auto holders = KillHolders(CharDevices(rdevs),
                             gpu_processes ? gpu_processes(gpus) : std::vector<pid_t>{},
                             std::chrono::seconds(10));
  if (!holders) {
    return Error{holders.error().code,
                 fmt::format("job {}'s GPUs in {} are {}", job, instance, holders.error().message)};
  }
  return *killed + *holders;
}

Result<std::vector<std::string>> ReconcileJobCgroups(
    LxdApi& client, const std::function<Result<bool>(int64_t job)>& alive) {
  auto instances = client.Instances();
  if (!instances) return instances.error();
  std::vector<std::string> ended;
  std::string failures;
  for (const Instance& i : *instances) {
    if (i.status != InstanceStatus::kRunning) continue;
    auto init = client.InitPid(i.name);
    if (!init) continue;
    const std::string cgroup = ReadText(fmt::format("/proc/{}/cgroup", *init));
    std::set<int64_t> jobs;
    std::error_code ec;
    for (const std::string& dir : CgroupDirs(cgroup)) {
      for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        int64_t job = 0;
        if (name.starts_with(kJobPrefix) &&
            std::sscanf(name.c_str() + kJobPrefix.size(), "%ld", &job) == 1 && job > 0) {
          jobs.insert(job);
        }
      }
    }
    for (int64_t job : jobs) {
      auto running = alive(job);
      if (!running || *running) continue;
      auto killed = KillCgroups(JobCgroupDirs(cgroup, job), std::chrono::seconds(10));
      if (killed) {
        ended.push_back(fmt::format("{}/{}{}", i.name, kJobPrefix, job));
      } else {
        failures += fmt::format(" {} job {}: {};", i.name, job, killed.error().message);
      }
    }
  }
  if (!failures.empty()) return Error{ErrorCode::kUnavailable, "job cgroups:" + failures};
  return ended;
}

}  // namespace bmas::lxd
