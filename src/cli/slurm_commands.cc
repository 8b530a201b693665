#include "cli/slurm_commands.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <spdlog/spdlog.h>

#include "common/config_table.h"
#include "common/json_object.h"
#include "core/cluster.h"
#include "common/config.h"
#include "common/process.h"
#include "cli/slurm_hook.h"
#include "cli/slurm_target.h"
#include "daemon/secret.h"
#include "daemon/services.h"
#include "daemon/slurm_monitor.h"
#include "daemon/up_record.h"
#include "store/store.h"
#include "slurm/local_cluster.h"
#include "slurm/slurm_config.h"

namespace bmas {
namespace {

// Writes `text` to `path` through a temporary file and a rename, so a daemon that reads the
// file meanwhile sees the old version or the new one, never half of one.
bool WriteAtomically(const std::filesystem::path& path, const std::string& text,
                     std::string& error) {
  std::filesystem::path tmp = path;
  tmp += fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      error = fmt::format("cannot write {}", tmp.string());
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    error = fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message());
    std::filesystem::remove(tmp, ec);
    return false;
  }
  return true;
}

}  // namespace

void SlurmCommands::Register(CLI::App& app, GlobalOptions& global) {
  slurm_ = app.add_subcommand("slurm", "Slurm, driven from the cluster inventory");
  slurm_->require_subcommand(1);
  config_ = slurm_->add_subcommand(
      "config", "Write slurm.conf, gres.conf, cgroup.conf and topology.conf for the inventory");
  config_->add_option("--cluster", cluster_file_,
                      "Inventory: a TOML file with a [cluster] table (see "
                      "examples/cluster-12x4.toml); default: the --config file");
  config_->add_option("--out", out_dir_, "Directory to write the files to (created if missing)")
      ->required();
  config_->callback([this, &global] { global.exit_code = RunConfig(global); });

  CLI::App* up = slurm_->add_subcommand(
      "up", "Start a real Slurm cluster on this machine (munged, slurmctld, one slurmd per node, "
            "slurmrestd with JWT; fake GPUs) under the state dir, and wait until its nodes are "
            "idle");
  up->add_option("--cluster", cluster_file_,
                 "Inventory to run (default: 3 nodes x 4 GPUs, examples/cluster-local.toml)")
      ->check(CLI::ExistingFile);
  up->add_option("--timeout", timeout_s_, "Seconds to wait for the nodes to be idle")
      ->check(CLI::Range(1, 3600))
      ->default_str("60");
  up->callback([this, &global] { global.exit_code = RunUp(global); });
  CLI::App* down = slurm_->add_subcommand(
      "down", "Cancel the local cluster's jobs, stop the daemons `bmas slurm up` started and "
              "remove its fake GPUs");
  down->callback([this, &global] { global.exit_code = RunDown(global); });
  CLI::App* status = slurm_->add_subcommand(
      "status", "Show the local cluster's daemons, nodes and slurmrestd address");
  status->add_flag("--json", json_, "One JSON object");
  status->callback([this, &global] { global.exit_code = RunStatus(global); });
  CLI::App* monitor = slurm_->add_subcommand(
      "monitor", "Serve /metrics for the cluster (jobs and GPUs per user and partition, pending "
                 "jobs, mode) and record finished jobs for `bmas usage` (bmas up runs it)");
  monitor->add_option("--host", monitor_host_, "Address to listen on")->default_str("127.0.0.1");
  monitor->add_option("--port", monitor_port_, "Port (0 picks a free one)")
      ->check(CLI::Range(0, 65535))
      ->default_str("0");
  monitor->add_option("--interval", monitor_interval_s_, "Seconds between polls of slurmrestd")
      ->check(CLI::Range(0.1, 3600.0))
      ->default_str("2");
  monitor->callback([this, &global] { global.exit_code = RunMonitor(global); });
  CLI::App* front = slurm_->add_subcommand(
      "tls-front",
      "TLS in front of this machine's loopback slurmrestd, for nodes: they give [cluster.slurm] "
      "slurmrestd = \"https://HOST:PORT\" and check the certificate against the cluster CA");
  front->add_option("--listen", front_listen_, "ADDR:PORT to serve TLS on (e.g. 10.0.0.1:6821)")
      ->required();
  front->add_option("--backend", front_backend_, "slurmrestd's loopback ADDR:PORT")
      ->default_str("127.0.0.1:6820");
  front->add_option("--name", front_name_,
                    "The host name nodes dial, put in the certificate (default: this host's "
                    "name); the --listen address goes in too");
  front->add_option("--cert", front_cert_,
                    "A PEM certificate to serve instead of one issued from the cluster CA under "
                    "<state-dir>/cluster/ at start (which needs root)");
  front->add_option("--key", front_key_, "The private key of --cert (PEM)");
  front->add_option("--user", front_user_,
                    "The account it serves as once its key is loaded and its port bound, when "
                    "started as root")
      ->default_str("nobody");
  front->callback([this, &global] { global.exit_code = RunTlsFront(global); });
  CLI::App* relayout = slurm_->add_subcommand(
      "relayout", "Give a GPU whose MIG layout follows demand (the inventory's "
                  "[[cluster.nodes.gpus.flexible]]) another layout, on the local cluster: by hand, "
                  "or --auto (the policy, once, from what waits in the queue). Other GPUs' jobs "
                  "run on, slurmctld does not restart; a GPU with a job is never changed (root)");
  relayout->add_option("gpu", relayout_node_, "The GPU, as <node>-gpu<N>: oss01-gpu3");
  relayout->add_option("layout", relayout_layout_,
                       "\"whole\", or profiles joined by '+': 7x1g.10gb, \"3g.40gb+2g.20gb+2x1g.10gb\"");
  relayout->add_flag("--auto", relayout_auto_,
                     "Let the policy choose: each idle GPU takes the layout that serves the most "
                     "of what has waited --min-wait seconds");
  relayout->add_option("--every", relayout_every_s_,
                       "With --auto: a pass every this many seconds until interrupted, printing "
                       "only the changes (0: one pass)")
      ->check(CLI::Range(0, 86400))
      ->default_str("0");
  relayout->add_option("--min-wait", relayout_min_wait_s_,
                       "Seconds a pending job must have waited to count (--auto)")
      ->check(CLI::Range(0, 86400))
      ->default_str("30");
  relayout->add_option("--hold", relayout_hold_s_,
                       "Seconds a GPU keeps a new layout before --auto may change it again")
      ->check(CLI::Range(0, 86400))
      ->default_str("300");
  relayout->add_option("--nvml-library", relayout_nvml_,
                       "Apply the layout to the GPU through this NVML (the driver's "
                       "libnvidia-ml.so.1 on a node with real GPUs); default: none, the local "
                       "cluster's GPUs being device files");
  relayout->add_option("--timeout", timeout_s_, "Seconds to wait for the new layout to register")
      ->check(CLI::Range(1, 3600))
      ->default_str("60");
  relayout->callback([this, &global] { global.exit_code = RunRelayout(global); });
  CLI::App* hook = slurm_->add_subcommand(
      "hook", "What Slurm's Prolog and Epilog run: bind a job's GPUs into its user's workspace, "
              "or unbind them (root, SLURM_* variables)");
  hook->add_option("phase", hook_phase_,
                   "prolog or epilog (root), or task-prolog (the job's user: names MIG slices "
                   "by MIG UUID in CUDA_VISIBLE_DEVICES)")
      ->required()
      ->check(CLI::IsMember({"prolog", "epilog", "task-prolog"}));
  hook->callback([this, &global] { global.exit_code = RunSlurmHook(global, hook_phase_); });
}

