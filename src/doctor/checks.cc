#include "doctor/checks.h"

#include <sys/stat.h>
#include <sys/timex.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>

#include <fmt/format.h>

namespace bmas::doctor {
namespace {

constexpr double kMinVramBytes = 32e9;  // "32 GB" cards report a little under 32 GiB
constexpr double kMinRamBytes = 1e12;   // 1 TB; a 1 TiB node keeps most of it after the kernel
constexpr double kMinRdmaGbps = 400;
constexpr int64_t kIdsPerContainer = 65536;  // as lxd/local_lxd.cc sizes root's range

std::string Trim(std::string s) {
  const char* space = " \t\r\n";
  s.erase(0, std::min(s.find_first_not_of(space), s.size()));
  s.erase(s.find_last_not_of(space) + 1);
  return s;
}

std::string Join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

// "N × what" per run of equal descriptions, in order of first appearance.
std::string Grouped(const std::vector<std::string>& items) {
  std::vector<std::pair<std::string, int>> groups;
  for (const std::string& item : items) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == item; });
    if (it == groups.end()) {
      groups.emplace_back(item, 1);
    } else {
      ++it->second;
    }
  }
  std::vector<std::string> parts;
  for (const auto& [item, n] : groups) parts.push_back(fmt::format("{} × {}", n, item));
  return Join(parts, "; ");
}

// The first "MAJOR.MINOR" in `text`; (-1, -1) when there is none.
std::pair<int, int> MajorMinor(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    int major = 0, minor = 0, used = 0;
    if (std::isdigit(static_cast<unsigned char>(text[i])) &&
        std::sscanf(text.c_str() + i, "%d.%d%n", &major, &minor, &used) == 2 && used > 0) {
      return {major, minor};
    }
  }
  return {-1, -1};
}

bool AtLeast(std::pair<int, int> version, int major, int minor) {
  return version.first > major || (version.first == major && version.second >= minor);
}

std::string Architecture(int major, int minor) {
  if (major >= 10) return "Blackwell";
  if (major == 9) return "Hopper";
  if (major == 8) return minor >= 9 ? "Ada" : "Ampere";
  if (major == 7) return minor >= 5 ? "Turing" : "Volta";
  return major > 0 ? "pre-Volta" : "unknown architecture";
}

double Gib(double bytes) { return bytes / (1024.0 * 1024 * 1024); }

}  // namespace

const char* KindName(CheckKind kind) {
  switch (kind) {
    case CheckKind::kSpec: return "spec";
    case CheckKind::kBmas: return "bmas";
    case CheckKind::kInfo: return "info";
  }
  return "spec";
}

std::vector<Check> GpuChecks(const Result<std::vector<GpuReading>>& gpus) {
  Check arch{"gpu-arch", CheckKind::kSpec, true,
             "MIG-capable Ada or Hopper GPUs (compute capability 8.9 or later, with MIG)", "", ""};
  Check vram{"gpu-vram", CheckKind::kSpec, true, "at least 32 GB of memory per GPU", "", ""};
  Check nvlink{"nvlink", CheckKind::kSpec, true, "NVLink on every GPU, every link up", "", ""};
  const std::string arch_fix = "MIG-capable Hopper GPUs (H100, H200) or newer";
  const std::string vram_fix = "GPUs with 32 GB or more each (H100 80 GB, H200 141 GB)";
  const std::string nvlink_fix =
      "GPUs joined by NVLink (SXM boards on NVSwitch, or NVLink bridges), with every link "
      "trained: `nvidia-smi nvlink --status` shows which are down";
  if (!gpus || gpus->empty()) {
    const std::string found =
        !gpus ? "no GPU/driver: " + gpus.error().message : "no GPU/driver: the driver lists no GPU";
    std::vector<Check> none = {arch, vram, nvlink};
    const std::string driver = " and the NVIDIA driver (libnvidia-ml.so.1)";
    const std::string fixes[] = {arch_fix + driver, vram_fix + driver, nvlink_fix};
    for (size_t i = 0; i < none.size(); ++i) {
      none[i].ok = false;
      none[i].found = found;
      none[i].fix = fixes[i];
    }
    return none;
  }
  std::vector<std::string> arch_found, vram_found, link_found;
  for (const GpuReading& g : *gpus) {
    const bool new_enough = g.cuda_major > 8 || (g.cuda_major == 8 && g.cuda_minor >= 9);
    arch.ok = arch.ok && new_enough && g.mig_capable;
    arch_found.push_back(fmt::format(
        "{}: {} (compute {}.{}), {}", g.name, Architecture(g.cuda_major, g.cuda_minor),
        g.cuda_major, g.cuda_minor,
        g.mig_capable ? (g.mig_enabled ? "MIG capable, on" : "MIG capable") : "no MIG"));
    vram.ok = vram.ok && static_cast<double>(g.mem_total_bytes) >= kMinVramBytes;
    vram_found.push_back(
        fmt::format("{}: {:.1f} GiB", g.name, Gib(static_cast<double>(g.mem_total_bytes))));
    nvlink.ok = nvlink.ok && g.nvlinks_total > 0 && g.nvlinks_up == g.nvlinks_total;
    link_found.push_back(g.nvlinks_total == 0
                             ? fmt::format("{}: no NVLink", g.name)
                             : fmt::format("{}: {} of {} links up", g.name, g.nvlinks_up,
                                           g.nvlinks_total));
  }
  arch.found = Grouped(arch_found);
  vram.found = Grouped(vram_found);
  nvlink.found = Grouped(link_found);
  if (!arch.ok) arch.fix = arch_fix;
  if (!vram.ok) vram.fix = vram_fix;
  if (!nvlink.ok) nvlink.fix = nvlink_fix;
  return {arch, vram, nvlink};
}

