#include "daemon/up.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cluster/cluster_files.h"
#include "common/config_table.h"
#include "common/listen_socket.h"
#include "common/private_files.h"
#include "common/process.h"
#include "common/restart_backoff.h"
#include "daemon/up_children.h"
#include "daemon/up_plan.h"
#include "daemon/up_record.h"
#include "daemon/secret.h"
#include "daemon/service_account.h"
#include "store/store.h"
#include "common/result.h"
#include "daemon/services.h"
#include "lxd/image_build.h"
#include "lxd/local_lxd.h"
#include "slurm/local_cluster.h"

namespace bmas {
namespace {

namespace fs = std::filesystem;

// How soon a part that died is started again: 1 s, doubling to 30 s; reset after 60 s up.
constexpr RestartBackoff kRestartBackoff{};

std::string ClockTime() {
  return fmt::format("{:%H:%M:%S}", fmt::localtime(std::time(nullptr)));
}

long long SecondsUntil(std::chrono::steady_clock::time_point at,
                       std::chrono::steady_clock::time_point now) {
  return std::chrono::ceil<std::chrono::seconds>(at - now).count();
}

// Operator data stays with operators (../shared/SECURITY.md): the logs directory is closed to
// others, and each log in it already there (from an older bmas, created 0644) loses the bits
// for others. Links are left alone (no one else can write the directory to plant one).
void RestrictLogs(const fs::path& logs) {
  chmod(logs.c_str(), 0750);
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(logs, ec)) {
    if (entry.is_symlink(ec) || !entry.is_regular_file(ec)) continue;
    struct stat st {};
    if (stat(entry.path().c_str(), &st) == 0 && (st.st_mode & 027) != 0) {
      chmod(entry.path().c_str(), st.st_mode & 0750);
    }
  }
}

// Writes `text` to run/`name`, mode 0640 even when the file was there before (a summary that
// names the operator listeners and the logs).
void WriteRunFile(const std::string& run_dir, const std::string& name, const std::string& text) {
  auto dir = OpenPrivateDir(run_dir);
  if (!dir) return;
  auto fd = OpenInPrivateDir(*dir, run_dir, name, O_WRONLY | O_CREAT | O_TRUNC, 0640);
  close(*dir);
  if (!fd) return;
  fchmod(*fd, 0640);
  [[maybe_unused]] ssize_t n = write(*fd, text.data(), text.size());
  close(*fd);
}

// "host:port" of "http://host:port/...".
std::string HostPort(std::string url) {
  if (size_t scheme = url.find("://"); scheme != std::string::npos) url = url.substr(scheme + 3);
  return url.substr(0, url.find('/'));
}

// A Prometheus scrape config for the operator listeners `targets` (name, host:port), carrying
// the operator secret through `authorization: credentials_file:` (never the secret itself).
std::string PrometheusConfig(const std::vector<std::pair<std::string, std::string>>& targets,
                             const std::string& secret_file) {
  std::string text = fmt::format(
      "# Prometheus scrape config for bmas's operator listeners (written by `bmas up`).\n"
      "# They answer only with the operator secret. {} is readable by root and the bmas\n"
      "# account alone: give Prometheus its own copy (install -m 0400 -o prometheus {} \\\n"
      "#   /etc/prometheus/bmas.secret) and point credentials_file there.\n"
      "scrape_configs:\n",
      secret_file, secret_file);
  for (const auto& [name, target] : targets) {
    text += fmt::format(
        "  - job_name: bmas-{}\n"
        "    authorization:\n"
        "      type: Bearer\n"
        "      credentials_file: {}\n"
        "    static_configs:\n"
        "      - targets: ['{}']\n",
        name, secret_file, target);
  }
  return text;
}


// The cluster's config for every user's bmas (common/config.h, kSystemConfigPath), written by
// root's `bmas up` on the default state dir with no config of its own when there is none
// (UpPlan::write_system_config): then a student's `bmas run` and `bmas workspace shell` find
// this cluster with nothing set. Returns the summary's line.
std::string WriteSystemConfig() {
  std::error_code ec;
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

// Makes the state dir and takes its lock (one `bmas up` per state dir). nullopt, having said
// why, when up cannot go on.
std::optional<int> LockStateDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "logs", ec);
  fs::create_directories(fs::path(dir) / "run", ec);
  if (ec) {
    fmt::print(stderr, "bmas up: cannot create the state dir {}: {} (pick another with --state-dir "
               "or BMAS_STATE_DIR)\n", dir, ec.message());
    return std::nullopt;
  }
  // The state dir is read by daemons running under their own users; make it traversable.
  chmod(dir.c_str(), 0755);
  RestrictLogs(fs::path(dir) / "logs");

