#include "daemon/up.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/private_files.h"
#include "daemon/service_account.h"
#include "store/store.h"
#include "common/result.h"
#include "lxd/local_lxd.h"
#include "slurm/local_cluster.h"

extern char** environ;

namespace bmas {
namespace {

namespace fs = std::filesystem;

struct Child {
  std::string name;
  pid_t pid = -1;
  std::string url;
  std::string log;
  bool exited = false;
};

// Starts `argv` with stdout on a pipe and stderr appended to `log`; returns the pid and the
// read end of the pipe. Signals blocked in this process are unblocked in the child.
Result<std::pair<pid_t, int>> Spawn(const std::vector<std::string>& args, const std::string& log,
                                    const std::vector<std::string>& env = {}) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Internal(fmt::format("pipe: {}", std::strerror(errno)));
  int err = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (err < 0) {
    close(out[0]);
    close(out[1]);
    return Internal(fmt::format("cannot open {}: {}", log, std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err, STDERR_FILENO);
  // Nothing of this process's beyond stdin, stdout and stderr (close_range in the child).
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  // Own process group: a Ctrl-C at the terminal reaches only `bmas up`, which then stops the
  // children in order.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  // `env` ("NAME=value", secrets among them: never on the command line) replaces variables of
  // the same name.
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view var(*e);
    const bool replaced = std::any_of(env.begin(), env.end(), [&](const std::string& x) {
      return var.substr(0, var.find('=') + 1) == std::string_view(x).substr(0, x.find('=') + 1);
    });
    if (!replaced) envp.push_back(*e);
  }
  for (const std::string& x : env) envp.push_back(const_cast<char*>(x.c_str()));
  envp.push_back(nullptr);
  int rc = posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  close(err);
  if (rc != 0) {
    close(out[0]);
    return Internal(fmt::format("cannot start {}: {}", args[0], std::strerror(rc)));
  }
  return std::make_pair(pid, out[0]);
}

// What a child printed when ready: its "listening on URL" line, and the "metrics on URL" line
// a gateway prints before it.
struct Ready {
  std::string url;
  std::string metrics_url;  // "" when none
};

// Reads the child's stdout up to its "listening on URL" line, waiting up to `timeout`.
Result<Ready> ReadListeningUrl(int fd, std::chrono::seconds timeout) {
  std::string text;
  auto until = std::chrono::steady_clock::now() + timeout;
  while (text.find("listening on") == std::string::npos ||
         text.find('\n', text.find("listening on")) == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Internal("did not report a listening address in time");
    fd_set set;
    FD_ZERO(&set);
    FD_SET(fd, &set);
    timeval tv{left.count() / 1000, static_cast<suseconds_t>((left.count() % 1000) * 1000)};
    int rc = select(fd + 1, &set, nullptr, nullptr, &tv);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return Internal("exited before it was ready");
    text.append(buf, static_cast<size_t>(n));
  }
  // The URL a line ends with ("" when none).
  auto url_of = [&text](std::string_view needle) {
    const size_t at = text.find(needle);
    if (at == std::string::npos) return std::string();
    const std::string line = text.substr(at, text.find('\n', at) - at);
    const size_t http = line.find("http://");
    return http == std::string::npos ? std::string() : line.substr(http);
  };
  Ready ready{url_of("listening on"), url_of("metrics on")};
  if (ready.url.empty()) return Internal("printed an unexpected line: " + text);
  return ready;
}

std::string LogTail(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string out;
  for (size_t i = lines.size() > 8 ? lines.size() - 8 : 0; i < lines.size(); ++i) {
    out += "    " + lines[i] + "\n";
  }
  return out;
}

void StopAll(std::vector<Child>& children, std::chrono::seconds grace) {
  for (Child& c : children) {
    if (!c.exited) kill(c.pid, SIGTERM);
  }
  auto until = std::chrono::steady_clock::now() + grace;
  for (Child& c : children) {
    while (!c.exited) {
      int status;
      pid_t r = waitpid(c.pid, &status, WNOHANG);
      if (r == c.pid || (r < 0 && errno == ECHILD)) {
        c.exited = true;
        break;
      }
      if (std::chrono::steady_clock::now() > until) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
        c.exited = true;
        break;
      }
      usleep(20000);
    }
  }
}

// `bmas --state-dir DIR [--config FILE]`: the start of a child's command line.
std::vector<std::string> SelfArgs(const UpOptions& options, const std::string& dir) {
  std::vector<std::string> args = {options.self_exe, "--state-dir", dir};
  if (!options.config.source.empty()) {
    args.push_back("--config");
    args.push_back(options.config.source);
  }
  return args;
}

// Starts `bmas ARGS...` beside the others: a helper that serves /metrics. Returns its summary
// lines; one that fails to start is stopped and the line says why (it is not fatal).
std::string StartHelper(const UpOptions& options, const std::string& dir, const std::string& name,
                        const std::string& log, const std::vector<std::string>& args,
                        const std::string& what, std::vector<Child>& children) {
  Child c;
  c.name = name;
  c.log = (fs::path(dir) / "logs" / log).string();
  std::vector<std::string> argv = SelfArgs(options, dir);
  argv.insert(argv.end(), args.begin(), args.end());
  auto spawned = Spawn(argv, c.log);
  if (!spawned) return fmt::format("  {:<10} not started: {}\n", name, spawned.error().message);
  c.pid = spawned->first;
  auto url = ReadListeningUrl(spawned->second, std::chrono::seconds(15));
  close(spawned->second);
  if (!url) {
    std::vector<Child> failed = {c};
    StopAll(failed, std::chrono::seconds(2));
    return fmt::format("  {:<10} not started: {}; its log {} ends with:\n{}", name,
                       url.error().message, c.log, LogTail(c.log));
  }
  c.url = url->url;
  children.push_back(c);
  return fmt::format("  {:<10} {:<28} {}: {}/metrics\n  {:<10} {:<28} log {}\n", name, c.url,
                     what, c.url, "", "", c.log);
}

}  // namespace