Check RdmaCheck(const std::vector<RdmaPort>& ports) {
  Check c{"rdma", CheckKind::kSpec, false, "an RDMA NIC port up at 400 Gb/s or more", "", ""};
  std::vector<std::string> found;
  for (const RdmaPort& p : ports) {
    double gbps = 0;
    std::sscanf(p.rate.c_str(), "%lf", &gbps);
    const size_t colon = p.state.find(": ");
    const std::string state = colon == std::string::npos ? p.state : p.state.substr(colon + 2);
    c.ok = c.ok || (gbps >= kMinRdmaGbps && (state.empty() || state == "ACTIVE"));
    found.push_back(fmt::format("{} port {}: {}{}{}", p.device, p.port,
                                p.rate.empty() ? "rate unknown" : p.rate,
                                state.empty() ? "" : ", " + state,
                                p.link_layer.empty() ? "" : ", " + p.link_layer));
  }
  c.found = found.empty() ? "no RDMA device (nothing in /sys/class/infiniband)" : Join(found, "; ");
  if (!c.ok) {
    c.fix = "a 400 Gb/s RDMA NIC (ConnectX-7 class) with its driver loaded (mlx5_ib) and the "
            "link up";
  }
  return c;
}

Check RoceCheck(const std::vector<RdmaPort>& ports) {
  Check c{"roce-v2", CheckKind::kSpec, false, "a RoCE v2 GID on an RDMA port", "", ""};
  std::vector<std::string> found;
  for (const RdmaPort& p : ports) {
    std::vector<std::string> types;
    for (const std::string& t : p.gid_types) {
      if (std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
    }
    c.ok = c.ok || std::find(types.begin(), types.end(), "RoCE v2") != types.end();
    found.push_back(fmt::format("{} port {}: {}", p.device, p.port,
                                types.empty() ? "no GID" : "GID types " + Join(types, ", ")));
  }
  c.found = found.empty() ? "no RDMA device (nothing in /sys/class/infiniband)" : Join(found, "; ");
  if (!c.ok) {
    c.fix = "an Ethernet RDMA NIC whose interface has an IP address (the kernel makes a RoCE v2 "
            "GID for each); InfiniBand ports have none";
  }
  return c;
}

Check RamCheck(const std::string& meminfo) {
  Check c{"ram", CheckKind::kSpec, false, "at least 1 TB of RAM", "", ""};
  std::istringstream in(meminfo);
  for (std::string line; std::getline(in, line);) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "MemTotal: %llu kB", &kb) == 1) {
      const double bytes = static_cast<double>(kb) * 1024;
      c.ok = bytes >= kMinRamBytes;
      c.found = fmt::format("{:.1f} GiB (MemTotal {} kB)", Gib(bytes), kb);
      if (!c.ok) c.fix = "1 TB of RAM or more in this node";
      return c;
    }
  }
  c.found = "no MemTotal in /proc/meminfo";
  c.fix = "mount /proc";
  return c;
}