  const std::string run_dir = (fs::path(dir) / "run").string();
  auto locked = LockPrivateFile(run_dir, "up.lock", /*wait=*/false);
  if (!locked) {
    if (locked.error().code != ErrorCode::kUnavailable) {
      fmt::print(stderr, "bmas up: {}\n", locked.error().message);
      return std::nullopt;
    }
    std::ifstream in(run_dir + "/up.lock");
    std::string pid;
    std::getline(in, pid);
    fmt::print(stderr, "bmas up: another bmas up (pid {}) is running with state dir {}; stop it "
               "first or use another --state-dir\n", pid.empty() ? "?" : pid, dir);
    return std::nullopt;
  }
  const int lock = *locked;
  if (ftruncate(lock, 0) == 0) {
    std::string pid = std::to_string(getpid()) + "\n";
    [[maybe_unused]] ssize_t n = write(lock, pid.data(), pid.size());
  }
  return lock;
}

// Up waits for these with sigtimedwait; blocked, so that none ends it before it stops its parts.
sigset_t BlockSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);  // the terminal closed: stop everything, as on Ctrl-C
  sigaddset(&signals, SIGCHLD);
  sigprocmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// The engines and the gateway face the network: as root, they run as the service account,
// which owns the store (the gateway meters into it) and reads the operator secret. nullopt,
// having said why, when up cannot go on.
std::optional<ServiceAccount> PrepareAccounts(const UpOptions& options) {
  const std::string& dir = options.state_dir;
  ServiceAccount service = PrepareServiceAccount(options.self_exe, dir, options.config.source);
  if (!service.name.empty()) {
    if (auto r = HandStoreTo(dir, service.uid, service.gid); !r) {
      fmt::print(stderr, "bmas up: {}\n", r.error().message);
      return std::nullopt;
    }
  }
  // The secret every operator listener asks for: root and the service account (which runs the
  // gateway, the dashboard and the controller) read it; no one else.
  if (auto secret = EnsureOperatorSecret(dir); !secret) {
    fmt::print(stderr, "bmas up: {}\n", secret.error().message);
    return std::nullopt;
  }
  if (!service.name.empty()) {
    if (auto r = HandOperatorSecretTo(dir, service.uid, service.gid); !r) {
      fmt::print(stderr, "bmas up: {}\n", r.error().message);
      return std::nullopt;
    }
  }
  return service;
}