namespace {

// The cluster's config for every user's bmas (common/config.h, kSystemConfigPath), written
// when absent by root's `bmas up` on the default state dir with no config of its own: then a
// student's `bmas run` and `bmas workspace shell` find this cluster with nothing set. Returns
// the summary's line, "" when nothing was written.
std::string WriteSystemConfig(const Config& config, const std::string& dir) {
  std::error_code ec;
  if (geteuid() != 0 || !config.source.empty() || fs::exists(kSystemConfigPath, ec) ||
      fs::weakly_canonical(dir, ec) != fs::path(kDefaultStateDir)) {
    return "";
  }
  const fs::path path(kSystemConfigPath);
  fs::create_directories(path.parent_path(), ec);
  std::ofstream out(path);
  out << "# The cluster's bmas settings, read by every user's bmas (written by `bmas up`; an admin\n"
         "# may edit it: see examples/bmas.toml for every key).\n"
      << fmt::format("state_dir = \"{}\"\n", kDefaultStateDir);
  out.close();
  if (!out) return fmt::format("  {:<10} cannot write {}\n", "config", kSystemConfigPath);
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                            fs::perms::others_read,
                  ec);
  return fmt::format("  {:<10} {:<28} written: every user's bmas finds this cluster\n", "config",
                     kSystemConfigPath);
}

}  // namespace