std::string HypervisorFromSignature(const std::string& signature) {
  static const std::pair<const char*, const char*> kSignatures[] = {
      {"KVMKVMKVM", "KVM"},         {"TCGTCGTCGTCG", "QEMU (TCG)"}, {"VMwareVMware", "VMware"},
      {"XenVMMXenVMM", "Xen"},      {"Microsoft Hv", "Hyper-V"},    {"bhyve bhyve", "bhyve"},
      {"lrpepyh  vr", "Parallels"}, {"VBoxVBoxVBox", "VirtualBox"}, {"ACRNACRNACRN", "ACRN"},
      {"QNXQVMBSQG", "QNX"},        {"Linux KVM Hv", "KVM (Hyper-V enlightenments)"},
      {"EVMMEVMMEVMM", "Intel KGT"}, {"UnisysSpar64", "Unisys s-Par"},
  };
  const std::string sig = Trim(signature.substr(0, signature.find('\0')));
  for (const auto& [known, name] : kSignatures) {
    if (sig == known) return name;
  }
  return "";
}

std::string HypervisorFromDmi(const std::string& vendor, const std::string& product) {
  auto has = [](const std::string& text, const char* part) {
    return text.find(part) != std::string::npos;
  };
  if (vendor == "Amazon EC2") return has(product, ".metal") ? "" : "Amazon EC2";
  if (has(vendor, "QEMU") || has(product, "QEMU")) return "QEMU";
  if (has(product, "KVM")) return "KVM";
  if (has(vendor, "VMware")) return "VMware";
  if (has(vendor, "Xen") || has(product, "HVM domU")) return "Xen";
  if (has(vendor, "Microsoft") && has(product, "Virtual Machine")) return "Hyper-V";
  if (has(vendor, "innotek") || has(product, "VirtualBox")) return "VirtualBox";
  if (has(vendor, "Parallels")) return "Parallels";
  if (has(vendor, "Firecracker") || has(product, "Firecracker")) return "Firecracker";
  if (has(product, "Google Compute Engine")) return "Google Compute Engine";
  if (has(product, "OpenStack")) return "OpenStack";
  if (has(vendor, "Bochs") || has(product, "Bochs")) return "Bochs";
  if (has(product, "BHYVE")) return "bhyve";
  if (has(vendor, "Alibaba Cloud")) return "Alibaba Cloud ECS";
  return "";
}

Check BareMetalCheck(const VirtFacts& v) {
  Check c{"bare-metal", CheckKind::kSpec, false, "bare metal, no hypervisor", "", ""};
  const std::string by_cpuid = HypervisorFromSignature(v.cpuid_signature);
  const std::string by_dmi = v.dmi_present ? HypervisorFromDmi(v.dmi_vendor, v.dmi_product) : "";
  const bool vm = v.cpuid_hypervisor.value_or(false) || !by_dmi.empty();
  std::vector<std::string> evidence;
  if (!v.cpuid_hypervisor) {
    evidence.push_back("no CPUID here (not x86)");
  } else if (*v.cpuid_hypervisor) {
    const std::string sig = Trim(v.cpuid_signature.substr(0, v.cpuid_signature.find('\0')));
    evidence.push_back(sig.empty()
                           ? "CPUID hypervisor bit set"
                           : fmt::format("CPUID hypervisor bit set, signature \"{}\"", sig));
  } else {
    evidence.push_back("CPUID hypervisor bit clear");
  }
  if (v.dmi_present) {
    evidence.push_back(
        fmt::format("DMI vendor \"{}\", product \"{}\"", v.dmi_vendor, v.dmi_product));
  } else {
    evidence.push_back("no DMI tables (/sys/class/dmi/id absent, as in microVMs such as "
                       "Firecracker)");
  }
  if (!v.container.empty()) evidence.push_back(fmt::format("inside a {} container", v.container));
  std::string name = by_cpuid.empty() ? by_dmi : by_cpuid;
  if (!by_cpuid.empty() && !by_dmi.empty() && by_dmi != by_cpuid) name += " (" + by_dmi + ")";
  if (vm) {
    c.found = fmt::format("a virtual machine: {} ({})",
                          name.empty() ? "unknown hypervisor" : name, Join(evidence, "; "));
    c.fix = "run bmas on the physical server itself, not in a virtual machine";
  } else {
    c.ok = true;
    c.found = fmt::format("bare metal ({})", Join(evidence, "; "));
  }
  return c;
}