// What PlanUp decides from: the machine as up finds it before it starts anything.
UpFacts GatherUpFacts(const UpOptions& options, const ServiceAccount& service,
                      const std::optional<UpRecord>& previous) {
  const std::string& dir = options.state_dir;
  UpFacts facts;
  facts.service_name = service.name;
  facts.service_why_not = service.why_not;
  facts.service_prefix = service.Prefix();
  facts.euid = geteuid();
  if (previous) {
    facts.previous_pid = previous->pid;
    facts.previous_owns_slurm = previous->owns_slurm;
    facts.previous_owns_lxd = previous->owns_lxd;
  }
  if (auto running = slurm::RunningLocalCluster(dir)) {
    facts.slurm_running_url = running->rest_url();
  }
  if (options.config.up.slurm) facts.slurm_why_not = slurm::LocalClusterPrerequisites();
  if (options.config.up.lxd) facts.lxd_why_not = lxd::LxdPrerequisites();
  std::error_code ec;
  facts.system_config_exists = fs::exists(kSystemConfigPath, ec);
  facts.default_state_dir = fs::weakly_canonical(dir, ec) == fs::path(kDefaultStateDir);
  facts.replica_ca = fs::exists(cluster::ReplicaCaPath(dir), ec);
  for (const std::string& file : {options.config.up.cluster, options.config.source}) {
    if (file.empty()) continue;
    try {
      const std::string rest = LoadCluster(file).slurm.slurmrestd;
      if (rest.starts_with("https://")) facts.slurmrestd_https = rest;
      break;
    } catch (const ConfigError&) {
      // No inventory there (a config without [cluster]); StartSlurm names a bad [up] cluster.
    }
  }
  if (!options.config.up.slurm && options.config.up.cluster.empty() &&
      !options.config.source.empty()) {
    try {
      facts.cluster_slurm = LoadCluster(options.config.source).slurm.slurmrestd;
    } catch (const ConfigError&) {
      // No [cluster] in the config: up runs without Slurm, and says so.
    }
  }
  return facts;
}

// A part's summary line once it started, and its log's.
std::string StartedLine(const UpPartPlan& p, const Child& c) {
  std::string what = p.what;
  if (p.what_names_metrics) what += fmt::format(": {}/metrics", c.url);
  if (p.what_names_operator_metrics && !c.metrics_url.empty()) {
    what += "; operator metrics: " + c.metrics_url;
  }
  return fmt::format("  {:<10} {:<28} {}\n  {:<10} {:<28} log {}\n", p.name,
                     p.shown.empty() ? c.url : p.shown, what, "", "", c.log);
}

// Runs an UpPlan: brings up Slurm, the deployment, the parts and LXD in the plan's order, then
// supervises the parts (starting one that dies again) until signalled, and stops it all.
class UpRun {
 public:
  UpRun(const UpOptions& options, const ServiceAccount& service)
      : options_(options), dir_(options.state_dir),
        run_dir_((fs::path(options.state_dir) / "run").string()), service_(service) {
    record_.pid = getpid();
    record_.start_ticks = ProcessStartTicks(getpid());
    record_.since = std::time(nullptr);
    record_.state_dir = dir_;
  }

  // Starts what PlanUp says for `facts` and prints the summary; false (all it started stopped,
  // and said why) when up must stop.
  bool Start(UpFacts& facts) {
    Save();
    // One random backend secret for this machine's gateway, engines and controller, handed
    // over in their environment, which only their owner can read. Each engine's key (vLLM's
    // --api-key) is derived from it and the engine's port (common/backend_identity.h).
    backend_key_ = NewSecretHex(32);
    plan_ = PlanUp(options_, facts);
    slurm_line_ = plan_.slurm_line;
    if (plan_.slurm == UpSlurm::kStart) StartSlurm(facts);
    if (!plan_.deploy.empty() && !Deploy()) return false;
    for (size_t i = 0; i <= plan_.parts.size(); ++i) {
      if (i == plan_.lxd_at) StartLxd();
      if (i < plan_.parts.size() && !StartPart(i)) return false;
    }
    record_.owns_slurm = plan_.owns_slurm;
    record_.owns_lxd = owns_lxd_;
    Save();
    PrintSummary();
    return true;
  }

  // Until SIGINT, SIGTERM or SIGHUP: a part that died is started again after a backoff.
  void Supervise(const sigset_t& signals) {
    while (true) {
      siginfo_t info;
      timespec tick{1, 0};
      int sig = sigtimedwait(&signals, &info, &tick);
      if (sig == SIGHUP) {
        // The terminal is gone: what up still has to say goes to its own log.
        const std::string log = (fs::path(dir_) / "logs" / "up.log").string();
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
        return;
      }
      bool changed = false;
      for (Child& c : children_) changed = Restart(c) || changed;
      if (changed) Save();
    }
  }

