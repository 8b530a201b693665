#include "lxd/device_fence.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "lxd/gpu_binding.h"
#include "lxd/job_cgroup.h"
#include "lxd/lxd_internal.h"
#include "lxd/workspace.h"

namespace bmas::lxd {
namespace {

constexpr std::string_view kPayloadPrefix = "lxc.payload.";

bpf_insn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  return i;
}

// Closes an fd when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

long Bpf(int cmd, bpf_attr& attr) { return syscall(SYS_bpf, cmd, &attr, sizeof attr); }

}  // namespace

std::vector<bpf_insn> RefuseDevicesProgram(const std::vector<dev_t>& refused) {
  // struct bpf_cgroup_dev_ctx { u32 access_type (access << 16 | type); u32 major; u32 minor; }
  constexpr uint8_t r0 = 0, r1 = 1, r2 = 2, r3 = 3, r4 = 4;
  std::vector<bpf_insn> p = {
      Insn(BPF_LDX | BPF_MEM | BPF_W, r2, r1, 0, 0),             // r2 = access_type
      Insn(BPF_ALU | BPF_AND | BPF_K, r2, 0, 0, 0xffff),         // r2 &= 0xffff: the type
      Insn(BPF_LDX | BPF_MEM | BPF_W, r3, r1, 4, 0),             // r3 = major
      Insn(BPF_LDX | BPF_MEM | BPF_W, r4, r1, 8, 0),             // r4 = minor
      Insn(BPF_JMP | BPF_JNE | BPF_K, r2, 0, static_cast<int16_t>(4 * refused.size()),
           BPF_DEVCG_DEV_CHAR),                                  // not a char device: allow
  };
  for (dev_t d : refused) {
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, r3, 0, 3, static_cast<int32_t>(major(d))));
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, r4, 0, 2, static_cast<int32_t>(minor(d))));
    p.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, r0, 0, 0, 0));  // refuse
    p.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  }
  p.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, r0, 0, 0, 1));  // allow
  p.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  return p;
}

Result<void> RefuseDevicesIn(const std::string& cgroup_dir, const std::vector<dev_t>& refused) {
  const std::vector<bpf_insn> program = RefuseDevicesProgram(refused);
  static const char kLicense[] = "Apache-2.0";
  std::string log(16384, '\0');
  bpf_attr load;
  std::memset(&load, 0, sizeof load);  // the kernel refuses nonzero bytes past what it reads
  load.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  load.insns = reinterpret_cast<uintptr_t>(program.data());
  load.insn_cnt = static_cast<uint32_t>(program.size());
  load.license = reinterpret_cast<uintptr_t>(kLicense);
  load.log_buf = reinterpret_cast<uintptr_t>(log.data());
  load.log_size = static_cast<uint32_t>(log.size());
  load.log_level = 1;
  Fd prog{static_cast<int>(Bpf(BPF_PROG_LOAD, load))};
  if (prog.fd < 0) {
    const int e = errno;
    log.resize(std::strlen(log.c_str()));
    return Error{ErrorCode::kInternal,
                 fmt::format("cannot load the device program for {}: {}{}", cgroup_dir,
                             std::strerror(e), log.empty() ? "" : " (" + log + ")")};
  }
  Fd cgroup{open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)};
  if (cgroup.fd < 0) {
    return Error{ErrorCode::kInternal,
                 fmt::format("cannot open the cgroup {}: {}", cgroup_dir, std::strerror(errno))};
  }
  bpf_attr attach;
  std::memset(&attach, 0, sizeof attach);
  attach.target_fd = static_cast<uint32_t>(cgroup.fd);
  attach.attach_bpf_fd = static_cast<uint32_t>(prog.fd);
  attach.attach_type = BPF_CGROUP_DEVICE;
  attach.attach_flags = BPF_F_ALLOW_OVERRIDE;
  if (Bpf(BPF_PROG_ATTACH, attach) != 0) {
    return Error{ErrorCode::kInternal,
                 fmt::format("cannot attach the device program to {}: {} (another program with "
                             "other flags there, or above it one that allows no other)",
                             cgroup_dir, std::strerror(errno))};
  }
  return {};
}

