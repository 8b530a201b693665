#pragma once

// `bmas doctor`'s checks, pure: each takes what was read from the node (node_facts.h reads it)
// and returns a Check saying what was required, what was found and what would fix it.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "gpu/gpu_telemetry.h"

namespace bmas::doctor {

// kSpec: the cluster's minimum hardware specification; kBmas: what bmas itself needs on this
// node; kInfo: reported, never failing the run.
enum class CheckKind { kSpec, kBmas, kInfo };

const char* KindName(CheckKind kind);  // "spec", "bmas", "info"

struct Check {
  std::string name;  // "gpu-arch", "ram", ...: stable, for scripts
  CheckKind kind = CheckKind::kSpec;
  bool ok = false;
  std::string required;  // the requirement, in words
  std::string found;     // what this node has
  std::string fix;       // what would make it pass ("" when nothing), or advice when it passes
};

// GPU architecture and MIG ("gpu-arch"), memory per GPU ("gpu-vram") and NVLink ("nvlink"),
// from the telemetry's readings, or from why there are none.
std::vector<Check> GpuChecks(const Result<std::vector<GpuReading>>& gpus);

// One port of an RDMA device, from /sys/class/infiniband/DEV/ports/N/.
struct RdmaPort {
  std::string device;  // "mlx5_0"
  int port = 0;
  std::string rate;        // "400 Gb/sec (4X NDR)"
  std::string state;       // "4: ACTIVE"
  std::string link_layer;  // "Ethernet" (RoCE) or "InfiniBand"
  std::vector<std::string> gid_types;  // "RoCE v2", "IB/RoCE v1", one per populated GID
};

// "rdma": an active port at 400 Gb/s or more.
Check RdmaCheck(const std::vector<RdmaPort>& ports);
// "roce-v2": a RoCE v2 GID on some port.
Check RoceCheck(const std::vector<RdmaPort>& ports);

// "ram": /proc/meminfo's MemTotal against 1 TB.
Check RamCheck(const std::string& meminfo);

// What says whether this runs on a hypervisor.
struct VirtFacts {
  std::optional<bool> cpuid_hypervisor;  // CPUID leaf 1 ECX bit 31; nullopt: not x86
  std::string cpuid_signature;           // leaf 0x40000000's vendor string, "KVMKVMKVM"
  bool dmi_present = false;              // /sys/class/dmi/id exists
  std::string dmi_vendor;                // sys_vendor: "QEMU", "VMware, Inc.", ...
  std::string dmi_product;               // product_name
  std::string container;                 // "docker", "podman", ... when in one; else ""
};

// The hypervisor a CPUID signature or DMI names ("KVM", "VMware", ...); "" when none is known.
std::string HypervisorFromSignature(const std::string& signature);
std::string HypervisorFromDmi(const std::string& vendor, const std::string& product);

// "bare-metal": no hypervisor.
Check BareMetalCheck(const VirtFacts& virt);

// "cgroups": from /proc/self/mounts and /sys/fs/cgroup/cgroup.controllers. cgroup v2 alone, or
// a hybrid host whose v1 hierarchies have the controllers Slurm and the agent use
// (lxd/job_cgroup.h works in both). When it passes on a hybrid host, `fix` advises v2 alone.
Check CgroupCheck(const std::string& mounts, const std::string& v2_controllers);

// "kernel": uname's release, 5.6 or later (the agent uses openat2 and pidfd_open).
Check KernelCheck(const std::string& release);

// What `TOOL --version` (or -V) printed, if the tool is there.
struct ToolRun {
  bool ran = false;  // the command could be started
  int exit_code = -1;
  std::string output;  // stdout, else stderr
  std::string error;   // why it could not run
};

// "lxd": LXD 5.0 or later. "slurm": Slurm 22.05 or later (bmas speaks openapi/v0.0.38).
Check LxdCheck(const ToolRun& run);
Check SlurmCheck(const ToolRun& run);

// A munge key file as stat(2) saw it.
struct KeyFile {
  std::string path;
  bool exists = false;
  bool regular = false;
  uid_t owner = 0;
  mode_t mode = 0;  // permission bits
  std::string error;  // why it could not be looked at (not "it does not exist")
};

// "munge-key": every key that exists (the system's, bmas's local cluster's) is owned by the
// munge account (`munge_uid`, nullopt when there is none) with mode 0400 or 0600.
Check MungeKeyCheck(const std::vector<KeyFile>& keys, std::optional<uid_t> munge_uid);

// "lxcfs": serving /var/lib/lxcfs, or installed so that `bmas lxd up` starts it.
struct LxcfsFacts {
  bool meminfo_readable = false;  // /var/lib/lxcfs/proc/meminfo
  bool process_running = false;   // a process named lxcfs
  bool installed = false;         // /usr/bin/lxcfs
};
Check LxcfsCheck(const LxcfsFacts& lxcfs);

// "subids": root's first range of 65536 ids or more in /etc/subuid and /etc/subgid (the one
// LXD maps containers from) holds 65536 × (users + 2), as `bmas lxd up` sizes it.
Check SubIdsCheck(const std::string& subuid, const std::string& subgid, int users);

// "clock": this node's clock as adjtimex(2) reports it; informational.
struct ClockFacts {
  int state = 0;            // adjtimex's return: TIME_OK ... TIME_ERROR
  int64_t esterror_us = 0;  // estimated error
  int64_t maxerror_us = 0;
};
Check ClockCheck(const ClockFacts& clock);

// What Slurm's controller said its clock read, and this node's clock around the question.
struct SlurmClockFacts {
  bool reached = false;
  std::string why_not;     // not reached: "no Slurm reachable (...)" or what slurmrestd said
  std::string controller;  // where it was asked: "127.0.0.1:6820"
  double asked_at = 0;     // this node's clock (unix seconds) when the question left
  double answered_at = 0;  // ... and when the answer came back
  int64_t controller_time = 0;  // slurmctld's clock, whole unix seconds (GET /diag's req_time)
};

// Where slurmctld's clock stands against this node's (slurmctld's minus this node's, seconds):
// it read `controller_time` (truncated to the second) at some instant between `asked_at` and
// `answered_at` of this node's clock, so the offset lies in [low, high].
struct ClockOffset {
  double low = 0, high = 0;
};
ClockOffset EstimateClockOffset(double asked_at, double answered_at, int64_t controller_time);

// The largest skew "clock-skew" lets pass, in seconds: munge refuses credentials about 5
// minutes off, but Slurm's start, end and limit times are read on different nodes' clocks.
constexpr double kMaxClockSkewS = 5;

// "clock-skew": this node's clock against slurmctld's, as Slurm tells it. Required (kBmas):
// fails when the skew is surely over kMaxClockSkewS. With no Slurm reachable: skipped, kInfo.
Check ClockSkewCheck(const SlurmClockFacts& slurm);

// What a node's checks say about it: every spec and bmas check passed.
bool AllRequiredPass(const std::vector<Check>& checks);

}  // namespace bmas::doctor
