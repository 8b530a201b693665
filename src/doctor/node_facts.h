#pragma once

// The thin layer under `bmas doctor`: reads what its checks need from /sys, /proc and /etc
// under a root directory ("/" on a node; a fake tree in tests), and, when asked, from the
// running system (CPUID, uname, adjtimex, `lxd --version`, `slurmctld -V`).

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "doctor/checks.h"

namespace bmas::doctor {

struct NodeFacts {
  std::vector<RdmaPort> rdma;
  std::string meminfo;
  VirtFacts virt;
  std::string mounts;              // /proc/self/mounts
  std::string cgroup_controllers;  // /sys/fs/cgroup/cgroup.controllers ("" when absent)
  std::string kernel_release;
  ToolRun lxd, slurm;
  std::vector<KeyFile> munge_keys;
  std::optional<uid_t> munge_uid;  // the munge account's, from /etc/passwd
  LxcfsFacts lxcfs;
  std::string subuid, subgid;
  ClockFacts clock;
  // Filled by the caller that can reach Slurm (ReadNodeFacts leaves it not reached).
  SlurmClockFacts slurm_clock;
  bool is_root = false;  // effective uid 0
};

struct ReadOptions {
  std::string root = "/";
  std::string state_dir;  // bmas's; its local cluster keeps a munge key under slurm/etc/
  // Also read CPUID, uname, adjtimex and the euid, and run the version commands. Off in tests
  // of a fake tree.
  bool live = true;
};

// What the node has. Never fails: what cannot be read is left empty and the checks say so.
NodeFacts ReadNodeFacts(const ReadOptions& options);

}  // namespace bmas::doctor