std::string UnifiedCgroupDir(const std::string& proc_cgroup) {
  // The v2 hierarchy's line is "0::PATH" (no controllers); CgroupDirs knows where it is mounted.
  std::istringstream lines(proc_cgroup);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("0::")) continue;
    std::vector<std::string> dirs = CgroupDirs(line);
    return dirs.empty() ? "" : dirs.front();
  }
  return "";
}

std::string WorkspaceCgroupDir(const std::string& init_proc_cgroup) {
  std::string dir = UnifiedCgroupDir(init_proc_cgroup);
  if (dir.empty()) return dir;
  const size_t at = dir.find(std::string("/") + std::string(kPayloadPrefix));
  if (at == std::string::npos) return dir;
  const size_t end = dir.find('/', at + 1);
  return end == std::string::npos ? dir : dir.substr(0, end);
}

Result<void> FenceJobGpus(const std::string& init_proc_cgroup, int64_t job,
                          const std::vector<dev_t>& node_gpus, const std::vector<dev_t>& job_gpus) {
  const std::string workspace = WorkspaceCgroupDir(init_proc_cgroup);
  if (workspace.empty()) {
    return Error{ErrorCode::kUnavailable,
                 "no cgroup v2 hierarchy (mount cgroup2 at /sys/fs/cgroup or "
                 "/sys/fs/cgroup/unified): a job's GPUs cannot be fenced"};
  }
  if (workspace == "/sys/fs/cgroup" || workspace == "/sys/fs/cgroup/unified") {
    return Error{ErrorCode::kUnavailable,
                 "the workspace's init is in the host's root cgroup: fencing it would fence the "
                 "whole host"};
  }
  if (auto r = RefuseDevicesIn(workspace, node_gpus); !r) return r.error();
  const std::string job_dir = fmt::format("{}/bmas-job-{}", UnifiedCgroupDir(init_proc_cgroup), job);
  if (mkdir(job_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Error{ErrorCode::kInternal,
                 fmt::format("cannot make the job's cgroup {}: {}", job_dir, std::strerror(errno))};
  }
  std::vector<dev_t> others;
  for (dev_t d : node_gpus) {
    if (std::find(job_gpus.begin(), job_gpus.end(), d) == job_gpus.end()) others.push_back(d);
  }
  return RefuseDevicesIn(job_dir, others);
}

std::map<int, dev_t> NodeGpus(const std::string& dir) {
  static const std::regex kGpu("nvidia([0-9]{1,4})");
  std::map<int, dev_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    struct stat st {};
    if (std::regex_match(name, m, kGpu) && stat(e.path().c_str(), &st) == 0 &&
        S_ISCHR(st.st_mode)) {
      out[std::stoi(m[1].str())] = st.st_rdev;
    }
  }
  return out;
}

std::vector<dev_t> NodeGpuDevices(const std::string& dir) {
  std::vector<dev_t> out;
  for (const auto& [gpu, rdev] : NodeGpus(dir)) out.push_back(rdev);
  static const std::regex kCap("nvidia-cap[0-9]{1,6}");
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/nvidia-caps", ec)) {
    struct stat st {};
    if (std::regex_match(e.path().filename().string(), kCap) && stat(e.path().c_str(), &st) == 0 &&
        S_ISCHR(st.st_mode)) {
      out.push_back(st.st_rdev);
    }
  }
  return out;
}

