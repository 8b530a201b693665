// Starting a local Slurm cluster and what is done to one as a whole: its ports and layout
// (Localize), the checks before, StartLocalCluster itself (directories, keys, config, hooks and
// fake GPUs, then the daemons), and whether it runs, its nodes' states and its stop. The files,
// the daemons and the accounting it starts are in local_cluster_files.cc,
// local_cluster_daemons.cc and local_cluster_accounting.cc.

#include "slurm/local_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/config_table.h"
#include "common/process.h"
#include "core/job_shape.h"
#include "slurm/gpu_layouts.h"
#include "slurm/local_cluster_internal.h"
#include "slurm/slurm_config.h"

namespace bmas::slurm {

extern const char kBuiltinLocalClusterToml[];

namespace {

namespace fs = std::filesystem;
using internal::CheckTraversable;
using internal::MakeFakeGpus;
using internal::kInstallHint;
using internal::LookUp;
using internal::MakeDir;
using internal::MakeKey;
using internal::RestartDead;
using internal::SaveLocalCluster;
using internal::SlurmEnv;
using internal::StartDaemons;
using internal::StopDaemons;
using internal::WriteFile;

constexpr int kNvidiaMajor = 195;  // the NVIDIA driver's character device major
// The driver's nvidia-caps major is given out at load time (/proc/devices); the fakes take one
// from the range Linux leaves to local use.
constexpr int kFakeNvidiaCapsMajor = 240;
// So is nvidia-uvm's (nvidia-uvm-tools is its minor 1); nvidiactl is 195:255.
constexpr int kFakeNvidiaUvmMajor = 241;

// FNV-1a: stable across runs and builds, unlike std::hash.
uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Binds (`connect` false) or connects to 127.0.0.1:`port`; true when that succeeds.
bool TryLoopback(int port, bool connect) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const auto* a = reinterpret_cast<const sockaddr*>(&addr);
  bool ok = (connect ? ::connect(fd, a, sizeof addr) : bind(fd, a, sizeof addr)) == 0;
  close(fd);
  return ok;
}

bool PortFree(int port) { return TryLoopback(port, /*connect=*/false); }

// The first port the kernel hands out for outgoing connections (32768 by default).
int FirstEphemeralPort() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return range >> low ? low : 32768;
}

// A block of `count` free ports, starting where the state dir's hash points and moving on
// when something else holds one of them. The blocks lie below the ephemeral range where it
// leaves room: a port found free there could otherwise be taken by any outgoing connection
// before the daemon binds it (seen: slurmctld's "Address already in use").
Result<int> PickBasePort(const std::string& state_dir, int count) {
  constexpr int kFirst = 20000, kStride = 16;
  int blocks = (FirstEphemeralPort() - kFirst) / kStride;
  if (blocks < 64) blocks = 1800;  // a host with a low ephemeral range: the old span
  if (count > kStride) {
    return InvalidArgument(fmt::format(
        "a local cluster needs {} ports and has {}: fewer nodes, please", count, kStride));
  }
  const uint64_t h = Fnv1a(state_dir);
  for (int attempt = 0; attempt < 64; ++attempt) {
    int base = kFirst + static_cast<int>((h + attempt) % blocks) * kStride;
    bool free = true;
    for (int p = base; p < base + count && free; ++p) free = PortFree(p);
    if (free) return base;
  }
  return Error{ErrorCode::kUnavailable,
               fmt::format("no block of {} free loopback ports found in {}-{}", count, kFirst,
                           kFirst + blocks * kStride)};
}

}  // namespace

namespace internal {

bool PortAccepts(int port) { return TryLoopback(port, /*connect=*/true); }

}  // namespace internal

Result<std::vector<std::pair<std::string, std::string>>> NodeStates(const LocalCluster& c) {
  // One line per node and partition; the state is the node's in each.
  auto r = RunCommand({"sinfo", "-h", "-N", "-o", "%N %T"}, SlurmEnv(c), std::chrono::seconds(5));
  if (!r) return r.error();
  if (r->exit_code != 0) return Error{ErrorCode::kUnavailable, "sinfo: " + r->err};
  std::vector<std::pair<std::string, std::string>> states;
  std::istringstream lines(r->out);
  std::string node, state;
  while (lines >> node >> state) {
    bool seen = std::any_of(states.begin(), states.end(),
                            [&](const auto& e) { return e.first == node; });
    if (!seen) states.emplace_back(node, state);
  }
  return states;
}

Cluster BuiltinLocalCluster() { return ParseCluster(kBuiltinLocalClusterToml, "cluster-local.toml"); }

std::string LocalClusterId(const std::string& state_dir) {
  return fmt::format("{:08x}", static_cast<uint32_t>(Fnv1a(fs::absolute(state_dir).string())));
}

