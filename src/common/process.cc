#include "common/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>

extern char** environ;

namespace bmas {
namespace {

// This process's environment with `extra` (NAME=VALUE) added or replacing.
std::vector<std::string> MergedEnvironment(const std::vector<std::string>& extra) {
  std::map<std::string, std::string> vars;
  auto add = [&](const std::string& entry) {
    size_t eq = entry.find('=');
    if (eq != std::string::npos) vars[entry.substr(0, eq)] = entry;
  };
  for (char** e = environ; *e != nullptr; ++e) add(*e);
  for (const std::string& e : extra) add(e);
  std::vector<std::string> out;
  for (auto& [name, entry] : vars) out.push_back(std::move(entry));
  return out;
}

std::vector<char*> Pointers(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// posix_spawnp with `out_fd` and `err_fd` as stdout and stderr, stdin from /dev/null and
// `pass_fds` at 3, 4, ...
Result<pid_t> SpawnWith(const std::vector<std::string>& args, const std::vector<std::string>& env,
                        int out_fd, int err_fd, bool detach, bool own_process_group = false,
                        const std::vector<int>& pass_fds = {}) {
  if (args.empty()) return InvalidArgument("no command to run");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  // Copies above the targets first, so that placing one never overwrites another's source.
  const int first_free = 3 + static_cast<int>(pass_fds.size());
  std::vector<int> copies;
  for (size_t i = 0; i < pass_fds.size(); ++i) {
    const int copy = fcntl(pass_fds[i], F_DUPFD_CLOEXEC, first_free);
    if (copy < 0) {
      const int err = errno;
      for (int c : copies) close(c);
      posix_spawn_file_actions_destroy(&actions);
      return Internal(fmt::format("descriptor {} to pass to {}: {}", pass_fds[i], args[0],
                                  std::strerror(err)));
    }
    copies.push_back(copy);
    posix_spawn_file_actions_adddup2(&actions, copy, 3 + static_cast<int>(i));
  }
  // Nothing else of this process's (close_range in the child).
  posix_spawn_file_actions_addclosefrom_np(&actions, first_free);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (detach) flags |= POSIX_SPAWN_SETSID;
  if (own_process_group && !detach) {
    posix_spawnattr_setpgroup(&attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  }
  posix_spawnattr_setflags(&attr, flags);
  std::vector<std::string> merged = MergedEnvironment(env);
  std::vector<char*> argv = Pointers(args);
  std::vector<char*> envp = Pointers(merged);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  for (int c : copies) close(c);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Internal(fmt::format("cannot start {}: {}", args[0], std::strerror(rc)));
  return pid;
}

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

Result<pid_t> Spawn(const SpawnOptions& o) {
  const std::string path = o.output.empty() ? "/dev/null" : o.output;
  // Logs carry command lines and users' names: for their owner and group only.
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) return Internal(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  Result<pid_t> pid = SpawnWith(o.args, o.env, o.stdout_fd >= 0 ? o.stdout_fd : fd, fd, o.detach,
                                o.own_process_group, o.pass_fds);
  close(fd);
  return pid;
}

Result<CommandOutput> RunCommand(const std::vector<std::string>& args,
                                 const std::vector<std::string>& env,
                                 std::chrono::milliseconds timeout) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Internal(fmt::format("pipe: {}", std::strerror(errno)));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return Internal(fmt::format("pipe: {}", std::strerror(errno)));
  }
  Result<pid_t> pid = SpawnWith(args, env, out[1], err[1], /*detach=*/false);
  close(out[1]);
  close(err[1]);
  CommandOutput result;
  if (pid) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string* sinks[2] = {&result.out, &result.err};
    int open_fds = 2;
    bool killed = false;
    while (open_fds > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 && !killed) {
        kill(*pid, SIGKILL);
        killed = true;
      }
      int n = poll(fds, 2, killed ? 1000 : static_cast<int>(left.count()));
      if (n < 0 && errno != EINTR) break;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        char buf[4096];
        ssize_t got = read(fds[i].fd, buf, sizeof buf);
        if (got > 0) {
          sinks[i]->append(buf, static_cast<size_t>(got));
        } else if (got == 0 || errno != EINTR) {
          fds[i].fd = -1;
          --open_fds;
        }
      }
      if (killed && n == 0) break;
    }
    int status = 0;
    while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.exit_code = ExitCodeOf(status);
    if (killed) result.err += fmt::format("\n(killed after {} ms)", timeout.count());
  }
  close(out[0]);
  close(err[0]);
  if (!pid) return pid.error();
  return result;
}

Result<DetachedChild> SpawnDetached(std::vector<std::string> args, std::vector<std::string> env,
                                    const std::string& output) {
  SpawnOptions o;
  o.args = std::move(args);
  o.output = output;
  o.env = std::move(env);
  o.detach = true;
  auto pid = Spawn(o);
  if (!pid) return pid.error();
  return DetachedChild{*pid, ProcessStartTicks(*pid)};
}

unsigned long long ProcessStartTicks(pid_t pid) {
  if (pid <= 0) return 0;
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(in, line)) return 0;
  // "PID (COMM) STATE ...": starttime is the 22nd field, the 20th after the last ')'.
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream rest(line.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

bool ProcessRunning(pid_t pid, const std::string& comm, unsigned long long start_ticks) {
  if (pid <= 0) return false;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return false;
  // "PID (COMM) STATE ...": the state follows the last ')'.
  size_t close_paren = line.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= line.size()) return false;
  const char state = line[close_paren + 2];
  if (state == 'Z' || state == 'X') return false;
  if (start_ticks != 0 && ProcessStartTicks(pid) != start_ticks) return false;
  if (comm.empty()) return true;
  std::ifstream comm_file(fmt::format("/proc/{}/comm", pid));
  std::string name;
  std::getline(comm_file, name);
  return name == comm.substr(0, 15);  // the kernel keeps 15 characters
}

bool StopProcess(pid_t pid, const std::string& comm, std::chrono::milliseconds grace,
                 unsigned long long start_ticks) {
  auto runs = [&] { return ProcessRunning(pid, comm, start_ticks); };
  if (!runs()) return true;
  kill(pid, SIGTERM);
  const auto until = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < until) {
    waitpid(pid, nullptr, WNOHANG);  // reaps it if it is our child
    if (!runs()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  for (int i = 0; i < 100; ++i) {
    waitpid(pid, nullptr, WNOHANG);
    if (!runs()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

bool WaitFor(const std::function<bool()>& ready, pid_t pid,
             std::chrono::steady_clock::duration timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (ready()) return true;
    if (pid > 0 && !ProcessRunning(pid)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ready();
}

}  // namespace bmas