  // Stops the parts, and the Slurm and LXD this up owns.
  void Stop() {
    StopAll(children_, plan_.stop_grace);
    if (plan_.owns_slurm) {
      if (auto stopped = slurm::StopLocalCluster(dir_); !stopped) {
        fmt::print(stderr, "bmas up: stopping Slurm: {}\n", stopped.error().message);
      }
    }
    if (owns_lxd_) {
      if (auto stopped = lxd::StopLocalLxd(dir_); !stopped) {
        fmt::print(stderr, "bmas up: stopping LXD: {}\n", stopped.error().message);
      }
    }
    std::error_code ec;
    fs::remove(fs::path(run_dir_) / "up.txt", ec);
    fs::remove(fs::path(run_dir_) / "prometheus.yml", ec);
    RemoveUpRecord(dir_);
    fmt::print("bmas up: stopped.\n");
  }

 private:
  // run/up.json: what runs now, for `bmas up --status`, the downs and the next up.
  void Save() {
    record_.parts.clear();
    const auto now = std::chrono::steady_clock::now();
    for (const Child& c : children_) {
      UpRecord::Part part{c.name, c.pid, c.start_ticks, c.url, c.log, "running", 0,
                          c.restarts, c.last_exit};
      if (c.exited) {
        part.state = c.restart_at ? "restarting" : "down";
        if (c.restart_at) {
          part.restart_at = std::time(nullptr) +
                            std::chrono::duration_cast<std::chrono::seconds>(*c.restart_at - now)
                                .count();
        }
      }
      record_.parts.push_back(std::move(part));
    }
    if (auto written = WriteUpRecord(dir_, record_); !written) {
      fmt::print(stderr, "bmas up: {} (`bmas up --status` cannot see this run)\n",
                 written.error().message);
    }
  }

  bool Fail(const std::string& message) {
    fmt::print(stderr, "bmas up: {}\n", message);
    StopAll(children_, std::chrono::seconds(5));
    RemoveUpRecord(dir_);
    return false;
  }

  // The plan said to start a local Slurm. When it does not start, the plan is made again
  // without it (the engines run as processes, nothing watches Slurm).
  void StartSlurm(UpFacts& facts) {
    const std::string& file = options_.config.up.cluster;
    Result<slurm::LocalCluster> cluster = Error{ErrorCode::kInvalidArgument, ""};
    try {
      cluster = slurm::StartLocalCluster(file.empty() ? slurm::BuiltinLocalCluster()
                                                      : LoadCluster(file),
                                         file, dir_, std::chrono::seconds(60));
    } catch (const ConfigError& e) {
      cluster = Error{ErrorCode::kInvalidArgument, fmt::format("[up] cluster: {}", e.what())};
    }
    if (!cluster) {
      facts.slurm_start_error = cluster.error().message;
      plan_ = PlanUp(options_, facts);
      slurm_line_ = plan_.slurm_line;
      return;
    }
    slurm_line_ = fmt::format(
        "  {:<10} {:<28} local Slurm (slurmrestd): nodes {}, {} fake GPUs each\n"
        "  {:<10} {:<28} SLURM_CONF={}; `bmas run` submits jobs\n",
        "slurm", cluster->rest_url(), fmt::join(cluster->nodes, " "), cluster->gpus_per_node, "",
        "", cluster->conf);
  }

  // The inference deployment whose replicas the controller runs.
  bool Deploy() {
    auto deployed = RunCommand(plan_.deploy, {}, std::chrono::seconds(30));
    if (!deployed || deployed->exit_code != 0) {
      return Fail(fmt::format("deploying {}: {}", plan_.model,
                              deployed ? deployed->err : deployed.error().message));
    }
    return true;
  }