Check CgroupCheck(const std::string& mounts, const std::string& v2_controllers) {
  Check c{"cgroups", CheckKind::kBmas, false,
          "cgroup v2 with cpuset and memory, or a hybrid host whose cgroup v1 has cpuset, "
          "memory and devices (Slurm's task/cgroup, workspace and job limits)",
          "", ""};
  static const char* kControllers[] = {"cpu",     "cpuacct", "cpuset",     "memory",
                                       "devices", "freezer", "net_cls",    "blkio",
                                       "perf_event", "net_prio", "hugetlb", "pids", "rdma",
                                       "misc"};
  bool v2_alone = false;
  std::string v2_at;
  std::vector<std::string> v1;
  std::istringstream in(mounts);
  std::string device, point, type, options, rest;
  while (in >> device >> point >> type >> options && std::getline(in, rest)) {
    if (type == "cgroup2") {
      v2_alone = v2_alone || point == "/sys/fs/cgroup";
      if (v2_at.empty()) v2_at = point;
    } else if (type == "cgroup") {
      std::istringstream opts(options);
      for (std::string o; std::getline(opts, o, ',');) {
        if (std::find(std::begin(kControllers), std::end(kControllers), o) !=
                std::end(kControllers) &&
            std::find(v1.begin(), v1.end(), o) == v1.end()) {
          v1.push_back(o);
        }
      }
    }
  }
  auto missing = [](const std::vector<std::string>& have, std::vector<std::string> need) {
    std::erase_if(need, [&](const std::string& n) {
      return std::find(have.begin(), have.end(), n) != have.end();
    });
    return need;
  };
  const std::string advice =
      "for cgroup v2 alone, boot with systemd.unified_cgroup_hierarchy=1";
  if (v2_alone) {
    std::vector<std::string> have;
    std::istringstream words(v2_controllers);
    for (std::string w; words >> w;) have.push_back(w);
    const auto lack = missing(have, {"cpuset", "memory"});
    c.ok = lack.empty();
    c.found = fmt::format("cgroup v2 alone, controllers: {}",
                          have.empty() ? "none" : Join(have, " "));
    if (!c.ok) {
      c.fix = fmt::format("enable {} in /sys/fs/cgroup/cgroup.subtree_control's parent (the "
                          "kernel or the container manager withholds them)",
                          Join(lack, " and "));
    }
    return c;
  }
  if (v1.empty()) {
    c.found = v2_at.empty() ? "no cgroup hierarchy mounted"
                            : fmt::format("cgroup v2 at {} only, no controllers there", v2_at);
    c.fix = "mount cgroup2 at /sys/fs/cgroup (systemd does at boot)";
    return c;
  }
  const auto lack = missing(v1, {"cpuset", "memory", "devices"});
  c.ok = lack.empty();
  c.found = v2_at.empty()
                ? fmt::format("cgroup v1 only ({})", Join(v1, ", "))
                : fmt::format("hybrid: cgroup v1 ({}) and cgroup v2 at {}", Join(v1, ", "), v2_at);
  c.fix = c.ok ? advice
               : fmt::format("mount the v1 {} controllers, or {}", Join(lack, ", "), advice);
  return c;
}

Check KernelCheck(const std::string& release) {
  Check c{"kernel", CheckKind::kBmas, false,
          "Linux 5.6 or later (the agent uses openat2 and pidfd_open)", "", ""};
  c.ok = AtLeast(MajorMinor(release), 5, 6);
  c.found = release.empty() ? "unknown" : "Linux " + release;
  if (!c.ok) c.fix = "a kernel of 5.6 or later (Debian 12 ships 6.1)";
  return c;
}

namespace {

Check VersionCheck(Check c, const std::string& label, const ToolRun& run, int major, int minor,
                   const std::string& install) {
  const std::string output = Trim(run.output.substr(0, run.output.find('\n')));
  const auto version = MajorMinor(output);
  if (!run.ran) {
    c.found = fmt::format("not installed ({})", run.error);
    c.fix = install;
  } else if (run.exit_code != 0 || version.first < 0) {
    c.found = fmt::format("its version command exited {}: {}", run.exit_code,
                          output.empty() ? "no output" : output);
    c.fix = install;
  } else {
    c.ok = AtLeast(version, major, minor);
    c.found = output.find(' ') == std::string::npos ? label + " " + output : output;
    if (!c.ok) {
      c.fix = fmt::format("upgrade to {} {}.{} or later: {}", label, major, minor, install);
    }
  }
  return c;
}

}  // namespace