Cluster Localize(Cluster c, const std::string& root, const std::string& device_dir, int base_port) {
  c.controller.name = "localhost";
  c.controller.address = "127.0.0.1";
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    c.nodes[i].address = "127.0.0.1";
    c.nodes[i].hostname.clear();
    c.nodes[i].port = base_port + 1 + static_cast<int>(i);
  }
  SlurmSettings& s = c.slurm;
  s.local = true;
  s.slurm_user = "root";
  s.slurmctld_port = base_port;
  s.slurmd_port = base_port + 1;
  s.state_save_dir = root + "/state";
  s.spool_dir = root + "/spool";
  s.log_dir = root + "/log";
  s.run_dir = root + "/run";
  s.tmpfs = root + "/tmp";
  s.gpu_device_dir = device_dir;
  s.munge_socket = root + "/munge/munge.sock";
  if (s.cred_expire_s == 0) s.cred_expire_s = 10;  // requeued jobs restart after ~11 s
  s.jwt_key = root + "/etc/jwt_hs256.key";
  s.prolog = root + "/bin/bmas-slurm-prolog";
  s.epilog = root + "/bin/bmas-slurm-epilog";
  s.task_prolog = root + "/bin/bmas-slurm-task-prolog";
  if (s.accounting) {
    // slurmdbd after slurmrestd, then MariaDB, in the state dir's block of ports.
    s.slurmdbd_host = "localhost";
    s.slurmdbd_port = base_port + static_cast<int>(c.nodes.size()) + 2;
  }
  // Local clusters side by side share the host's cgroups, whose paths name the node and the
  // job id: job ids from a range of their own keep them apart.
  s.first_job_id = int64_t{(base_port - 20000) / 16} * 10000 + 1;
  return c;
}

std::string LocalClusterPrerequisites() {
  if (geteuid() != 0) {
    return "a local Slurm cluster starts its daemons as root: run bmas as root (sudo)";
  }
  std::vector<std::string> missing;
  for (const char* path : {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd",
                           "/usr/sbin/slurmrestd", "/usr/bin/sinfo", "/usr/bin/scontrol"}) {
    if (access(path, X_OK) != 0) missing.push_back(path);
  }
  bool jwt = false;
  std::error_code ec;
  for (const auto& dir : fs::directory_iterator("/usr/lib", ec)) {
    if (fs::exists(dir.path() / "slurm-wlm" / "auth_jwt.so", ec)) jwt = true;
  }
  if (!jwt) missing.push_back("auth_jwt.so");
  if (missing.empty()) return "";
  std::string list;
  for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
  return fmt::format("Slurm is not installed (missing {}): {}", list, kInstallHint);
}

namespace internal {

// Fake GPUs: character devices with the NVIDIA major; opening one gives ENXIO (no driver).
Result<void> MakeFakeGpus(const Cluster& local, const std::string& device_dir) {
  for (const Node& n : local.nodes) {
    if (auto r = MakeDir(device_dir + "/" + n.name, 0755); !r) return r.error();
    for (int g = n.gpus.first_index; g < n.gpus.first_index + n.gpus.count; ++g) {
      const std::string dev = GpuDevicePath(local.slurm, n, g);
      if (!fs::exists(dev) &&
          mknod(dev.c_str(), S_IFCHR | 0666, makedev(kNvidiaMajor, g)) != 0) {
        return Internal(fmt::format("cannot make {}: {}", dev, std::strerror(errno)));
      }
    }
    // The driver's control devices, which CUDA opens beside a GPU (lxd/cuda_devices.h).
    for (const auto& [name, dev] :
         {std::pair{"nvidiactl", makedev(kNvidiaMajor, 255)},
          std::pair{"nvidia-uvm", makedev(kFakeNvidiaUvmMajor, 0)},
          std::pair{"nvidia-uvm-tools", makedev(kFakeNvidiaUvmMajor, 1)}}) {
      const std::string path = device_dir + "/" + n.name + "/" + name;
      if (!fs::exists(path) && mknod(path.c_str(), S_IFCHR | 0666, dev) != 0) {
        return Internal(fmt::format("cannot make {}: {}", path, std::strerror(errno)));
      }
    }
    // MIG slices: their GPU instance's and compute instance's access capabilities.
    const std::vector<MigSlice> slices = MigSlicesOf(n.gpus);
    if (!slices.empty()) {
      if (auto r = MakeDir(device_dir + "/" + n.name + "/nvidia-caps", 0755); !r) {
        return r.error();
      }
    }
    for (const MigSlice& slice : slices) {
      for (int minor : {MigGpuInstanceCapMinor(slice.gpu, slice.gpu_instance),
                        MigComputeInstanceCapMinor(slice.gpu, slice.gpu_instance,
                                                   slice.compute_instance)}) {
        const std::string cap = MigCapPath(local.slurm, n, minor);
        if (!fs::exists(cap) &&
            mknod(cap.c_str(), S_IFCHR | 0444, makedev(kFakeNvidiaCapsMajor, minor)) != 0) {
          return Internal(fmt::format("cannot make {}: {}", cap, std::strerror(errno)));
        }
      }
    }
  }
  return {};
}

}  // namespace internal