  // LXD for workspaces. An LXD that runs already (the system's, or `bmas lxd up`'s) is only
  // prepared, and left running.
  void StartLxd() {
    if (plan_.lxd == UpLxd::kCannot) machine_lines_ += plan_.lxd_line;
    if (plan_.lxd != UpLxd::kStart) return;
    auto before = lxd::ReadLocalLxd(dir_);
    auto ready = lxd::StartLocalLxd(options_.config.lxd, dir_, options_.config.gpu.driver_root);
    if (!ready) {
      machine_lines_ += fmt::format("  {:<10} not started: {}\n", "lxd", ready.error().message);
      return;
    }
    lxd_ready_ = true;
    owns_lxd_ = !ready->started.empty() && (!before || before->started.empty());
    // The LXD a dead bmas up started is adopted, as its Slurm is.
    if (plan_.previous_owns_lxd && before && !before->started.empty()) owns_lxd_ = true;
    machine_lines_ += fmt::format(
        "  {:<10} {:<28} LXD for workspaces (pool {}); `bmas workspace create USER`\n", "lxd",
        ready->socket, ready->pool_driver);
    if (plan_.default_image) DefaultImage(ready->socket);
  }

  // The image `workspace create` uses when none is named, so that a student's first workspace
  // works on a fresh machine: imported from the cache, else built, which takes minutes once.
  void DefaultImage(const std::string& socket) {
    auto client = RealServices().Lxd(socket, std::chrono::seconds(600));
    auto held = lxd::ImageByAlias(*client, lxd::kDefaultImageAlias);
    if (held && !*held) {
      fmt::print("bmas up: LXD has no workspace image {}: importing it from {}, or building it "
                 "when it is not there (debootstrap from apt's mirror: minutes, once)...\n",
                 lxd::kDefaultImageAlias, lxd::kImageCacheDir);
      std::fflush(stdout);
    }
    auto built = lxd::EnsureDefaultImage(*client, (fs::path(dir_) / "run").string(),
                                         lxd::kImageCacheDir, RealServices().env());
    if (!built) {
      machine_lines_ += fmt::format(
          "  {:<10} not ready: {} (then `bmas image build`; `workspace create` needs an image)\n",
          "image", built.error().message);
      return;
    }
    const std::string how = built->existed      ? "in LXD already"
                            : built->from_cache ? fmt::format("imported from the cache in {:.1f} s",
                                                              built->seconds)
                                                : fmt::format("built in {:.0f} s, and cached",
                                                              built->seconds);
    machine_lines_ += fmt::format("  {:<10} {:<28} default workspace image ({}); Debian 12, "
                                  "python3, git, build-essential\n",
                                  "image", lxd::kDefaultImageAlias, how);
  }

  // The flags and values of `p`'s links; nullopt when a link it needs has no value.
  std::optional<std::vector<std::string>> LinkArgs(const UpPartPlan& p) const {
    std::vector<std::string> args;
    for (const UpLink& link : p.links) {
      std::vector<std::string> values;
      for (size_t i = 0; i < children_.size(); ++i) {
        const UpPartKind kind = plan_.parts[started_[i]].kind;
        const Child& c = children_[i];
        if (link.to == UpLinkTo::kEngines && kind == UpPartKind::kEngine) {
          values.push_back(c.url);
        } else if (link.to == UpLinkTo::kGatewayMetrics && kind == UpPartKind::kGateway &&
                   !c.metrics_url.empty()) {
          values.push_back(HostPort(c.metrics_url));
        } else if (link.to == UpLinkTo::kAgent && kind == UpPartKind::kAgent) {
          // An agent off loopback serves TLS: the dashboard needs its https:// URL.
          values.push_back(c.url.starts_with("https://") ? c.url : HostPort(c.url));
        }
      }
      if (link.to == UpLinkTo::kSlurmRest) {
        if (auto local = slurm::RunningLocalCluster(dir_)) {
          values.push_back(HostPort(local->rest_url()));
        }
      }
      if (values.empty() && link.required) return std::nullopt;
      for (std::string& value : values) {
        args.push_back(link.flag);
        args.push_back(std::move(value));
      }
    }
    return args;
  }