Result<void> FenceWorkspaceGpus(LxdApi& client, const std::string& instance, int64_t job,
                                const std::vector<dev_t>& node_gpus,
                                const std::vector<std::string>& job_gpu_paths) {
  std::vector<dev_t> mine, all = node_gpus;
  for (const std::string& path : job_gpu_paths) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) {
      return Error{ErrorCode::kNotFound, fmt::format("{} is not a GPU's character device", path)};
    }
    mine.push_back(st.st_rdev);
    if (std::find(all.begin(), all.end(), st.st_rdev) == all.end()) all.push_back(st.st_rdev);
  }
  auto current = client.GetInstance(instance);
  if (!current) return current.error();
  // The job's GPUs plugged in already for its other nodes (a local cluster's nodes share one
  // workspace) stay open to it.
  for (const auto& [name, spec] : current->devices) {
    auto d = ParseJobDeviceName(name);
    auto source = spec.find("source");
    struct stat st {};
    if (d && d->job == job && source != spec.end() && stat(source->second.c_str(), &st) == 0 &&
        S_ISCHR(st.st_mode)) {
      mine.push_back(st.st_rdev);
    }
  }
  if (current->status != InstanceStatus::kRunning) {
    if (auto started = StartInstance(client, instance); !started) return started.error();
  }
  auto init = client.InitPid(instance);
  if (!init) return init.error();
  return FenceJobGpus(internal::ReadText(fmt::format("/proc/{}/cgroup", *init)), job, all, mine);
}

Result<std::vector<std::string>> ReconcileFences(
    LxdApi& client, const std::function<Result<bool>(int64_t job)>& alive) {
  auto instances = client.Instances();
  if (!instances) return instances.error();
  std::vector<std::string> fenced;
  std::string failures;
  for (const Instance& i : *instances) {
    if (i.status != InstanceStatus::kRunning) continue;
    // Each live job's GPU device nodes on the host and LXD device names, by job.
    std::map<int64_t, std::pair<std::vector<std::string>, std::vector<std::string>>> jobs;
    for (const auto& [name, spec] : i.devices) {
      auto d = ParseJobDeviceName(name);
      auto source = spec.find("source");
      if (!d || source == spec.end()) continue;
      auto running = alive(d->job);
      if (running && *running) {
        jobs[d->job].first.push_back(source->second);
        jobs[d->job].second.push_back(name);
      }
    }
    if (jobs.empty()) continue;
    auto init = client.InitPid(i.name);
    if (!init) continue;
    const std::string cgroup = internal::ReadText(fmt::format("/proc/{}/cgroup", *init));
    const std::string unified = UnifiedCgroupDir(cgroup);
    if (unified.empty()) continue;
    for (const auto& [job, devices] : jobs) {
      const auto& [sources, names] = devices;
      struct stat st {};
      if (stat(fmt::format("{}/bmas-job-{}", unified, job).c_str(), &st) == 0) continue;
      // The node's GPUs: the other device nodes beside the job's GPU (a MIG capability's
      // node is in the nvidia-caps directory below).
      std::filesystem::path first = sources.front();
      for (const std::string& s : sources) {
        if (s.find("/nvidia-caps/") == std::string::npos) first = s;
      }
      std::string dir = first.parent_path().string();
      if (first.parent_path().filename() == "nvidia-caps") dir = first.parent_path().parent_path();
      auto r = FenceWorkspaceGpus(client, i.name, job, NodeGpuDevices(dir), sources);
      if (r) {
        fenced.push_back(fmt::format("{} (job {})", i.name, job));
        continue;
      }
      // A GPU that cannot be fenced is not left plugged in.
      auto unplugged = client.RemoveDevices(i.name, names);
      failures += fmt::format("{}{} (job {}): {}; {}", failures.empty() ? "" : "; ", i.name, job,
                              r.error().message,
                              unplugged ? "its GPUs were unplugged"
                                        : "unplugging its GPUs failed too: " +
                                              unplugged.error().message);
    }
  }
  if (!failures.empty()) {
    return Error{ErrorCode::kInternal, "fencing a restarted workspace's GPUs again: " + failures};
  }
  return fenced;
}

}  // namespace bmas::lxd
