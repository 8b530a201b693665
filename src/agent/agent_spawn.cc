#include "agent/agent_spawn.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <termios.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace bmas {
namespace {

// A fixed message to the user's stderr and the exit; async-signal-safe.
[[noreturn]] void Die(const char* message, int code) {
  [[maybe_unused]] ssize_t w = write(STDERR_FILENO, message, std::strlen(message));
  _exit(code);
}

struct Namespace {
  const char* name;
  int type;
};

// Every namespace but the user one is joined first, as host root; the user one last, so that
// nothing after it needs a privilege over the host.
constexpr Namespace kNamespaces[] = {{"cgroup", CLONE_NEWCGROUP}, {"ipc", CLONE_NEWIPC},
                                     {"uts", CLONE_NEWUTS},       {"net", CLONE_NEWNET},
                                     {"pid", CLONE_NEWPID},       {"mnt", CLONE_NEWNS},
                                     {"user", CLONE_NEWUSER}};

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Where execve looks for argv[0]: itself when it names a path, else each PATH entry.
std::vector<std::string> Candidates(const std::string& command,
                                    const std::vector<std::string>& env) {
  if (command.find('/') != std::string::npos) return {command};
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& e : env) {
    if (e.starts_with("PATH=")) path = e.substr(5);
  }
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t colon = std::min(path.find(':', start), path.size());
    const std::string dir = path.substr(start, colon - start);
    out.push_back((dir.empty() ? "." : dir) + "/" + command);
    start = colon + 1;
  }
  return out;
}

}  // namespace

Result<WorkspaceTerminal> OpenWorkspaceTerminal(pid_t init, uid_t uid, int rows, int cols) {
  // Opened through the workspace's root, the multiplexer makes the terminal in the workspace's
  // devpts; TIOCGPTPEER gives its slave without looking the name up. The workspace's root (the
  // user, or whoever is root in there) owns its /dev: its /dev/ptmx may be a symlink out to a
  // host file, a FIFO or any other node. So the path is resolved inside the workspace's root
  // alone (openat2 RESOLVE_IN_ROOT, no magic links), opened without blocking, and only the
  // multiplexer itself (character device 5:2) is taken.
  const std::string root_path = fmt::format("/proc/{}/root", init);
  const int root = open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("the workspace has no terminals ({}: {})", root_path,
                             std::strerror(errno))};
  }
  int master = -1;
  std::string tried;
  for (const char* inside : {"/dev/ptmx", "/dev/pts/ptmx"}) {
    open_how how{};
    how.flags = O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK;
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    const int fd = static_cast<int>(syscall(SYS_openat2, root, inside, &how, sizeof how));
    if (fd < 0) {
      tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", inside, std::strerror(errno));
      continue;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode) || major(st.st_rdev) != 5 ||
        minor(st.st_rdev) != 2) {
      tried += fmt::format("{}{}: not the terminal multiplexer", tried.empty() ? "" : "; ", inside);
      close(fd);
      continue;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    master = fd;
    break;
  }
  close(root);
  if (master < 0) {
    return Error{ErrorCode::kUnavailable, "the workspace has no terminals (" + tried + ")"};
  }
  auto fail = [&](const char* what) -> Error {
    const int e = errno;
    close(master);
    return Error{ErrorCode::kUnavailable,
                 fmt::format("the workspace's terminal: {}: {}", what, std::strerror(e))};
  };
  int unlock = 0;
  if (ioctl(master, TIOCSPTLCK, &unlock) != 0) return fail("unlock");
  winsize size{};
  size.ws_row = static_cast<unsigned short>(rows);
  size.ws_col = static_cast<unsigned short>(cols);
  if (ioctl(master, TIOCSWINSZ, &size) != 0) return fail("size");
  const int slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) return fail("open its slave");
  // The user's own, as login(1) leaves a terminal; it matters to mesg, write and ssh.
  if (fchown(slave, uid, static_cast<gid_t>(-1)) != 0 || fchmod(slave, 0620) != 0) {
    const int e = errno;
    close(slave);
    errno = e;
    return fail("give it to the user");
  }
  return WorkspaceTerminal{master, slave};
}

std::vector<std::string> LoginEnvironment(const std::vector<std::string>& caller_env,
                                          const std::string& user, const std::string& home,
                                          const std::string& shell, bool terminal) {
  std::vector<std::string> out;
  bool has_term = false;
  for (const std::string& e : caller_env) {
    const std::string name = e.substr(0, e.find('='));
    if (name == "TERM" || name == "COLORTERM" || name == "LANG" || name == "LANGUAGE" ||
        name == "TZ" || name.starts_with("LC_")) {
      // A value with a slash could name a terminfo or zoneinfo file of the caller's choosing:
      // harmless for the user's own shell, but never needed.
      if (name == "TERM" && e.find('/') != std::string::npos) continue;
      out.push_back(e);
      has_term = has_term || name == "TERM";
    }
  }
  if (terminal && !has_term) out.push_back("TERM=xterm-256color");
  out.insert(out.end(), {"HOME=" + home, "USER=" + user, "LOGNAME=" + user, "SHELL=" + shell,
                         "PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"});
  return out;
}