Check LxdCheck(const ToolRun& run) {
  return VersionCheck({"lxd", CheckKind::kBmas, false, "LXD 5.0 or later (workspaces)", "", ""},
                      "LXD", run, 5, 0,
                      "apt-get install -y --no-install-recommends lxd lxcfs uidmap");
}

Check SlurmCheck(const ToolRun& run) {
  return VersionCheck(
      {"slurm", CheckKind::kBmas, false,
       "Slurm 22.05 or later (bmas speaks slurmrestd's openapi/v0.0.38)", "", ""},
      "Slurm", run, 22, 5,
      "apt-get install -y --no-install-recommends slurm-wlm slurmctld slurmd slurmrestd "
      "slurm-wlm-jwt-plugin munge");
}

Check MungeKeyCheck(const std::vector<KeyFile>& keys, std::optional<uid_t> munge_uid) {
  Check c{"munge-key", CheckKind::kBmas, false,
          "each munge key owned by munge with mode 0400 or 0600", "", ""};
  std::vector<std::string> found, fixes, looked;
  for (const KeyFile& k : keys) {
    looked.push_back(k.path);
    if (!k.error.empty()) {
      found.push_back(fmt::format("{}: cannot be looked at ({})", k.path, k.error));
      fixes.push_back("run `bmas doctor` as root to check " + k.path);
      continue;
    }
    if (!k.exists) continue;
    const bool owner_ok = munge_uid && k.owner == *munge_uid;
    const bool mode_ok = k.mode == 0400 || k.mode == 0600;
    found.push_back(fmt::format("{}: {}{}, {:04o}", k.path, k.regular ? "" : "not a file, ",
                                owner_ok ? std::string("munge") : fmt::format("uid {}", k.owner),
                                k.mode));
    if (!k.regular || !owner_ok || !mode_ok) {
      fixes.push_back(fmt::format("chown munge:munge {0} && chmod 0400 {0}", k.path));
    }
  }
  if (!munge_uid) {
    c.found = "no munge account";
    c.fix = "apt-get install -y --no-install-recommends munge";
    return c;
  }
  if (found.empty()) {
    c.found = fmt::format("no munge key ({})", Join(looked, ", "));
    c.fix = "install munge (its package makes /etc/munge/munge.key), or `bmas slurm up`, which "
            "makes the local cluster's";
    return c;
  }
  c.ok = fixes.empty();
  c.found = Join(found, "; ");
  c.fix = Join(fixes, "; ");
  return c;
}

Check LxcfsCheck(const LxcfsFacts& l) {
  Check c{"lxcfs", CheckKind::kBmas, true,
          "lxcfs serving /var/lib/lxcfs, or installed for `bmas lxd up` to start (workspaces see "
          "their own memory and CPUs)",
          "", ""};
  if (l.meminfo_readable) {
    c.found = "serving /var/lib/lxcfs";
  } else if (l.process_running) {
    c.ok = false;
    c.found = "an lxcfs process runs but /var/lib/lxcfs/proc/meminfo cannot be read";
    c.fix = "stop that lxcfs; `bmas lxd up` unmounts a dead mount and starts lxcfs again";
  } else if (l.installed) {
    c.found = "installed, not running (`bmas lxd up` starts it)";
  } else {
    c.ok = false;
    c.found = "not installed and not serving";
    c.fix = "apt-get install -y --no-install-recommends lxcfs";
  }
  return c;
}