  // Made 0750 (operator data), and handed to the service account; "" or why not.
  std::string MakePrivateDir(const std::string& path) {
    std::error_code ec;
    fs::create_directories(path, ec);
    chmod(path.c_str(), 0750);
    if (service_.name.empty()) return "";
    if (auto handed = HandDirTo(path, service_.uid, service_.gid); !handed) {
      return fmt::format("cannot hand {} to {}: {}", path, service_.name, handed.error().message);
    }
    return "";
  }

  // Starts plan_.parts[index]; false when up must stop (an essential part did not start).
  bool StartPart(size_t index) {
    const UpPartPlan& p = plan_.parts[index];
    if (p.needs_lxd && !lxd_ready_) return true;
    auto linked = LinkArgs(p);
    if (!linked) return true;
    const auto labelled = [&](const std::string& why) {
      return p.essential ? fmt::format("{} {}", p.fail_label, why) : why;
    };
    Child c;
    c.name = p.name;
    c.log = p.log;
    c.args = p.args;
    for (const UpListenerPlan& l : p.listeners) {
      if (!l.error.empty()) return GiveUp(p, c, l.error);
      auto port = HoldListener(c, l.host, l.port);
      if (!port) return GiveUp(p, c, labelled(l.bind_error_prefix + port.error().message));
      c.args.insert(c.args.end(),
                    {l.flag, l.pass_host ? JoinHostPort(l.host, *port) : std::to_string(*port)});
    }
    c.args.insert(c.args.end(), linked->begin(), linked->end());
    c.args.insert(c.args.end(), p.trailing_args.begin(), p.trailing_args.end());
    if (p.backend_key) c.env = {"BMAS_BACKEND_API_KEY=" + backend_key_};
    c.port_flag = p.port_flag;
    if (!p.private_dir.empty()) {
      if (std::string why = MakePrivateDir(p.private_dir); !why.empty()) return GiveUp(p, c, why);
    }
    if (auto started = StartChild(c, std::chrono::seconds(15)); !started) {
      return GiveUp(p, c, labelled(started.error().message));
    }
    children_.push_back(c);
    started_.push_back(index);
    LinesOf(p) += StartedLine(p, c);
    Save();
    return true;
  }

  // Where the summary says how `p` went.
  std::string& LinesOf(const UpPartPlan& p) { return p.serving ? serving_lines_ : machine_lines_; }

  // `p` did not start: up stops when it is essential; otherwise the summary says why.
  bool GiveUp(const UpPartPlan& p, Child& c, std::string why) {
    ReleaseListeners(c);
    if (p.essential) return Fail(why);
    if (!why.ends_with('\n')) why += '\n';
    LinesOf(p) += fmt::format("  {:<10} not started: {}", p.name, why);
    return true;
  }

  // Reaps `c` when it died, and starts it again when its backoff is over (on the same port:
  // engines keep their URLs in the gateway's list). Up goes on running meanwhile: one engine's
  // crash must not take the gateway and every user's stream with it. Whether `c` changed.
  bool Restart(Child& c) {
    bool changed = false;
    const auto now = std::chrono::steady_clock::now();
    if (auto how = ReapChild(c)) {
      c.last_exit = fmt::format("{} at {}", *how, ClockTime());
      c.restart_at = NextRestart(kRestartBackoff, c.deaths, c.started, now);
      fmt::print(stderr, "bmas up: {} (pid {}) exited unexpectedly ({}); starting it again in {} "
                 "s; its log {} ends with:\n{}",
                 c.name, c.pid, *how, SecondsUntil(*c.restart_at, now), c.log, LogTail(c.log));
      changed = true;
    }
    if (c.restart_at && now >= *c.restart_at) {
      c.restart_at.reset();
      ++c.restarts;
      if (auto started = StartChild(c, std::chrono::seconds(15)); started) {
        fmt::print(stderr, "bmas up: {} started again (pid {}, restart {}), {}\n", c.name, c.pid,
                   c.restarts, c.url);
      } else {
        const std::string why = started.error().message.substr(
            0, started.error().message.find(';'));
        c.last_exit = fmt::format("did not start again ({}) at {}", why, ClockTime());
        const auto after = std::chrono::steady_clock::now();
        c.restart_at = NextRestart(kRestartBackoff, c.deaths, c.started, after);
        fmt::print(stderr, "bmas up: {} did not start again: {}\nbmas up: next try in {} s\n",
                   c.name, started.error().message, SecondsUntil(*c.restart_at, after));
      }
      changed = true;
    }
    return changed;
  }