Result<LocalCluster> StartLocalCluster(const Cluster& inventory, const std::string& inventory_file,
                                       const std::string& state_dir, std::chrono::seconds timeout) {
  if (std::string why = LocalClusterPrerequisites(); !why.empty()) {
    return Error{ErrorCode::kUnavailable, why};
  }
  if (auto running = ReadLocalCluster(state_dir); running) {
    std::vector<std::string> dead;
    bool any_alive = false, restartable = true;
    for (const DaemonProcess& d : running->daemons) {
      if (d.Runs()) {
        any_alive = true;
      } else {
        dead.push_back(d.name);
        restartable = restartable && !d.args.empty();
      }
    }
    if (any_alive && dead.empty()) {
      return Error{ErrorCode::kAlreadyExists,
                   fmt::format("a local Slurm cluster is already up in {} (slurmrestd {}); "
                               "`bmas slurm down` stops it",
                               state_dir, running->rest_url())};
    }
    if (any_alive && restartable) return RestartDead(*running);
    if (any_alive) {
      return Error{ErrorCode::kAlreadyExists,
                   fmt::format("the local Slurm cluster in {} runs without {} (it died, and this "
                               "cluster was started by an older bmas that did not record how); "
                               "`bmas slurm down` then `bmas slurm up` starts it afresh",
                               state_dir, fmt::join(dead, ", "))};
    }
  }
  auto munge = LookUp("munge");
  if (!munge) return munge.error();

  LocalCluster c;
  c.state_dir = fs::absolute(state_dir).string();
  c.inventory = inventory_file.empty() ? "" : fs::absolute(inventory_file).string();
  c.root = c.state_dir + "/slurm";
  c.id = LocalClusterId(c.state_dir);
  c.conf = c.root + "/etc/slurm.conf";
  c.device_dir = "/dev/bmas-" + c.id;
  c.jwt_key = c.root + "/etc/jwt_hs256.key";
  // slurmctld, one slurmd per node, slurmrestd; with accounting slurmdbd and MariaDB.
  const int ports = static_cast<int>(inventory.nodes.size()) + (inventory.slurm.accounting ? 5 : 3);
  auto base = PickBasePort(c.state_dir, ports);
  if (!base) return base.error();
  c.slurmctld_port = *base;
  c.rest_port = *base + static_cast<int>(inventory.nodes.size()) + 1;
  Cluster local = Localize(inventory, c.root, c.device_dir, *base);
  // GPUs whose layout follows demand: only the node of each one's present layout runs.
  const std::string layouts_file = c.root + "/etc/gpu-layouts";
  auto saved = ReadGpuLayouts(layouts_file);
  if (!saved) return saved.error();
  auto active = ActiveLayoutNodes(local, *saved, layouts_file);
  if (!active) return active.error();
  c.standby = StandbyLayoutNodes(local, *active);
  for (const Node& n : local.nodes) {
    if (std::find(c.standby.begin(), c.standby.end(), n.name) == c.standby.end()) {
      c.nodes.push_back(n.name);
    }
  }
  c.gpus_per_node = local.nodes.empty() ? 0 : local.nodes[0].gpus.count;

  // The state dir is made world-traversable: munge, nobody and the jobs' users reach into it;
  // not its logs, which hold every job's command line (operator data).
  if (auto r = CheckTraversable(c.state_dir); !r) return r.error();
  for (const auto& [dir, mode] : std::vector<std::pair<std::string, mode_t>>{
           {c.state_dir, 0755}, {c.root, 0755}, {c.root + "/etc", 0755},
           {c.root + "/log", 0750}, {c.root + "/run", 0755}, {c.root + "/state", 0700},
           {c.root + "/bin", 0755}}) {
    if (auto r = MakeDir(dir, mode); !r) return r.error();
  }
  if (auto r = MakeDir(c.root + "/munge", 0755, munge->uid, munge->gid); !r) return r.error();
  for (const Node& n : local.nodes) {
    if (auto r = MakeDir(c.root + "/spool/" + n.name, 0755); !r) return r.error();
    if (auto r = MakeDir(c.root + "/tmp/" + n.name, 01777); !r) return r.error();
  }
  if (auto r = MakeKey(c.root + "/etc/munge.key", 1024, munge->uid, munge->gid); !r) {
    return r.error();
  }
  if (auto r = MakeKey(c.jwt_key, 32, 0, 0); !r) return r.error();
  for (const auto& [name, text] : RenderSlurmConfig(local)) {
    if (auto r = WriteFile(fs::path(c.root) / "etc" / name, text, 0644); !r) return r.error();
  }
  // The workspace hooks: `bmas slurm hook prolog|epilog` binds a job's GPUs into its user's
  // workspace and unbinds them. Jobs of users without a workspace run as plain Slurm jobs, and
  // the hooks never fail (a failing prolog would drain the node).
  std::error_code self_ec;
  const std::string self = fs::read_symlink("/proc/self/exe", self_ec).string();
  for (const auto& [hook, phase] : {std::pair{local.slurm.prolog, "prolog"},
                                    std::pair{local.slurm.epilog, "epilog"}}) {
    const std::string text =
        self.empty() ? std::string("#!/bin/sh\nexit 0\n")
                     : fmt::format("#!/bin/sh\n# bmas workspace hook: a job's GPUs in its user's "
                                   "workspace.\n{} --state-dir {} slurm hook {} >>{}\"/log/hooks.log\" "
                                   "2>&1\nexit 0\n",
                                   ShellQuote(self), ShellQuote(c.state_dir), phase,
                                   ShellQuote(c.root));
    if (auto r = WriteFile(hook, text, 0755); !r) return r.error();
  }
  // The task prolog runs as the job's user: its stdout is what slurmstepd reads ("export ...").
  const std::string task_prolog =
      self.empty() ? std::string("#!/bin/sh\nexit 0\n")
                   : fmt::format("#!/bin/sh\n# bmas task prolog: a job's MIG slices by MIG UUID.\n"
                                 "SLURM_CONF={} exec {} --state-dir {} slurm hook task-prolog\n",
                                 ShellQuote(c.conf), ShellQuote(self), ShellQuote(c.state_dir));
  if (auto r = WriteFile(local.slurm.task_prolog, task_prolog, 0755); !r) return r.error();
  if (auto r = MakeFakeGpus(local, c.device_dir); !r) return r.error();

  c.accounting = local.slurm.accounting;
  Result<void> started =
      StartDaemons(c, *munge, local.slurm.accounting ? &local : nullptr, timeout);
  if (auto saved = SaveLocalCluster(c); !saved && started) started = saved.error();
  if (!started) {
    StopDaemons(c);
    std::error_code ec;
    fs::remove_all(c.device_dir, ec);
    fs::remove(fs::path(c.root) / "local.json", ec);
    return started.error();
  }
  return c;
}


