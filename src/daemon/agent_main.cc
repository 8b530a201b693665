// `bmas agent`'s wiring: which GPUs, which Slurm, which store, and idle-GPU policing.

#include "daemon/agent_main.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <ctime>
#include <memory>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/agent_listen.h"
#include "cli/idle_view.h"
#include "cli/own_keys.h"
#include "cli/usage_view.h"
#include "idle/idle_police.h"
#include "idle/idle_record_queue.h"
#include "slurm/gres_slots.h"
#include "daemon/secret.h"
#include "daemon/service_account.h"
#include "lxd/local_lxd.h"
#include "slurm/local_cluster.h"
#include "slurm/node_drain.h"
#include "slurm/slurm_json.h"

namespace bmas {
namespace {

// A certificate or key file for the metrics listener (root reads it; the key is 0600).
Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{ErrorCode::kNotFound, fmt::format("{}: {}", path, std::strerror(errno))};
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Error{ErrorCode::kUnavailable, path + ": read error"};
  return text;
}

}  // namespace

int RunAgentMain(const AgentFlags& flags, const Config& config, const std::string& state_dir,
                 std::function<Result<RestEndpoint>()> root_slurm, Services& services) {
  AgentOptions o;
  o.socket = flags.socket.empty() ? AgentSocketPath(state_dir) : flags.socket;
  auto secret = EnsureOperatorSecret(state_dir);
  if (!secret) {
    fmt::print(stderr, "bmas agent: {}\n", secret.error().message);
    return 1;
  }
  o.operator_secret = std::move(*secret);
  auto local = lxd::ReadLocalLxd(state_dir);
  o.lxd_socket = local ? local->socket : lxd::SocketPath(config.lxd);
  o.reconcile_interval = std::chrono::milliseconds(static_cast<int64_t>(flags.reconcile_s * 1000));
  // Plain HTTP on loopback, TLS with the node's certificate off it ([agent] listen).
  auto listener = ResolveAgentListener(config.agent, flags.metrics_port, ReadWholeFile);
  if (!listener) {
    fmt::print(stderr, "bmas agent: {}\n", listener.error().message);
    return 1;
  }
  o.metrics_host = listener->host;
  o.metrics_port = listener->port;
  o.metrics_cert_pem = std::move(listener->cert_pem);
  o.metrics_key_pem = std::move(listener->key_pem);
  o.io_timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.io_timeout_s * 1000));
  o.max_connections_per_uid = flags.max_per_uid;
  o.gpus = services.Gpus(flags.nvml_library.empty() ? config.telemetry.nvml_library
                                                  : flags.nvml_library);
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
      static_cast<int64_t>((flags.telemetry_s > 0 ? flags.telemetry_s : config.telemetry.interval_s) * 1000));
  // What Slurm says of a job, as root.
  auto job = [root_slurm, &services](int64_t id) -> Result<JobInfo> {
    auto endpoint = root_slurm();
    if (!endpoint) return endpoint.error();
    return services.Slurm(*endpoint, std::chrono::seconds(10))->Job(id);
  };
  o.job_alive = [job](int64_t id) -> Result<bool> {
    auto j = job(id);
    if (!j) {
      if (j.error().code == ErrorCode::kNotFound) return false;
      return j.error();
    }
    return !IsFinal(j->state);
  };
  o.job_user = [job](int64_t id) -> Result<std::string> {
    auto j = job(id);
    if (!j) return j.error();
    if (IsFinal(j->state)) {
      return Error{ErrorCode::kPermissionDenied, fmt::format("it is {}", j->state)};
    }
    return j->user;
  };
  // A user's own usage, read from the store (root's) for the uid on the socket.
  o.usage = [state_dir, &services](const std::string& user, int64_t since) -> Result<std::string> {
    auto store = services.OpenStore(state_dir);
    if (!store) return store.error();
    auto view = ReadUsageView(**store, user, since);
    if (!view) return view.error();
    return UsageReplyJson(*view);
  };
  // A user's own idle-GPU records (`bmas jobs` shows their warnings), likewise.
  o.idle = [state_dir, &services](const std::string& user, int64_t since) -> Result<std::string> {
    auto store = services.OpenStore(state_dir);
    if (!store) return store.error();
    auto records = (*store)->QueryIdle(user, since);
    if (!records) return records.error();
    return IdleReplyJson(*records);
  };
  o.own_keys = [state_dir, &services](const std::string& user, const std::string& action,
                                      const std::string& key_id) -> Result<std::string> {
    auto store = services.OpenStore(state_dir);
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
    // Records the store does not take at once (the controller's, across the network, may be
    // down) wait in memory and are written again, oldest first (idle/idle_record_queue.h).
    auto pending = std::make_shared<IdleRecordQueue>();
    const auto flush = [state_dir, &services, pending](int64_t now) {
      StorePtr store;
      auto written = pending->Flush(now, [&](const IdleRecord& r) -> Result<void> {
        if (!store) {
          auto opened = services.OpenStore(state_dir);
          if (!opened) return opened.error();
          store = std::move(*opened);
        }
        return store->RecordIdle(r);
      });
      if (!written) {
        spdlog::warn("bmas agent: idle GPUs: {} record(s) wait for the store, tried again every "
                     "{} s{}: {}",
                     pending->size(), IdleRecordQueue::kRetryAfterSeconds,
                     pending->dropped() > 0
                         ? fmt::format(" ({} oldest dropped, the queue being full)",
                                       pending->dropped())
                         : "",
                     written.error().message);
      }
    };
    IdlePoliceHooks hooks;
    hooks.jobs = [root_slurm, &services]() -> Result<std::vector<JobInfo>> {
      auto endpoint = root_slurm();
      if (!endpoint) return endpoint.error();
      return services.Slurm(*endpoint, std::chrono::seconds(10))->Jobs();
    };
    hooks.act = [root_slurm, &services, pending, flush](const IdleAction& a,
                                                        const JobInfo& info) {
      const bool cancel = a.kind == IdleAction::Kind::kCancel;
      spdlog::warn("bmas agent: idle GPUs: job {} of {}: {}", a.job_id, a.user, a.reason);
      if (auto w = AppendToJobOutput(info, "bmas: job " + std::to_string(a.job_id) + " " +
                                               a.reason);
          !w) {
        spdlog::warn("bmas agent: idle GPUs: job {}: {}", a.job_id, w.error().message);
      }
      const int64_t now = std::time(nullptr);
      pending->Add({a.job_id, a.user, info.partition, cancel ? "cancel" : "warn", now,
                    a.idle_since, a.gpus, static_cast<int64_t>(a.wasted_gpu_hours * 3600),
                    a.reason});
      flush(now);
      if (cancel) {
        auto endpoint = root_slurm();
        auto cancelled = endpoint ? services.Slurm(*endpoint, std::chrono::seconds(10))
                                        ->Cancel(a.job_id)
                                  : Result<void>(endpoint.error());
        if (!cancelled) {
          spdlog::error("bmas agent: idle GPUs: cannot cancel job {}: {}", a.job_id,
                        cancelled.error().message);
        }
      }
    };
    // Slurm's GPU indexes are the gres.conf lines of this node, or of its layout nodes: whole
    // GPUs and MIG slices.
    hooks.gres_slots = [state_dir](const std::string& slurm_node) {
      auto local = slurm::ReadLocalCluster(state_dir);
      return slurm::ReadNodeGresSlots(slurm_node, local ? local->conf : "");
    };
    auto police = std::make_shared<IdlePolice>(idle, o.node, hooks);
    o.on_gpu_sample = [police, pending, flush](const std::vector<GpuReading>& gpus,
                                               const std::map<int, GpuHolder>& holders,
                                               const MigHolders& mig_holders) {
      const int64_t now = std::time(nullptr);
      if (pending->Due(now)) flush(now);
      police->OnSample(gpus, holders, now, mig_holders);
    };
  }
  return RunAgent(o);
}

}  // namespace bmas
