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
  bool controlling_terminal = false;      // stdin is a terminal the session takes as its own
  // Where argv[0] is looked for, in order, instead of PATH (a login shell's fallbacks).
  std::vector<std::string> exec_paths;
};

// A terminal of the workspace's own (its devpts, so `tty` names it inside), sized rows x cols,
// whose slave belongs to `uid`. Both fds are close-on-exec; the caller closes them.
struct WorkspaceTerminal {
  int master = -1;
  int slave = -1;
};
Result<WorkspaceTerminal> OpenWorkspaceTerminal(pid_t init, uid_t uid, int rows, int cols);

// A login shell's environment: the caller's terminal and locale settings (TERM, COLORTERM,
// LANG, LANGUAGE, LC_*, TZ), then HOME, USER, LOGNAME, SHELL and a login PATH; nothing else
// of the caller's. TERM defaults to xterm-256color when `terminal` and the caller has none.
std::vector<std::string> LoginEnvironment(const std::vector<std::string>& caller_env,
                                          const std::string& user, const std::string& home,
                                          const std::string& shell, bool terminal);

// Where a login shell is looked for: the account's shell, then bash, then sh.
std::vector<std::string> LoginShells(const std::string& account_shell);

// Starts the command. Returns the pid (on the host) of its parent, which exits with the
// command's exit code (128 + N for signal N) and leads a new session. 126 when the workspace
// cannot be entered or the user's privileges cannot be dropped, 127 when there is no command.
Result<pid_t> SpawnInWorkspace(const WorkspaceSpawn& spawn);

// close_range(first, ~0U, 0), or one close() each up to the fd limit where the kernel lacks it.
// Async-signal-safe: meant for a child between fork and exec.
void CloseFdsFrom(int first, int limit);

}  // namespace bmas