std::function<Result<SlurmSnapshot>()> SlurmPoller(GlobalOptions& global, std::string user,
                                                   bool with_accounting) {
  // Resolved on every poll: a local cluster may come up after the monitor, and tokens expire.
  // With slurmdbd, its finished jobs too: all it has at start (30 days back), then every
  // minute the last ten. Jobs seen before are recorded once.
  auto last_accounted = std::make_shared<std::optional<TimePoint>>();  // none yet
  return [&global, user, with_accounting, last_accounted]() -> Result<SlurmSnapshot> {
    auto target = ResolveSlurm(global, user);
    if (!target) return target.error();
    auto slurm = global.services->Slurm(target->endpoint, std::chrono::seconds(10));
    SlurmApi& client = *slurm;
    SlurmSnapshot s;
    s.cluster = target->inventory.slurm.cluster_name;
    const TimePoint now = global.services->env().Now();
    const bool first = !last_accounted->has_value();
    if (with_accounting && target->inventory.slurm.accounting &&
        (first || now - **last_accounted >= std::chrono::minutes(1))) {
      auto accounted = client.AccountedJobs(first ? 30 * 86400 : 600);
      if (accounted) {
        s.accounted = std::move(*accounted);
        *last_accounted = now;
      } else {
        spdlog::warn("bmas slurm monitor: slurmdbd's jobs: {}", accounted.error().message);
      }
    }
    auto jobs = client.Jobs();
    if (!jobs) return jobs.error();
    auto nodes = client.Nodes();
    if (!nodes) return nodes.error();
    auto mode = CurrentMode(*target);
    if (!mode) return mode.error();
    s.jobs = std::move(*jobs);
    s.nodes = std::move(*nodes);
    s.mode = std::move(*mode);
    return s;
  };
}