Result<LocalCluster> RunningLocalCluster(const std::string& state_dir) {
  auto c = ReadLocalCluster(state_dir);
  if (!c) return c;
  const bool ctld = std::any_of(c->daemons.begin(), c->daemons.end(), [](const DaemonProcess& d) {
    return d.comm == "slurmctld" && d.Runs();
  });
  if (!ctld) {
    return Error{ErrorCode::kNotFound,
                 fmt::format("the local Slurm cluster of {} no longer runs (`bmas slurm up` "
                             "starts it)",
                             state_dir)};
  }
  return c;
}

Result<void> StopLocalCluster(const std::string& state_dir) {
  auto c = ReadLocalCluster(state_dir);
  if (!c) return c.error();
  // Jobs first: a job's slurmstepd outlives its slurmd, and keeps calling a stopped slurmctld.
  bool ctld = std::any_of(c->daemons.begin(), c->daemons.end(), [](const DaemonProcess& d) {
    return d.comm == "slurmctld" && d.Runs();
  });
  if (ctld) {
    auto jobs = RunCommand({"squeue", "-h", "-o", "%i"}, SlurmEnv(*c), std::chrono::seconds(5));
    if (jobs && jobs->exit_code == 0 && !jobs->out.empty()) {
      std::vector<std::string> cancel = {"scancel"};
      std::istringstream ids(jobs->out);
      for (std::string id; ids >> id;) cancel.push_back(id);
      // Best effort: what it could not cancel, the wait below sees left, and stopping goes on.
      (void)RunCommand(cancel, SlurmEnv(*c), std::chrono::seconds(5));
      WaitFor(
          [&] {
            auto left = RunCommand({"squeue", "-h", "-o", "%i"}, SlurmEnv(*c),
                                   std::chrono::seconds(5));
            return !left || left->out.empty();
          },
          0, std::chrono::seconds(15));
    }
  }
  StopDaemons(*c);
  std::error_code ec;
  if (!c->device_dir.empty() && c->device_dir.starts_with("/dev/bmas-")) {
    fs::remove_all(c->device_dir, ec);
  }
  fs::remove(fs::path(c->root) / "local.json", ec);
  return {};
}

}  // namespace bmas::slurm
