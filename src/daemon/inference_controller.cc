#include "daemon/inference_controller.h"

#include <signal.h>

#include <chrono>
#include <csignal>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/operator_auth.h"
#include "autoscale/replica_job.h"
#include "common/backend_identity.h"
#include "dashboard/history.h"
#include "dashboard/sources.h"

namespace bmas {

InferenceController::InferenceController(InferenceControllerOptions options,
                                         SlurmConnector connect, Store& store, LoadReader load,
                                         std::function<double()> unix_now)
    : o_(std::move(options)),
      connect_(std::move(connect)),
      store_(store),
      load_(std::move(load)),
      unix_now_(std::move(unix_now)) {}

Result<SlurmApi*> InferenceController::Slurm() {
  if (slurm_ == nullptr) {
    auto made = connect_();
    if (!made) return made.error();
    slurm_ = std::move(*made);
  }
  return slurm_.get();
}

Result<void> InferenceController::RunOnce() {
  auto deployments = store_.ListDeployments();
  if (!deployments) return deployments.error();
  auto slurm = Slurm();
  if (!slurm) return slurm.error();
  auto jobs = (*slurm)->Jobs();
  auto nodes = jobs ? (*slurm)->Nodes() : Result<std::vector<NodeInfo>>(jobs.error());
  if (!jobs || !nodes) {
    slurm_.reset();  // connect again next time (a new token)
    return !jobs ? jobs.error() : nodes.error();
  }
  autoscale::ControllerInput in;
  in.deployments = std::move(*deployments);
  for (JobInfo& j : *jobs) {
    if (j.user == o_.user && autoscale::ParseReplicaJobName(j.name)) in.jobs.push_back(std::move(j));
  }
  for (const NodeInfo& n : *nodes) in.node_addr[n.name] = n.address;
  auto body = load_();
  auto load = body ? dashboard::ParseGatewayLoad(*body) : Result<dashboard::GatewayLoad>(body.error());
  if (load) {
    in.gateway_reachable = true;
    for (const dashboard::BackendLoad& b : load->backends) {
      in.backends[b.url] = {b.healthy, b.draining, b.in_flight, b.capacity};
    }
    in.queued = load->queued;
    in.oldest_wait_s = load->oldest_wait_s;
    dashboard::LatencyHistogram before{ttft_bounds_, ttft_counts_, 0, 0};
    for (uint64_t c : ttft_counts_) before.count += c;
    const double p95 = dashboard::QuantileBetween(before, load->ttft, 0.95);
    if (p95 >= 0) in.ttft_p95_ms = p95 * 1000;
    ttft_bounds_ = load->ttft.bounds;
    ttft_counts_ = load->ttft.counts;
  } else if (last_error_ != load.error().message) {
    spdlog::warn("inference controller: {}", load.error().message);
  }
  last_error_ = load ? "" : load.error().message;

  const double now = unix_now_();
  autoscale::ControllerPlan plan =
      autoscale::PlanPass(o_.settings, in, TimePoint(now), memory_);
  for (const std::string& line : plan.log) spdlog::info("inference controller: {}", line);
  for (const autoscale::ReplicaSubmit& s : plan.submits) {
    auto d = std::find_if(in.deployments.begin(), in.deployments.end(),
                          [&](const Deployment& d) { return d.model == s.model; });
    autoscale::ReplicaJobContext c{o_.bmas, o_.listen_host, s.port,
                                   s.floor ? o_.settings.floor_partition : o_.settings.partition,
                                   o_.replica_dir, o_.replica_env};
    if (!o_.backend_secret.empty()) {
      c.environment["VLLM_API_KEY"] = DeriveBackendKey(o_.backend_secret, s.port);
    }
    auto spec = autoscale::ReplicaJobSpec(*d, c);
    auto id = spec ? (*slurm)->Submit(*spec) : Result<int64_t>(spec.error());
    if (id) {
      spdlog::info("inference controller: {}: submitted replica job {} ({}, port {})", s.model,
                   *id, c.partition, s.port);
    } else {
      spdlog::error("inference controller: {}: cannot submit a replica: {}", s.model,
                    id.error().message);
    }
  }
  for (int64_t id : plan.cancels) {
    if (auto r = (*slurm)->Cancel(id); !r && r.error().code != ErrorCode::kNotFound) {
      spdlog::error("inference controller: cannot cancel replica job {}: {}", id,
                    r.error().message);
    } else {
      spdlog::info("inference controller: cancelled replica job {}", id);
    }
  }
  return store_.ReplaceReplicas(plan.replicas);
}

void InferenceController::CancelAll() {
  auto slurm = Slurm();
  if (!slurm) return;
  auto jobs = (*slurm)->Jobs();
  if (!jobs) return;
  for (const JobInfo& j : *jobs) {
    if (j.user == o_.user && autoscale::ParseReplicaJobName(j.name) &&
        autoscale::IsActiveJobState(j.state)) {
      (void)(*slurm)->Cancel(j.id);
      spdlog::info("inference controller: stopping: cancelled replica job {}", j.id);
    }
  }
  (void)store_.ReplaceReplicas({});
}

int RunInferenceController(const InferenceControllerOptions& options,
                           std::function<Result<RestEndpoint>()> resolve, Store& store) {
  SlurmConnector connect = [resolve = std::move(resolve)]() -> Result<std::unique_ptr<SlurmApi>> {
    auto endpoint = resolve();
    if (!endpoint) return endpoint.error();
    return std::unique_ptr<SlurmApi>(
        std::make_unique<SlurmRestClient>(*endpoint, std::chrono::seconds(10)));
  };
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigprocmask(SIG_BLOCK, &signals, nullptr);
  const std::string gateway = options.gateway;
  LoadReader load = [gateway, bearer = OperatorBearer(options.operator_secret)]()
      -> Result<std::string> {
    if (gateway.empty()) return Error{ErrorCode::kUnavailable, "no gateway given (--gateway)"};
    return HttpGet(gateway, "/load", "the gateway", bearer);
  };
  auto unix_now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  InferenceController controller(options, std::move(connect), store, load, unix_now);
  fmt::print("bmas inference controller: running, no listener; a pass every {} ms; replicas run "
             "as {} in partition {} (floor: {})\n",
             options.interval.count(), options.user, options.settings.partition,
             options.settings.floor_partition);
  std::fflush(stdout);
  std::string last;
  while (true) {
    if (auto r = controller.RunOnce(); !r) {
      if (r.error().message != last) spdlog::warn("inference controller: {}", r.error().message);
      last = r.error().message;
    } else {
      last.clear();
    }
    const auto ms = options.interval.count();
    timespec wait{static_cast<time_t>(ms / 1000), static_cast<long>((ms % 1000) * 1000000)};
    siginfo_t info;
    const int sig = sigtimedwait(&signals, &info, &wait);
    if (sig == SIGINT || sig == SIGTERM) break;
  }
  if (options.cancel_on_exit) controller.CancelAll();
  fmt::print("bmas inference controller: stopped\n");
  return 0;
}

}  // namespace bmas