int SlurmCommands::RunMonitor(GlobalOptions& global) {
  global.SetUpLogging();
  const std::string state_dir = ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
  passwd* pw = getpwuid(geteuid());
  const std::string user = pw != nullptr ? pw->pw_name : "root";
  SlurmMonitorOptions o;
  o.host = monitor_host_;
  o.port = static_cast<uint16_t>(monitor_port_);
  o.interval = std::chrono::milliseconds(static_cast<int64_t>(monitor_interval_s_ * 1000));
  o.store_path = StorePath(state_dir);
  o.poll = SlurmPoller(global, user, true);
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  auto secret = EnsureOperatorSecret(state_dir);
  if (!secret) {
    fmt::print(stderr, "bmas slurm monitor: {}\n", secret.error().message);
    return 1;
  }
  o.operator_secret = std::move(*secret);
  return RunSlurmMonitor(o);
}

int SlurmCommands::RunUp(GlobalOptions& global) {
  global.SetUpLogging();
  const std::string state_dir = ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
  Cluster inventory;
  try {
    inventory = cluster_file_.empty() ? slurm::BuiltinLocalCluster() : LoadCluster(cluster_file_);
  } catch (const ConfigError& e) {
    fmt::print(stderr, "bmas slurm up: {}\n", e.what());
    return 2;
  }
  auto c = slurm::StartLocalCluster(inventory, cluster_file_, state_dir,
                                    std::chrono::seconds(timeout_s_));
  if (!c) {
    fmt::print(stderr, "bmas slurm up: {}\n", c.error().message);
    return c.error().code == ErrorCode::kInvalidArgument ? 2 : 1;
  }
  if (!c->restarted.empty()) {
    fmt::print("bmas slurm: restarted {} in {} (they had died; the other daemons and their "
               "jobs ran on)\n",
               fmt::join(c->restarted, ", "), c->root);
  }
  fmt::print("bmas slurm: local cluster up in {}\n", c->root);
  fmt::print("  nodes       {} ({} fake GPUs each, {}/<node>/nvidiaN)\n",
             fmt::join(c->nodes, " "), c->gpus_per_node, c->device_dir);
  fmt::print("  slurmctld   127.0.0.1:{}\n", c->slurmctld_port);
  fmt::print("  slurmrestd  {}\n", c->rest_url());
  fmt::print("  Slurm's own commands: export SLURM_CONF={}\n", c->conf);
  fmt::print("  stop it with: bmas slurm down\n");
  return 0;
}