Check SubIdsCheck(const std::string& subuid, const std::string& subgid, int users) {
  const int64_t need = kIdsPerContainer * (int64_t{users} + 2);
  Check c{"subids", CheckKind::kBmas, true,
          fmt::format("root's first range of 65536+ ids in /etc/subuid and /etc/subgid holds {} "
                      "(65536 × ({} users + 2), the range LXD maps workspaces from)",
                      need, users),
          "", ""};
  std::vector<std::string> found;
  for (const auto& [file, text] : {std::pair{"/etc/subuid", &subuid}, {"/etc/subgid", &subgid}}) {
    std::istringstream in(*text);
    std::string range;
    int64_t size = 0;
    for (std::string line; std::getline(in, line);) {
      long long start = 0, n = 0;
      char owner[256] = {};
      if (std::sscanf(line.c_str(), "%255[^:]:%lld:%lld", owner, &start, &n) == 3 &&
          std::string(owner) == "root" && n >= kIdsPerContainer) {
        range = fmt::format("root:{}:{}", start, n);
        size = n;
        break;
      }
    }
    c.ok = c.ok && size >= need;
    found.push_back(range.empty() ? fmt::format("{}: no range of 65536+ ids for root", file)
                                  : fmt::format("{}: {}", file, range));
  }
  c.found = Join(found, "; ");
  if (!c.ok) {
    c.fix = fmt::format("`bmas lxd up` (as root) sizes both, or give root a first range of {} ids",
                        need);
  }
  return c;
}

Check ClockCheck(const ClockFacts& clock) {
  Check c{"clock", CheckKind::kInfo, clock.state != TIME_ERROR,
          "clocks in sync between nodes (munge refuses credentials 5 minutes off, and Slurm's "
          "times are per node); checked here: a time daemon disciplines this node's clock "
          "(clock-skew compares it with slurmctld's)",
          "", ""};
  static const char* kStates[] = {"TIME_OK",  "TIME_INS",  "TIME_DEL",
                                  "TIME_OOP", "TIME_WAIT", "TIME_ERROR"};
  const std::string state = clock.state >= 0 && clock.state <= 5
                                ? kStates[clock.state]
                                : fmt::format("state {}", clock.state);
  if (c.ok) {
    c.found =
        fmt::format("synchronised (adjtimex {}; estimated error {:.1f} ms, at most {:.1f} ms)",
                    state, clock.esterror_us / 1000.0, clock.maxerror_us / 1000.0);
  } else {
    c.found = fmt::format("not synchronised (adjtimex {}): nothing disciplines this clock", state);
    c.fix = "run a time daemon on every node (apt-get install -y chrony)";
  }
  return c;
}

ClockOffset EstimateClockOffset(double asked_at, double answered_at, int64_t controller_time) {
  const double controller = static_cast<double>(controller_time);
  // Earliest: it read the time's last instant (x.999) as the answer left; latest: its first
  // instant as the question arrived.
  return {controller - std::max(asked_at, answered_at), controller + 1 - asked_at};
}

Check ClockSkewCheck(const SlurmClockFacts& slurm) {
  Check c{"clock-skew", CheckKind::kBmas, true,
          fmt::format("this node's clock within {:.0f} s of slurmctld's (munge refuses "
                      "credentials about 5 minutes off; Slurm's job times come from each node's "
                      "clock)",
                      kMaxClockSkewS),
          "", ""};
  if (!slurm.reached) {
    c.kind = CheckKind::kInfo;
    c.found = fmt::format("{}: skipped", slurm.why_not.empty() ? "no Slurm reachable"
                                                               : slurm.why_not);
    return c;
  }
  const ClockOffset o = EstimateClockOffset(slurm.asked_at, slurm.answered_at,
                                            slurm.controller_time);
  const double middle = (o.low + o.high) / 2, margin = (o.high - o.low) / 2;
  // The skew it surely has: 0 when the range holds 0.
  const double sure = o.low > 0 ? o.low : o.high < 0 ? -o.high : 0;
  c.ok = sure <= kMaxClockSkewS;
  c.found = fmt::format("{} ({:+.1f} s, ± {:.1f} s: slurmctld's time from slurmrestd at {})",
                        std::abs(middle) <= margin
                            ? std::string("in step with slurmctld's clock")
                            : fmt::format("{:.1f} s {} slurmctld's clock", std::abs(middle),
                                          middle > 0 ? "behind" : "ahead of"),
                        middle, margin, slurm.controller);
  if (!c.ok) {
    c.fix = "run a time daemon on every node, slurmctld's too, against the same servers "
            "(apt-get install -y chrony), then `chronyc makestep`";
  }
  return c;
}

bool AllRequiredPass(const std::vector<Check>& checks) {
  return std::all_of(checks.begin(), checks.end(),
                     [](const Check& c) { return c.ok || c.kind == CheckKind::kInfo; });
}

}  // namespace bmas::doctor