  // What runs where, printed and kept in run/up.txt; run/prometheus.yml beside it.
  void PrintSummary() {
    std::string summary = serving_lines_;
    if (children_.empty() && slurm_line_.empty()) {
      summary = "  (no components configured: [up] engines = 0)\n";
    }
    summary += plan_.notes;
    if (plan_.write_system_config) summary += WriteSystemConfig();
    summary += slurm_line_ + machine_lines_;
    std::vector<std::pair<std::string, std::string>> targets;
    for (size_t i = 0; i < children_.size(); ++i) {
      const Child& c = children_[i];
      const UpScrape scrape = plan_.parts[started_[i]].scrape;
      if (scrape == UpScrape::kMetricsUrl && !c.metrics_url.empty()) {
        targets.emplace_back(c.name, HostPort(c.metrics_url));
      } else if (scrape == UpScrape::kUrl) {
        targets.emplace_back(c.name, HostPort(c.url));
      }
    }
    WriteRunFile(run_dir_, "prometheus.yml", PrometheusConfig(targets, OperatorSecretPath(dir_)));
    summary += fmt::format(
        "  {:<10} {:<28} scrape config with the operator secret: {}/prometheus.yml\n",
        "prometheus", "", run_dir_);
    fmt::print("{}", summary);
    if (plan_.key_hint) {
      fmt::print("Call the gateway with a key: bmas user add NAME && bmas key create NAME (same "
                 "--state-dir)\n");
    }
    WriteRunFile(run_dir_, "up.txt", summary);
    fmt::print("bmas up: running; press Ctrl-C to stop everything it started.\n");
    std::fflush(stdout);
  }

  const UpOptions& options_;
  const std::string dir_;
  const std::string run_dir_;
  const ServiceAccount service_;
  std::string backend_key_;
  UpPlan plan_;
  std::vector<Child> children_;
  std::vector<size_t> started_;  // children_[i] is plan_.parts[started_[i]]
  UpRecord record_;
  std::string slurm_line_;
  std::string serving_lines_;  // engines', the gateway's and the controller's summary lines
  std::string machine_lines_;  // the helpers', LXD's and the dashboard's, after Slurm's
  bool lxd_ready_ = false;
  bool owns_lxd_ = false;
};

}  // namespace

int RunUp(const UpOptions& options) {
  const std::string& dir = options.state_dir;
  if (!LockStateDir(dir)) return 1;  // held until up exits
  const sigset_t signals = BlockSignals();
  fmt::print("bmas up: state dir {}\n", dir);
  // A bmas up that died (SIGKILL, a crash) left its parts running: stop them, so that this one
  // does not start a second set beside them, and take over the Slurm and LXD it owned. The
  // processes are not adopted: they are not this process's children (it could not wait for
  // them), and the engines' key to the gateway died with their parent.
  std::optional<UpRecord> previous;
  if (auto stale = StopStaleRun(dir)) {
    fmt::print("{}", stale->second);
    previous = stale->first;
  }
  const std::optional<ServiceAccount> service = PrepareAccounts(options);
  if (!service) return 1;
  UpFacts facts = GatherUpFacts(options, *service, previous);
  UpRun run(options, *service);
  if (!run.Start(facts)) return 1;
  run.Supervise(signals);
  run.Stop();
  return 0;
}

}  // namespace bmas
