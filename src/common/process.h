#pragma once

// Child processes: start one (attached, or detached into its own session so that it outlives
// bmas), run a short command to completion with its output captured, wait for one to be ready,
// and stop one politely.

#include <sys/types.h>

#include <chrono>
#include <functional>
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
  std::vector<int> pass_fds;      // put at descriptors 3, 4, ... in the child; nothing else passes
};

// Starts the child and returns its pid; it runs with no signal blocked.
Result<pid_t> Spawn(const SpawnOptions& options);

// A child started detached (SpawnOptions::detach): its pid and, to recognise it later,
// ProcessStartTicks.
struct DetachedChild {
  pid_t pid = -1;
  unsigned long long start_ticks = 0;
};

// Spawns `args` detached, with `env` added and stdout and stderr appended to `output`.
Result<DetachedChild> SpawnDetached(std::vector<std::string> args, std::vector<std::string> env,
                                    const std::string& output);

struct CommandOutput {
  int exit_code = -1;  // 128 + N when killed by signal N
  std::string out;
  std::string err;
};

// Runs `args` to its end (killed after `timeout`), with stdout and stderr captured.
Result<CommandOutput> RunCommand(const std::vector<std::string>& args,
                                 const std::vector<std::string>& env = {},
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30));

// /proc/PID/stat's starttime (clock ticks since boot), 0 when no such process: with the pid,
// it names one process, never a later one that got the same pid.
unsigned long long ProcessStartTicks(pid_t pid);

// Whether `pid` runs (a zombie does not) and, when `comm` is not empty, has that name
// (/proc/PID/comm), and, when `start_ticks` is not 0, started then (ProcessStartTicks). A name
// is anyone's to take (prctl, exec -a): only the start time tells that the process at a
// recorded pid is the one recorded, and not a later one, after a reboot say, that took its name.
bool ProcessRunning(pid_t pid, const std::string& comm = {}, unsigned long long start_ticks = 0);

// SIGTERM, up to `grace` for it to end, then SIGKILL, to the process ProcessRunning(pid, comm,
// start_ticks) recognises (nothing to one it does not). Returns false if it still runs.
bool StopProcess(pid_t pid, const std::string& comm, std::chrono::milliseconds grace,
                 unsigned long long start_ticks = 0);

// Asks `ready` every 50 ms until it is true (true) or `timeout` has passed (false, unless it is
// true at that last ask). With `pid` > 0, gives up (false) as soon as that process no longer runs:
// a daemon that died will never be ready. By pid alone, as right after a spawn the child may
// not have exec'd its program yet.
bool WaitFor(const std::function<bool()>& ready, pid_t pid,
             std::chrono::steady_clock::duration timeout);

}  // namespace bmas