std::vector<std::string> LoginShells(const std::string& account_shell) {
  std::vector<std::string> out;
  const bool usable = account_shell.starts_with('/') && !account_shell.ends_with("/nologin") &&
                      !account_shell.ends_with("/false");
  if (usable) out.push_back(account_shell);
  for (const char* s : {"/bin/bash", "/bin/sh"}) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.emplace_back(s);
  }
  return out;
}

void CloseFdsFrom(int first, int limit) {
  if (syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, 0U) == 0) return;
  for (int fd = first; fd < limit; ++fd) close(fd);
}

Result<pid_t> SpawnInWorkspace(const WorkspaceSpawn& s) {
  if (s.uid == 0) return InvalidArgument("the agent runs nothing as root");
  if (s.argv.empty()) return InvalidArgument("no command");
  // Everything the children need is made here, before the fork: another thread may hold the
  // allocator's lock at that moment, so after it only async-signal-safe calls are made.
  struct Joined {
    int fd;
    int type;
    bool user;
  };
  std::vector<Joined> namespaces;
  auto close_all = [&] {
    for (const Joined& j : namespaces) close(j.fd);
  };
  for (const Namespace& n : kNamespaces) {
    if (n.type == CLONE_NEWNET && !s.enter_net) continue;
    const std::string path = fmt::format("/proc/{}/ns/{}", s.init, n.name);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      close_all();
      return Error{ErrorCode::kUnavailable, fmt::format("{}: {}", path, std::strerror(e))};
    }
    namespaces.push_back({fd, n.type, n.type == CLONE_NEWUSER});
  }
  std::vector<int> cgroups;
  for (const std::string& f : s.cgroup_procs) {
    const int fd = open(f.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) cgroups.push_back(fd);
  }
  std::vector<std::string> argv = s.argv, env = s.env;
  std::vector<std::string> candidates =
      s.exec_paths.empty() ? Candidates(s.argv[0], s.env) : s.exec_paths;
  std::vector<char*> a = Pointers(argv), e = Pointers(env);
  std::vector<const char*> paths;
  for (const std::string& c : candidates) paths.push_back(c.c_str());
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  const int fd_limit = nofile.rlim_cur == RLIM_INFINITY || nofile.rlim_cur > 1 << 20
                           ? 1 << 20
                           : static_cast<int>(nofile.rlim_cur);
  bool failed[std::size(kNamespaces)] = {};
  sigset_t none;
  sigemptyset(&none);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;

  const pid_t child = fork();
  if (child != 0) {
    const int e = errno;
    close_all();
    for (int fd : cgroups) close(fd);
    if (child < 0) return Error{ErrorCode::kInternal, std::string("fork: ") + std::strerror(e)};
    return child;
  }
  // The child: async-signal-safe calls only from here on.
  setsid();
  for (int i = 0; i < 3; ++i) {
    if (dup2(s.stdio[i], i) < 0) _exit(126);
  }
  // The session's controlling terminal: job control, ^C and ^Z, and a hangup when it closes.
  if (s.controlling_terminal && ioctl(0, TIOCSCTTY, 0) != 0) {
    Die("bmas agent: cannot make the terminal the session's own\n", 126);
  }
  for (int fd : cgroups) {
    [[maybe_unused]] ssize_t w = write(fd, "0", 1);  // "0": the writing process joins
  }
  for (size_t i = 0; i < namespaces.size(); ++i) {
    if (!namespaces[i].user && setns(namespaces[i].fd, namespaces[i].type) != 0) failed[i] = true;
  }
  for (size_t i = 0; i < namespaces.size(); ++i) {
    if (namespaces[i].user && setns(namespaces[i].fd, namespaces[i].type) != 0) {
      Die("bmas agent: cannot enter the workspace's user namespace\n", 126);
    }
  }
  // Host root is nobody in the workspace's user namespace, and a setuid() from there keeps
  // every capability (the kernel clears them only when leaving the namespace's root): become
  // that root first, so that the setuid() below clears them.
  if (setgid(0) != 0 || setuid(0) != 0)
    Die("bmas agent: cannot become the workspace's root\n", 126);
  for (size_t i = 0; i < namespaces.size(); ++i) {
    if (failed[i] && setns(namespaces[i].fd, namespaces[i].type) != 0) {
      Die("bmas agent: cannot enter the workspace's namespaces\n", 126);
    }
  }
  CloseFdsFrom(3, fd_limit);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2}) {
    sigaction(sig, &default_action, nullptr);
  }
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (setgroups(0, nullptr) != 0 || setgid(s.gid) != 0 || setuid(s.uid) != 0) {
    Die("bmas agent: cannot drop privileges to the user's\n", 126);
  }
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct no_caps[2] = {};
  if (syscall(SYS_capset, &header, no_caps) != 0 || setuid(0) == 0 || getuid() != s.uid ||
      geteuid() != s.uid || getegid() != s.gid) {
    Die("bmas agent: privileges were not dropped\n", 126);
  }
  const pid_t command = fork();  // the command is the first process inside the pid namespace
  if (command < 0) Die("bmas agent: fork failed\n", 126);
  if (command == 0) {
    if (chdir(s.cwd.c_str()) != 0 && chdir(s.home.c_str()) != 0 && chdir("/") != 0) _exit(126);
    for (const char* p : paths) execve(p, a.data(), e.data());
    Die("bmas agent: command not found or not executable\n", 127);
  }
  int status = 0;
  while (waitpid(command, &status, 0) < 0) {
    if (errno != EINTR) _exit(126);
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

}  // namespace bmas
