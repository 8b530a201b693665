#include "cli/agent_commands.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu/nvml.h"
#include "cli/slurm_target.h"
#include "cli/own_keys.h"
#include "cli/idle_view.h"
#include "cli/usage_view.h"
#include "common/config.h"
#include "daemon/agent.h"
#include "daemon/idle_police.h"
#include "daemon/service_account.h"
#include "daemon/secret.h"
#include "lxd/local_lxd.h"
#include "slurm/local_cluster.h"
#include "slurm/node_drain.h"
#include "slurm/slurm_json.h"
#include "store/store.h"

namespace bmas {

void AgentCommands::Register(CLI::App& app, GlobalOptions& global) {
  agent_ = app.add_subcommand(
      "agent", "The node's broker (root): runs jobs in their users' workspaces, unplugs GPUs of "
               "jobs that are gone, serves /metrics (bmas up starts it)");
  agent_->add_option("--socket", socket_, "Unix socket (default: <state dir>/run/agent.sock)");
  agent_->add_option("--metrics-port", metrics_port_, "Port of /metrics (0 picks a free one)")
      ->check(CLI::Range(0, 65535));
  agent_->add_option("--reconcile-interval", reconcile_s_,
                     "Seconds between reconcile passes (default 60)")
      ->check(CLI::Range(0.1, 86400.0));
  agent_
      ->add_option("--io-timeout", io_timeout_s_,
                   "Seconds a connection may take to send its request (default 10)")
      ->check(CLI::Range(0.1, 3600.0));
  agent_
      ->add_option("--max-connections-per-uid", max_per_uid_,
                   "Connections one user may hold open at once (default 64)")
      ->check(CLI::Range(1, 100000));
  agent_->add_option("--nvml-library", nvml_library_,
                     "The NVIDIA driver's libnvidia-ml to read GPUs with (default: [telemetry] "
                     "nvml_library, else libnvidia-ml.so.1)");
  agent_
      ->add_option("--telemetry-interval", telemetry_s_,
                   "Seconds between GPU samples (default: [telemetry] interval_s, 10)")
      ->check(CLI::Range(0.1, 3600.0));
  agent_->require_subcommand(0, 1);
  agent_->callback([this, &global] {
    if (agent_->get_subcommands().empty()) global.exit_code = Serve(global);
  });
  CLI::App* exec = agent_->add_subcommand(
      "exec", "Run CMD in your workspace for the Slurm job you are in ($SLURM_JOB_ID); without "
              "an agent or a workspace, run it here");
  exec->add_option("command", command_, "The command and its arguments (after --)")->required();
  exec->callback([this, &global] {
    const std::string state_dir =
        ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
    global.exit_code =
        RunAgentExec(socket_.empty() ? AgentSocketPath(state_dir) : socket_, command_);
  });
}

int AgentCommands::Serve(GlobalOptions& global) {
  global.SetUpLogging();
  const Config config = global.LoadConfigOrDefaults();
  const std::string state_dir = ResolveStateDir(global.state_dir, config);
  AgentOptions o;
  o.socket = socket_.empty() ? AgentSocketPath(state_dir) : socket_;
  auto secret = EnsureOperatorSecret(state_dir);
  if (!secret) {
    fmt::print(stderr, "bmas agent: {}\n", secret.error().message);
    return 1;
  }
  o.operator_secret = std::move(*secret);
  auto local = lxd::ReadLocalLxd(state_dir);
  o.lxd_socket = local ? local->socket : lxd::SocketPath(config.lxd);
  o.reconcile_interval = std::chrono::milliseconds(static_cast<int64_t>(reconcile_s_ * 1000));
  o.metrics_port = static_cast<uint16_t>(metrics_port_);
  o.io_timeout = std::chrono::milliseconds(static_cast<int64_t>(io_timeout_s_ * 1000));
  o.max_connections_per_uid = max_per_uid_;
  o.gpus = OpenNvml(nvml_library_.empty() ? config.telemetry.nvml_library : nvml_library_);
  o.node = config.telemetry.node;
  if (o.node.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    o.node = host;
  }
  // The host's GPU device nodes for the reconcile pass's sweep: a local cluster's nodes' fake
  // GPUs, else this node's /dev/nvidia<N>.
  if (auto cluster = slurm::ReadLocalCluster(state_dir)) {
    for (const std::string& n : cluster->nodes) o.gpu_dirs[cluster->device_dir + "/" + n] = n;
  } else {
    o.gpu_dirs["/dev"] = o.node;
  }
  // The node's own services, whose hold on a GPU's device node is theirs to keep: root's, the
  // service account's, and the driver's persistence daemon, which NVIDIA's packages run as
  // `nvidia-persistenced` and which keeps every /dev/nvidiaN open.
  o.service_uids = {0};
  for (const char* account : {kServiceAccount, "nvidia-persistenced"}) {
    if (const passwd* service = getpwnam(account)) o.service_uids.insert(service->pw_uid);
  }
  o.drain = [state_dir](const std::string& node, const std::string& reason) -> Result<void> {
    auto cluster = slurm::ReadLocalCluster(state_dir);
    return slurm::DrainNode(cluster ? cluster->conf : "", node, reason);
  };
  o.telemetry_interval = std::chrono::milliseconds(
      static_cast<int64_t>((telemetry_s_ > 0 ? telemetry_s_ : config.telemetry.interval_s) * 1000));
  // What Slurm says of a job, as root.
  auto job = [&global](int64_t id) -> Result<JobInfo> {
    auto target = ResolveSlurm(global, "root");
    if (!target) return target.error();
    SlurmRestClient client(target->endpoint, std::chrono::seconds(10));
    return client.Job(id);
  };
  o.job_alive = [job](int64_t id) -> Result<bool> {
    auto j = job(id);
    if (!j) {
      if (j.error().code == ErrorCode::kNotFound) return false;
      return j.error();
    }
    return !IsJobStateFinal(j->state);
  };
  o.job_user = [job](int64_t id) -> Result<std::string> {
    auto j = job(id);
    if (!j) return j.error();
    if (IsJobStateFinal(j->state)) {
      return Error{ErrorCode::kPermissionDenied, fmt::format("it is {}", j->state)};
    }
    return j->user;
  };
  // A user's own usage, read from the store (root's) for the uid on the socket.
  o.usage = [state_dir](const std::string& user, int64_t since) -> Result<std::string> {
    auto store = OpenSqliteStore(StorePath(state_dir));
    if (!store) return store.error();
    auto view = ReadUsageView(**store, user, since);
    if (!view) return view.error();
    return UsageReplyJson(*view);
  };
  // A user's own idle-GPU records (`bmas jobs` shows their warnings), likewise.
  o.idle = [state_dir](const std::string& user, int64_t since) -> Result<std::string> {
    auto store = OpenSqliteStore(StorePath(state_dir));
    if (!store) return store.error();
    auto records = (*store)->QueryIdle(user, since);
    if (!records) return records.error();
    return IdleReplyJson(*records);
  };
  o.own_keys = [state_dir](const std::string& user, const std::string& action,
                           const std::string& key_id) -> Result<std::string> {
    auto store = OpenSqliteStore(StorePath(state_dir));
    if (!store) return store.error();
    return AnswerOwnKeys(**store, user, action, key_id, std::time(nullptr));
  };
  // Idle-GPU policing on each GPU sample: warnings into the job's output, cancellations
  // through Slurm, both into the store.
  if (config.idle.enabled) {
    IdleSettings idle;
    idle.threshold_pct = config.idle.threshold_pct;
    idle.warn_after_s = static_cast<int64_t>(config.idle.warn_after_min * 60);
    idle.cancel_after_s = static_cast<int64_t>(config.idle.cancel_after_min * 60);
    idle.partitions = {config.idle.partitions.begin(), config.idle.partitions.end()};
    // Samples are `interval` apart: a gap is three missed samples, and never under 5 min.
    idle.max_sample_gap_s = std::max<int64_t>(
        idle.max_sample_gap_s, static_cast<int64_t>(3 * o.telemetry_interval.count() / 1000));
    // Replicas are the service account's jobs (root's where the daemons run as root).
    idle.replica_owners = {kServiceAccount, "root"};
    IdlePoliceHooks hooks;
    hooks.jobs = [&global]() -> Result<std::vector<JobInfo>> {
      auto target = ResolveSlurm(global, "root");
      if (!target) return target.error();
      return SlurmRestClient(target->endpoint, std::chrono::seconds(10)).Jobs();
    };
    hooks.act = [state_dir, &global](const IdleAction& a, const JobInfo& info) {
      const bool cancel = a.kind == IdleAction::Kind::kCancel;
      spdlog::warn("bmas agent: idle GPUs: job {} of {}: {}", a.job_id, a.user, a.reason);
      if (auto w = AppendToJobOutput(info, "bmas: job " + std::to_string(a.job_id) + " " +
                                               a.reason);
          !w) {
        spdlog::warn("bmas agent: idle GPUs: job {}: {}", a.job_id, w.error().message);
      }
      if (auto store = OpenSqliteStore(StorePath(state_dir))) {
        auto recorded = (*store)->RecordIdle(
            {a.job_id, a.user, info.partition, cancel ? "cancel" : "warn", std::time(nullptr),
             a.idle_since, a.gpus, static_cast<int64_t>(a.wasted_gpu_hours * 3600), a.reason});
        if (!recorded) spdlog::warn("bmas agent: idle GPUs: {}", recorded.error().message);
      }
      if (cancel) {
        auto target = ResolveSlurm(global, "root");
        auto cancelled = target ? SlurmRestClient(target->endpoint, std::chrono::seconds(10))
                                      .Cancel(a.job_id)
                                : Result<void>(target.error());
        if (!cancelled) {
          spdlog::error("bmas agent: idle GPUs: cannot cancel job {}: {}", a.job_id,
                        cancelled.error().message);
        }
      }
    };
    auto police = std::make_shared<IdlePolice>(idle, o.node, hooks);
    o.on_gpu_sample = [police](const std::vector<GpuReading>& gpus,
                               const std::map<int, GpuHolder>& holders) {
      police->OnSample(gpus, holders, std::time(nullptr));
    };
  }
  return RunAgent(o);
}

}  // namespace bmas
