#pragma once

// Child processes: start one (attached, or detached into its own session so that it outlives
// bmas), run a short command to completion with its output captured, and stop one politely.

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/result.h"

namespace bmas {

struct SpawnOptions {
  std::vector<std::string> args;  // args[0]: a path, or a name looked up in PATH
  std::string output;             // file that stdout and stderr are appended to; "" = /dev/null
  std::vector<std::string> env;   // NAME=VALUE added to (or replacing in) this environment
  bool detach = false;            // a new session: no terminal, survives this process
  bool own_process_group = false; // a process group of its own: the terminal's ^C misses it
  int stdout_fd = -1;             // when set, stdout goes here and `output` gets stderr alone
};

// Starts the child and returns its pid; it runs with no signal blocked.
Result<pid_t> Spawn(const SpawnOptions& options);

struct CommandOutput {
  int exit_code = -1;  // 128 + N when killed by signal N
  std::string out;
  std::string err;
};

// Runs `args` to its end (killed after `timeout`), with stdout and stderr captured.
Result<CommandOutput> RunCommand(const std::vector<std::string>& args,
                                 const std::vector<std::string>& env = {},
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Whether `pid` runs (a zombie does not) and, when `comm` is not empty, has that name
// (/proc/PID/comm), so that a reused pid is not taken for the process that had it.
bool ProcessRunning(pid_t pid, const std::string& comm = {});

// SIGTERM, up to `grace` for it to end, then SIGKILL. Returns false if it still runs.
bool StopProcess(pid_t pid, const std::string& comm, std::chrono::milliseconds grace);

}  // namespace bmas
