#pragma once

// How the root agent starts a user's command in a workspace, with no helper binary: its own
// forked child joins the workspace's cgroups and namespaces, closes every fd above 2, drops to
// the user (setgroups, setgid, setuid, checked), forks once more so the command is inside the
// workspace's pid namespace, and execs the command there. The child's environment is built by
// the agent; the user's own (filtered) reaches only the command.

#include <sys/types.h>

#include <array>
#include <string>
#include <vector>

#include "common/result.h"

namespace bmas {

struct WorkspaceSpawn {
  pid_t init = 0;          // the workspace's init, on the host
  bool enter_net = false;  // a session: the workspace's network; a job keeps the node's
  uid_t uid = 0;           // never 0
  gid_t gid = 0;
  std::string cwd;  // inside; the home, then / when it cannot be entered
  std::string home;
  std::vector<std::string> argv;          // argv[0]: a path, or a name looked up in PATH
  std::vector<std::string> env;           // the command's whole environment
  std::vector<std::string> cgroup_procs;  // cgroup.procs files the process joins first
  std::array<int, 3> stdio{-1, -1, -1};   // the caller's stdin, stdout, stderr
};

// Starts the command. Returns the pid (on the host) of its parent, which exits with the
// command's exit code (128 + N for signal N) and leads a new session. 126 when the workspace
// cannot be entered or the user's privileges cannot be dropped, 127 when there is no command.
Result<pid_t> SpawnInWorkspace(const WorkspaceSpawn& spawn);

// close_range(first, ~0U, 0), or one close() each up to the fd limit where the kernel lacks it.
// Async-signal-safe: meant for a child between fork and exec.
void CloseFdsFrom(int first, int limit);

}  // namespace bmas
