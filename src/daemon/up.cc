#include "daemon/up.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
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

#include "common/listen_socket.h"
#include "common/private_files.h"
#include "common/process.h"
#include "common/restart_backoff.h"
#include "daemon/up_children.h"
#include "daemon/up_record.h"
#include "daemon/secret.h"
#include "daemon/service_account.h"
#include "store/store.h"
#include "common/result.h"
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

// `bmas --state-dir DIR [--config FILE]`: the start of a child's command line.
std::vector<std::string> SelfArgs(const UpOptions& options, const std::string& dir) {
  std::vector<std::string> args = {options.self_exe, "--state-dir", dir};
  if (!options.config.source.empty()) {
    args.push_back("--config");
    args.push_back(options.config.source);
  }
  return args;
}

// Starts `bmas ARGS...` beside the others: a helper that serves /metrics on the port that
// `port_flag` sets. Returns its summary lines; one that fails to start is stopped and the line
// says why (it is not fatal).
std::string StartHelper(const UpOptions& options, const std::string& dir, const std::string& name,
                        const std::string& log, const std::vector<std::string>& args,
                        const std::string& port_flag, uint16_t port, const std::string& what,
                        std::vector<Child>& children) {
  Child c;
  c.name = name;
  c.log = (fs::path(dir) / "logs" / log).string();
  c.args = SelfArgs(options, dir);
  c.args.insert(c.args.end(), args.begin(), args.end());
  // Its listener is on loopback (slurm monitor's and agent's defaults), held by up.
  auto held = HoldListener(c, "127.0.0.1", port);
  if (!held) return fmt::format("  {:<10} not started: {}\n", name, held.error().message);
  c.args.insert(c.args.end(), {port_flag, std::to_string(*held)});
  c.port_flag = port_flag;
  if (auto started = StartChild(c, std::chrono::seconds(15)); !started) {
    ReleaseListeners(c);
    std::string why = started.error().message;
    if (!why.ends_with('\n')) why += '\n';
    return fmt::format("  {:<10} not started: {}", name, why);
  }
  children.push_back(c);
  return fmt::format("  {:<10} {:<28} {}: {}/metrics\n  {:<10} {:<28} log {}\n", name, c.url,
                     what, c.url, "", "", c.log);
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
  if (url.starts_with("http://")) url = url.substr(7);
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
  RestrictLogs(fs::path(dir) / "logs");

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
  // A bmas up that died (SIGKILL, a crash) left its parts running: stop them, so that this one
  // does not start a second set beside them, and take over the Slurm and LXD it owned. The
  // processes are not adopted: they are not this process's children (it could not wait for
  // them), and the engines' key to the gateway died with their parent.
  std::optional<UpRecord> previous;
  if (auto stale = StopStaleRun(dir)) {
    fmt::print("{}", stale->second);
    previous = stale->first;
  }
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
  // The secret every operator listener asks for: root and the service account (which runs the
  // gateway, the dashboard and the controller) read it; no one else.
  if (auto secret = EnsureOperatorSecret(dir); !secret) {
    fmt::print(stderr, "bmas up: {}\n", secret.error().message);
    return 1;
  }
  if (!service.name.empty()) {
    if (auto r = HandOperatorSecretTo(dir, service.uid, service.gid); !r) {
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
  UpRecord record;
  record.pid = getpid();
  record.start_ticks = ProcessStartTicks(getpid());
  record.since = std::time(nullptr);
  record.state_dir = dir;
  // run/up.json: what runs now, for `bmas up --status`, the downs and the next up.
  auto save = [&] {
    record.parts.clear();
    const auto now = std::chrono::steady_clock::now();
    for (const Child& c : children) {
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
      record.parts.push_back(std::move(part));
    }
    if (auto written = WriteUpRecord(dir, record); !written) {
      fmt::print(stderr, "bmas up: {} (`bmas up --status` cannot see this run)\n",
                 written.error().message);
    }
  };
  auto fail = [&](const std::string& message) {
    fmt::print(stderr, "bmas up: {}\n", message);
    StopAll(children, std::chrono::seconds(5));
    RemoveUpRecord(dir);
    return 1;
  };
  save();
  // One random backend secret for this machine's gateway, engines and controller, handed over
  // in their environment, which only their owner can read. Each engine's key (vLLM's
  // --api-key) is derived from it and the engine's port (common/backend_identity.h).
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
  // A local Slurm when this machine can run one; otherwise why not. Left alone when
  // `bmas slurm up` already runs one in this state dir.
  std::string slurm_line;
  bool slurm_started = false;
  if (config.up.slurm) {
    auto running = slurm::RunningLocalCluster(dir);
    std::string why = slurm::LocalClusterPrerequisites();
    if (running && previous && previous->owns_slurm) {
      slurm_started = true;
      slurm_line = fmt::format("  {:<10} {:<28} local Slurm started by the last bmas up (pid {}), "
                               "which died; adopted: this one stops it\n",
                               "slurm", running->rest_url(), previous->pid);
    } else if (running) {
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


  // With a Slurm, the engines are an inference deployment whose replicas are Slurm jobs
  // (`bmas inference`); without one, plain processes, and the summary says why.
  std::string inference_why;
  const bool elastic = [&] {
    if (config.up.engines == 0 || !config.up.gateway) return false;
    if (config.up.inference != "slurm") {
      inference_why = "[up] inference = \"processes\"";
      return false;
    }
    if (!slurm::RunningLocalCluster(dir)) {
      inference_why = "no Slurm runs here";
      return false;
    }
    return true;
  }();
  if (elastic) {
    std::vector<std::string> deploy = service_args();
    deploy.insert(deploy.end(), {"inference", "deploy", e.model, "--min", "1", "--max",
                                 std::to_string(std::max(1, config.up.engines)), "--profile",
                                 e.profile, "--if-missing"});
    auto deployed = RunCommand(deploy, {}, std::chrono::seconds(30));
    if (!deployed || deployed->exit_code != 0) {
      return fail(fmt::format("deploying {}: {}", e.model,
                              deployed ? deployed->err : deployed.error().message));
    }
  }
  for (int i = 0; !elastic && i < config.up.engines; ++i) {
    Child c;
    c.name = fmt::format("engine-{}", i);
    c.log = (fs::path(dir) / "logs" / (c.name + ".log")).string();
    auto port = HoldListener(
        c, e.host, static_cast<uint16_t>(config.up.engine_base_port > 0 ? config.up.engine_base_port + i : 0));
    if (!port) return fail(fmt::format("{} {}", c.name, port.error().message));
    c.args = service_args();
    c.args.insert(c.args.end(), {"engine", "--port", std::to_string(*port)});
    c.env = {"BMAS_BACKEND_API_KEY=" + backend_key};
    c.port_flag = "--port";
    if (auto started = StartChild(c, std::chrono::seconds(15)); !started) {
      return fail(fmt::format("{} {}", c.name, started.error().message));
    }
    children.push_back(c);
    save();
  }

  const size_t num_engines = children.size();
  std::string gateway_metrics_url;
  if (config.up.gateway && (num_engines > 0 || elastic)) {
    Child g;
    g.name = "gateway";
    g.log = (fs::path(dir) / "logs" / "gateway.log").string();
    auto port = HoldListener(g, config.gateway.host, static_cast<uint16_t>(config.gateway.port));
    if (!port) return fail(fmt::format("gateway {}", port.error().message));
    g.args = service_args();
    g.args.insert(g.args.end(), {"gateway", "--port", std::to_string(*port)});
    if (!config.gateway.metrics_listen.empty()) {
      auto metrics = SplitHostPort(config.gateway.metrics_listen);
      if (!metrics) return fail(fmt::format("gateway: metrics_listen {}", metrics.error().message));
      auto metrics_port = HoldListener(g, metrics->first, metrics->second);
      if (!metrics_port) return fail(fmt::format("gateway {}", metrics_port.error().message));
      g.args.insert(g.args.end(),
                    {"--metrics-listen", JoinHostPort(metrics->first, *metrics_port)});
    }
    for (size_t i = 0; i < num_engines; ++i) {
      g.args.push_back("--backend");
      g.args.push_back(children[i].url);
    }
    g.env = {"BMAS_BACKEND_API_KEY=" + backend_key};
    g.port_flag = "--port";
    if (auto started = StartChild(g, std::chrono::seconds(15)); !started) {
      return fail(fmt::format("gateway {}", started.error().message));
    }
    children.push_back(g);
    gateway_metrics_url = g.metrics_url;
    save();
  }

  // The controller that runs the deployments' replicas as Slurm jobs of the service account.
  std::string controller_line;
  if (elastic && !gateway_metrics_url.empty()) {
    Child k;
    k.name = "controller";
    k.log = (fs::path(dir) / "logs" / "controller.log").string();
    std::string gw = gateway_metrics_url.substr(gateway_metrics_url.find("://") + 3);
    gw = gw.substr(0, gw.find('/'));
    k.args = service_args();
    k.args.insert(k.args.end(), {"inference", "controller", "--gateway", gw, "--port-base",
                                 std::to_string(config.up.replica_port_base), "--listen-host",
                                 "127.0.0.1", "--cancel-on-exit", "--scale-down-idle",
                                 fmt::format("{}", config.up.replica_scale_down_idle_s),
                                 "--load-window", fmt::format("{}", config.up.replica_load_window_s),
                                 "--breach-settle",
                                 fmt::format("{}", config.up.replica_breach_settle_s)});
    k.env = {"BMAS_BACKEND_API_KEY=" + backend_key};
    // The replica jobs' working directory and logs, the service account's.
    const fs::path replicas = fs::path(dir) / "replicas";
    fs::create_directories(replicas, ec);
    chmod(replicas.c_str(), 0750);  // the replicas' logs: operator data
    if (!service.name.empty()) {
      if (auto handed = HandDirTo(replicas.string(), service.uid, service.gid); !handed) {
        return fail(fmt::format("cannot hand {} to {}: {}", replicas.string(), service.name,
                                handed.error().message));
      }
    }
    if (auto started = StartChild(k, std::chrono::seconds(15)); !started) {
      return fail(fmt::format("inference controller {}", started.error().message));
    }
    children.push_back(k);
    save();
    controller_line = fmt::format(
        "  {:<10} {:<28} replicas of {} as Slurm jobs (min 1, max {}), sized to load; "
        "`bmas inference list`\n  {:<10} {:<28} log {}\n",
        k.name, "(Slurm jobs)", e.model, std::max(1, config.up.engines), "", "", k.log);
  }

  // With a Slurm to watch: `bmas slurm monitor` serves its /metrics and records finished jobs.
  std::string monitor_line;
  if (slurm::RunningLocalCluster(dir)) {
    monitor_line = StartHelper(
        options, dir, "slurm-mon", "slurm-monitor.log",
        {"slurm", "monitor"}, "--port", static_cast<uint16_t>(config.up.slurm_monitor_port),
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
      // The LXD a dead bmas up started is adopted, as its Slurm is.
      if (previous && previous->owns_lxd && before && !before->started.empty()) lxd_started = true;
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
      slurm::RunningLocalCluster(dir)) {
    agent_line = StartHelper(options, dir, "agent", "agent.log",
                             {"agent"}, "--metrics-port", 0,
                             "runs jobs in workspaces, unplugs stray GPUs", children);
  }

  // The web dashboard, as the service account (it faces the network): it reads Slurm, the
  // store, the gateway's /load and the agent's /gpus.
  std::string dashboard_line;
  if (config.up.dashboard) {
    Child d;
    d.name = "dashboard";
    d.log = (fs::path(dir) / "logs" / "dashboard.log").string();
    // On [dashboard] listen's host, any free port (as before: the summary gives the URL).
    auto listen = SplitHostPort(config.dashboard.listen);
    auto port = listen ? HoldListener(d, listen->first, 0) : Result<uint16_t>(listen.error());
    d.args = service_args();
    d.args.insert(d.args.end(), {"dashboard", "--port", port ? std::to_string(*port) : "0"});
    if (!gateway_metrics_url.empty()) {
      d.args.insert(d.args.end(), {"--gateway", HostPort(gateway_metrics_url)});
    }
    for (const Child& c : children) {
      if (c.name == "agent") d.args.insert(d.args.end(), {"--agent", HostPort(c.url)});
    }
    if (!slurm::RunningLocalCluster(dir)) d.args.push_back("--no-slurm");
    d.port_flag = "--port";
    if (!port) {
      ReleaseListeners(d);
      dashboard_line = fmt::format("  {:<10} not started: [dashboard] listen: {}\n", "dashboard",
                                   port.error().message);
    } else if (auto started = StartChild(d, std::chrono::seconds(15)); started) {
      dashboard_line = fmt::format(
          "  {:<10} {:<28} web dashboard: sign in with a bmas API key (bmas key create NAME)\n"
          "  {:<10} {:<28} log {}\n",
          d.name, d.url, "", "", d.log);
      children.push_back(d);
    } else {
      ReleaseListeners(d);
      std::string why = started.error().message;
      if (!why.ends_with('\n')) why += '\n';
      dashboard_line = fmt::format("  {:<10} not started: {}", "dashboard", why);
    }
  }

  record.owns_slurm = slurm_started;
  record.owns_lxd = lxd_started;
  save();

  std::string summary;
  for (const Child& c : children) {
    // After Slurm's and LXD's lines.
    if (c.name == "slurm-mon" || c.name == "agent" || c.name == "dashboard" ||
        c.name == "controller") {
      continue;
    }
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
  summary += controller_line;
  if (num_engines > 0 && !inference_why.empty()) {
    summary += fmt::format("  engines are plain processes: {}\n", inference_why);
  }
  if (num_engines > 0 || elastic) {
    summary += fmt::format("  engines and gateway run {}\n", runs_as);
  }
  summary += WriteSystemConfig(config, dir);
  summary += slurm_line + monitor_line + lxd_line + agent_line + dashboard_line;
  {
    std::vector<std::pair<std::string, std::string>> targets;
    if (!gateway_metrics_url.empty()) {
      targets.emplace_back("gateway", HostPort(gateway_metrics_url));
    }
    for (const Child& c : children) {
      if (c.name == "agent" || c.name == "slurm-mon") {
        targets.emplace_back(c.name, HostPort(c.url));
      }
    }
    WriteRunFile(run_dir, "prometheus.yml", PrometheusConfig(targets, OperatorSecretPath(dir)));
    summary += fmt::format(
        "  {:<10} {:<28} scrape config with the operator secret: {}/prometheus.yml\n",
        "prometheus", "", run_dir);
  }
  fmt::print("{}", summary);
  if ((num_engines > 0 || elastic) && config.up.gateway) {
    fmt::print("Call the gateway with a key: bmas user add NAME && bmas key create NAME (same "
               "--state-dir)\n");
  }
  WriteRunFile(run_dir, "up.txt", summary);
  fmt::print("bmas up: running; press Ctrl-C to stop everything it started.\n");
  std::fflush(stdout);

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
    // A part that died is started again after a backoff, on the same port (engines keep their
    // URLs in the gateway's list). Up goes on running meanwhile: one engine's crash must not
    // take the gateway and every user's stream with it.
    bool changed = false;
    for (Child& c : children) {
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
    }
    if (changed) save();
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
  fs::remove(fs::path(dir) / "run" / "prometheus.yml", ec);
  RemoveUpRecord(dir);
  fmt::print("bmas up: stopped.\n");
  return 0;
}

}  // namespace bmas