int SlurmCommands::RunDown(GlobalOptions& global) {
  global.SetUpLogging();
  const std::string state_dir = ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
  auto c = slurm::ReadLocalCluster(state_dir);
  if (!c) {
    fmt::print(stderr, "bmas slurm down: {}\n", c.error().message);
    return 1;
  }
  if (std::string refusal = RefuseWhatUpOwns(state_dir, "slurm", "bmas slurm down");
      !refusal.empty()) {
    fmt::print(stderr, "{}\n", refusal);
    return 1;
  }
  if (auto stopped = slurm::StopLocalCluster(state_dir); !stopped) {
    fmt::print(stderr, "bmas slurm down: {}\n", stopped.error().message);
    return 1;
  }
  fmt::print("bmas slurm: stopped {} daemon(s) and removed {}\n", c->daemons.size(),
             c->device_dir);
  return 0;
}

int SlurmCommands::RunStatus(GlobalOptions& global) {
  const std::string state_dir = ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
  auto c = slurm::ReadLocalCluster(state_dir);
  if (!c) {
    fmt::print(stderr, "bmas slurm status: {}\n", c.error().message);
    return 1;
  }
  auto states = slurm::NodeStates(*c);
  std::map<std::string, std::string> state_of;
  if (states) state_of.insert(states->begin(), states->end());
  if (json_) {
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartObject();
    Member(w, "root", c->root);
    Member(w, "slurmrestd", c->rest_url());
    Member(w, "slurm_conf", c->conf);
    w.Key("daemons");
    w.StartArray();
    for (const auto& d : c->daemons) {
      w.StartObject();
      Member(w, "name", d.name);
      Member(w, "pid", d.pid);
      Member(w, "running", d.Runs());
      w.EndObject();
    }
    w.EndArray();
    w.Key("nodes");
    w.StartArray();
    for (const std::string& node : c->nodes) {
      auto it = state_of.find(node);
      const std::string state = it != state_of.end() ? it->second : "unknown";
      w.StartObject();
      Member(w, "name", node);
      Member(w, "state", state);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
    fmt::print("{}\n", buf.GetString());
    return 0;
  }
  fmt::print("local cluster in {}; slurmrestd {}; SLURM_CONF={}\n", c->root, c->rest_url(),
             c->conf);
  for (const auto& d : c->daemons) {
    fmt::print("  {:<14} pid {:<8} {}\n", d.name, d.pid,
               d.Runs() ? "running" : "stopped");
  }
  if (states) {
    for (const auto& [node, state] : *states) fmt::print("  node {:<9} {}\n", node, state);
  } else {
    fmt::print("  nodes: {}\n", states.error().message);
  }
  return 0;
}

int SlurmCommands::RunConfig(GlobalOptions& global) {
  constexpr int kBadInput = 2;
  std::string file = cluster_file_.empty() ? global.config_file : cluster_file_;
  if (file.empty()) {
    fmt::print(stderr, "bmas slurm config: give --cluster FILE (see examples/cluster-12x4.toml)\n");
    return kBadInput;
  }
  slurm::ConfigFiles files;
  try {
    files = slurm::RenderSlurmConfig(LoadCluster(file));
  } catch (const ConfigError& e) {
    fmt::print(stderr, "bmas slurm config: {}\n", e.what());
    return kBadInput;
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir_, ec);
  if (ec) {
    fmt::print(stderr, "bmas slurm config: cannot create {}: {}\n", out_dir_, ec.message());
    return 1;
  }
  for (const auto& [name, text] : files) {
    std::filesystem::path path = std::filesystem::path(out_dir_) / name;
    std::string error;
    if (!WriteAtomically(path, text, error)) {
      fmt::print(stderr, "bmas slurm config: {}\n", error);
      return 1;
    }
    fmt::print("wrote {}\n", path.string());
  }
  return 0;
}

}  // namespace bmas