int RunUp(const UpOptions& options) {
  const std::string& dir = options.state_dir;
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "logs", ec);
  fs::create_directories(fs::path(dir) / "run", ec);
  if (ec) {
    fmt::print(stderr, "bmas up: cannot create the state dir {}: {} (pick another with --state-dir "
               "or BMAS_STATE_DIR)\n", dir, ec.message());
    return 1;
  }
  // The state dir is read by daemons running under their own users; make it traversable.
  chmod(dir.c_str(), 0755);

  // One `bmas up` per state dir.
  const std::string run_dir = (fs::path(dir) / "run").string();
  auto locked = LockPrivateFile(run_dir, "up.lock", /*wait=*/false);
  if (!locked) {
    if (locked.error().code != ErrorCode::kUnavailable) {
      fmt::print(stderr, "bmas up: {}\n", locked.error().message);
      return 1;
    }
    std::ifstream in(run_dir + "/up.lock");
    std::string pid;
    std::getline(in, pid);
    fmt::print(stderr, "bmas up: another bmas up (pid {}) is running with state dir {}; stop it "
               "first or use another --state-dir\n", pid.empty() ? "?" : pid, dir);
    return 1;
  }
  const int lock = *locked;
  if (ftruncate(lock, 0) == 0) {
    std::string pid = std::to_string(getpid()) + "\n";
    [[maybe_unused]] ssize_t n = write(lock, pid.data(), pid.size());
  }

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);  // the terminal closed: stop everything, as on Ctrl-C
  sigaddset(&signals, SIGCHLD);
  sigprocmask(SIG_BLOCK, &signals, nullptr);

  const Config& config = options.config;
  const EngineSettings& e = config.engine;
  fmt::print("bmas up: state dir {}\n", dir);
  // The engines and the gateway face the network: as root, they run as the service account,
  // which owns the store (the gateway meters into it).
  const ServiceAccount service =
      PrepareServiceAccount(options.self_exe, dir, options.config.source);
  if (!service.name.empty()) {
    if (auto r = HandStoreTo(dir, service.uid, service.gid); !r) {
      fmt::print(stderr, "bmas up: {}\n", r.error().message);
      return 1;
    }
  }
  const std::string runs_as = service.name.empty()
                                  ? fmt::format("as uid {} ({})", geteuid(), service.why_not)
                                  : fmt::format("as the {} account", service.name);
  // `bmas ...` as the service account.
  auto service_args = [&] {
    std::vector<std::string> args = service.Prefix();
    const std::vector<std::string> self = SelfArgs(options, dir);
    args.insert(args.end(), self.begin(), self.end());
    return args;
  };
  std::vector<Child> children;
  auto fail = [&](const std::string& message) {
    fmt::print(stderr, "bmas up: {}\n", message);
    StopAll(children, std::chrono::seconds(5));
    return 1;
  };
  // One random key between this machine's engines and its gateway (vLLM's --api-key), handed
  // over in their environment, which only their owner can read.
  std::string backend_key;
  {
    unsigned char bytes[32];
    size_t got = 0;
    while (got < sizeof bytes) {
      ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
      if (n > 0) got += static_cast<size_t>(n);
    }
    for (unsigned char b : bytes) backend_key += fmt::format("{:02x}", b);
  }
  for (int i = 0; i < config.up.engines; ++i) {
    Child c;
    c.name = fmt::format("engine-{}", i);
    c.log = (fs::path(dir) / "logs" / (c.name + ".log")).string();
    int port = config.up.engine_base_port > 0 ? config.up.engine_base_port + i : 0;
    std::vector<std::string> args = service_args();
    args.insert(args.end(), {"engine", "--port", std::to_string(port)});
    auto spawned = Spawn(args, c.log, {"VLLM_API_KEY=" + backend_key});
    if (!spawned) return fail(fmt::format("{}: {}", c.name, spawned.error().message));
    c.pid = spawned->first;
    children.push_back(c);
    auto url = ReadListeningUrl(spawned->second, std::chrono::seconds(15));
    close(spawned->second);
    if (!url) {
      return fail(fmt::format("{} {}; its log {} ends with:\n{}", c.name, url.error().message,
                              c.log, LogTail(c.log)));
    }
    children.back().url = url->url;
  }

  const size_t num_engines = children.size();
  std::string gateway_metrics_url;
  if (config.up.gateway && num_engines > 0) {
    Child g;
    g.name = "gateway";
    g.log = (fs::path(dir) / "logs" / "gateway.log").string();
    std::vector<std::string> args = service_args();
    args.push_back("gateway");
    for (size_t i = 0; i < num_engines; ++i) {
      args.push_back("--backend");
      args.push_back(children[i].url);
    }
    auto spawned = Spawn(args, g.log, {"BMAS_BACKEND_API_KEY=" + backend_key});
    if (!spawned) return fail(fmt::format("gateway: {}", spawned.error().message));
    g.pid = spawned->first;
    children.push_back(g);
    auto url = ReadListeningUrl(spawned->second, std::chrono::seconds(15));
    close(spawned->second);
    if (!url) {
      return fail(fmt::format("gateway {}; its log {} ends with:\n{}", url.error().message, g.log,
                              LogTail(g.log)));
    }
    children.back().url = url->url;
    gateway_metrics_url = url->metrics_url;
  }

  // A local Slurm when this machine can run one; otherwise why not. Left alone when
  // `bmas slurm up` already runs one in this state dir.
  std::string slurm_line;
  bool slurm_started = false;
  if (config.up.slurm) {
    auto running = slurm::ReadLocalCluster(dir);
    std::string why = slurm::LocalClusterPrerequisites();
    if (running) {
      slurm_line = fmt::format("  {:<10} {:<28} local Slurm started by `bmas slurm up`; left "
                               "running\n",
                               "slurm", running->rest_url());
    } else if (!why.empty()) {
      slurm_line = fmt::format("  {:<10} not started: {}\n", "slurm", why);
    } else {
      auto cluster = slurm::StartLocalCluster(slurm::BuiltinLocalCluster(), "", dir,
                                              std::chrono::seconds(60));
      if (cluster) {
        slurm_started = true;
        slurm_line = fmt::format(
            "  {:<10} {:<28} local Slurm (slurmrestd): nodes {}, {} fake GPUs each\n"
            "  {:<10} {:<28} SLURM_CONF={}; `bmas run` submits jobs\n",
            "slurm", cluster->rest_url(), fmt::join(cluster->nodes, " "),
            cluster->gpus_per_node, "", "", cluster->conf);
      } else {
        slurm_line = fmt::format("  {:<10} not started: {}\n", "slurm", cluster.error().message);
      }
    }
  }

  // With a Slurm to watch: `bmas slurm monitor` serves its /metrics and records finished jobs.
  std::string monitor_line;
  if (slurm::ReadLocalCluster(dir)) {
    monitor_line = StartHelper(
        options, dir, "slurm-mon", "slurm-monitor.log",
        {"slurm", "monitor", "--port", std::to_string(config.up.slurm_monitor_port)},
        "Slurm jobs and GPUs per user and partition, mode", children);
  }

  // LXD for workspaces, when this machine can run it; otherwise why not. An LXD that runs
  // already (the system's, or `bmas lxd up`'s) is only prepared, and left running.
  std::string lxd_line;
  bool lxd_started = false;
  if (config.up.lxd) {
    std::string why = lxd::LxdPrerequisites();
    auto before = lxd::ReadLocalLxd(dir);
    auto ready = why.empty() ? lxd::StartLocalLxd(config.lxd, dir)
                             : Result<lxd::LocalLxd>(Error{ErrorCode::kUnavailable, why});
    if (ready) {
      lxd_started = !ready->started.empty() && (!before || before->started.empty());
      lxd_line = fmt::format(
          "  {:<10} {:<28} LXD for workspaces (pool {}); `bmas workspace create USER`\n", "lxd",
          ready->socket, ready->pool_driver);
    } else {
      lxd_line = fmt::format("  {:<10} not started: {}\n", "lxd", ready.error().message);
    }
  }

  // With both: `bmas agent` runs jobs in their users' workspaces and unplugs stray GPUs.
  std::string agent_line;
  if (!lxd_line.empty() && lxd_line.find("not started") == std::string::npos &&
      slurm::ReadLocalCluster(dir)) {
    agent_line = StartHelper(options, dir, "agent", "agent.log",
                             {"agent", "--metrics-port", "0"},
                             "runs jobs in workspaces, unplugs stray GPUs", children);
  }

  std::string summary;
  for (const Child& c : children) {
    if (c.name == "slurm-mon" || c.name == "agent") continue;  // after Slurm's and LXD's lines
    if (c.name == "gateway") {
      summary += fmt::format("  {:<10} {:<28} OpenAI-compatible gateway ({} routing, {} fairness) "
                             "over the engines{}\n",
                             c.name, c.url, config.gateway.routing, config.gateway.fairness,
                             gateway_metrics_url.empty()
                                 ? std::string()
                                 : "; operator metrics: " + gateway_metrics_url);
    } else {
      summary += fmt::format("  {:<10} {:<28} simulated vLLM engine, model {}, profile {}\n",
                             c.name, c.url, e.model, e.profile);
    }
    summary += fmt::format("  {:<10} {:<28} log {}\n", "", "", c.log);
  }
  if (children.empty() && slurm_line.empty()) {
    summary = "  (no components configured: [up] engines = 0)\n";
  }
  if (num_engines > 0) summary += fmt::format("  engines and gateway run {}\n", runs_as);
  summary += WriteSystemConfig(config, dir);
  summary += slurm_line + monitor_line + lxd_line + agent_line;
  fmt::print("{}", summary);
  if (num_engines > 0 && config.up.gateway) {
    fmt::print("Call the gateway with a key: bmas user add NAME && bmas key create NAME (same "
               "--state-dir)\n");
  }
  std::ofstream(fs::path(dir) / "run" / "up.txt") << summary;
  fmt::print("bmas up: running; press Ctrl-C to stop everything it started.\n");
  std::fflush(stdout);

  int exit_code = 0;
  while (true) {
    siginfo_t info;
    timespec tick{1, 0};
    int sig = sigtimedwait(&signals, &info, &tick);
    if (sig == SIGHUP) {
      // The terminal is gone: what up still has to say goes to its own log.
      const std::string log = (fs::path(dir) / "logs" / "up.log").string();
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd >= 0) {
        std::fflush(stdout);
        std::fflush(stderr);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
      }
    }
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      fmt::print("bmas up: stopping{}...\n", sig == SIGHUP ? " (its terminal hung up)" : "");
      break;
    }
    bool died = false;
    for (Child& c : children) {
      int status;
      if (!c.exited && waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.exited = true;
        died = true;
        fmt::print(stderr, "bmas up: {} exited unexpectedly ({}); its log {} ends with:\n{}",
                   c.name,
                   WIFEXITED(status) ? fmt::format("status {}", WEXITSTATUS(status))
                                     : fmt::format("signal {}", WTERMSIG(status)),
                   c.log, LogTail(c.log));
      }
    }
    if (died) {
      exit_code = 1;
      break;
    }
  }
  StopAll(children, std::chrono::seconds(e.shutdown_timeout_s + 5));
  if (slurm_started) {
    if (auto stopped = slurm::StopLocalCluster(dir); !stopped) {
      fmt::print(stderr, "bmas up: stopping Slurm: {}\n", stopped.error().message);
    }
  }
  if (lxd_started) {
    if (auto stopped = lxd::StopLocalLxd(dir); !stopped) {
      fmt::print(stderr, "bmas up: stopping LXD: {}\n", stopped.error().message);
    }
  }
  fs::remove(fs::path(dir) / "run" / "up.txt", ec);
  fmt::print("bmas up: stopped.\n");
  return exit_code;
}

}  // namespace bmas
