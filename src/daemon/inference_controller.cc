#include "daemon/inference_controller.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <thread>
#include <vector>

#include "autoscale/replica_job.h"
#include "common/backend_identity.h"
#include "common/http_transport.h"
#include "common/https_transport.h"
#include "common/operator_auth.h"
#include "dashboard/history.h"
#include "dashboard/sources.h"
#include "slurm/node_drain.h"

namespace bmas {

InferenceController::InferenceController(InferenceControllerOptions options, SlurmConnector connect,
                                         Store& store, LoadReader load,
                                         std::function<double()> unix_now, ReplicaCaller call)
    : o_(std::move(options)),
      connect_(std::move(connect)),
      store_(store),
      load_(std::move(load)),
      unix_now_(std::move(unix_now)),
      call_(call ? std::move(call)
                 : HttpReplicaCaller(std::chrono::seconds(120), o_.replica_ca)) {
  if (!o_.replica_tls_cert.empty()) o_.settings.replica_scheme = "https";
}

ReplicaCaller HttpReplicaCaller(std::chrono::milliseconds timeout, std::string ca_file) {
  return [timeout, ca_file = std::move(ca_file)](const std::string& method, const std::string& url,
                                                 const std::string& path,
                                                 const std::string& key) -> Result<std::string> {
    const bool tls = url.starts_with("https://");
    if (!tls && !url.starts_with("http://")) {
      return Error{ErrorCode::kInvalidArgument,
                   fmt::format("replica URL {} is not http:// or https://", url)};
    }
    auto endpoint = ParseRestAddress(std::string_view(url).substr(tls ? 8 : 7));
    if (!endpoint) return endpoint.error();
    HttpTransportPtr transport =
        tls ? NewHttpsTransport(endpoint->host, endpoint->port, ca_file, timeout, "the replica")
            : NewTcpHttpTransport(endpoint->host, endpoint->port, timeout, "the replica");
    ClientRequest request{method, path, {}, {}};
    if (!key.empty()) request.headers.emplace_back("Authorization", "Bearer " + key);
    auto r = transport->RoundTrip(request);
    if (!r) return r.error();
    if (r->status != 200) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("replica {} answered {} to {} {}: {}", url, r->status, method, path,
                               r->body.substr(0, 200))};
    }
    return std::move(r->body);
  };
}

std::string InferenceController::KeyFor(int port) const {
  return o_.backend_secret.empty() ? "" : DeriveBackendKey(o_.backend_secret, port);
}

void InferenceController::AdoptSleeping(const std::vector<JobInfo>& jobs,
                                        const std::map<std::string, std::string>& node_addr,
                                        double now) {
  adopted_ = true;
  for (const JobInfo& j : jobs) {
    auto name = autoscale::ParseReplicaJobName(j.name);
    if (!name || j.state != JobState::kRunning || j.nodes.empty()) continue;
    auto addr = node_addr.find(j.nodes[0]);
    const std::string host =
        addr != node_addr.end() && !addr->second.empty() ? addr->second : j.nodes[0];
    const std::string url =
        fmt::format("{}://{}:{}", o_.settings.replica_scheme, host, name->port);
    auto asleep = call_("GET", url, "/is_sleeping", KeyFor(name->port));
    if (asleep && asleep->find("true") != std::string::npos) {
      memory_.sleeping[j.id] = {TimePoint(now), j.start_time};
      spdlog::info("inference controller: {}: replica job {} ({}) is asleep", name->model, j.id,
                   url);
    }
  }
}

void InferenceController::SleepAndWake(SlurmApi& slurm, autoscale::ControllerPlan& plan) {
  auto give_up = [&](const autoscale::ReplicaCall& c, std::string_view what, const Error& error) {
    spdlog::error("inference controller: {}: cannot {} replica job {}: {}; cancelling it", c.model,
                  what, c.job, error.message);
    autoscale::ForgetSleep(memory_, c.job);
    memory_.woken.erase(c.job);
    if (auto r = slurm.Cancel(c.job); !r && r.error().code != ErrorCode::kNotFound) {
      spdlog::error("inference controller: cannot cancel replica job {}: {}", c.job,
                    r.error().message);
    }
  };
  // POST /wake_up answers once the engine is awake (seconds): the wakes run together.
  std::vector<Result<std::string>> woke(plan.wakes.size(), std::string());
  {
    std::vector<std::jthread> calls;
    for (size_t i = 0; i < plan.wakes.size(); ++i) {
      calls.emplace_back([&, i] {
        const autoscale::ReplicaCall& c = plan.wakes[i];
        woke[i] = call_("POST", c.url, "/wake_up", KeyFor(c.port));
      });
    }
  }
  for (size_t i = 0; i < plan.wakes.size(); ++i) {
    const autoscale::ReplicaCall& c = plan.wakes[i];
    if (woke[i]) {
      spdlog::info("inference controller: {}: replica job {} is awake", c.model, c.job);
      continue;
    }
    give_up(c, "wake", woke[i].error());
    std::erase_if(plan.replicas, [&](const ReplicaRecord& r) { return r.job_id == c.job; });
  }
  for (const autoscale::ReplicaCall& c : plan.sleeps) {
    if (auto r = call_("POST", c.url, "/sleep?level=1", KeyFor(c.port)); !r) {
      give_up(c, "put to sleep", r.error());
      std::erase_if(plan.replicas, [&](const ReplicaRecord& x) { return x.job_id == c.job; });
    } else {
      spdlog::info("inference controller: {}: replica job {} is asleep", c.model, c.job);
    }
  }
}

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
  // Any user's job: the service account reads them all (Slurm's PrivateData is not set).
  in.gpus_wanted = autoscale::GpuDemandWaiting(*jobs, *nodes, o_.settings.partition);
  for (JobInfo& j : *jobs) {
    if (j.user == o_.user && autoscale::ParseReplicaJobName(j.name)) in.jobs.push_back(std::move(j));
  }
  for (const NodeInfo& n : *nodes) {
    in.node_addr[n.name] = n.address;
    if (slurm::IsDrainedInSlurm(n)) in.drained_nodes.insert(n.name);
  }
  std::vector<dashboard::GatewayLoad> loads;
  std::string load_error;
  const std::vector<Result<std::string>> bodies = load_();
  for (const Result<std::string>& body : bodies) {
    auto one = body ? dashboard::ParseGatewayLoad(*body) : Result<dashboard::GatewayLoad>(body.error());
    if (one) {
      loads.push_back(std::move(*one));
    } else if (load_error.empty()) {
      load_error = one.error().message;
    }
  }
  // The load of the gateways that answered; a replica counts as drained only when all did.
  in.every_gateway_reached = !bodies.empty() && loads.size() == bodies.size();
  if (bodies.empty()) load_error = "no gateway given (--gateway)";
  if (!loads.empty()) {
    const dashboard::GatewayLoad merged = dashboard::MergeGatewayLoads(loads);
    const dashboard::GatewayLoad* load = &merged;
    in.gateway_reachable = true;
    for (const dashboard::BackendLoad& b : load->backends) {
      in.backends[b.url] = {b.healthy, b.draining, b.in_flight, b.capacity};
    }
    in.queued = load->queued;
    in.oldest_wait_s = load->oldest_wait_s;
    // TTFT since the last pass that read every gateway (a sum over fewer would look like a
    // restart and count everything since their start).
    if (in.every_gateway_reached) {
      dashboard::LatencyHistogram before{ttft_bounds_, ttft_counts_, 0, 0};
      for (uint64_t c : ttft_counts_) before.count += c;
      const double p95 = dashboard::QuantileBetween(before, load->ttft, 0.95);
      if (p95 >= 0) in.ttft_p95_ms = p95 * 1000;
      ttft_bounds_ = load->ttft.bounds;
      ttft_counts_ = load->ttft.counts;
    }
  }
  if (!load_error.empty() && last_error_ != load_error) {
    spdlog::warn("inference controller: {}", load_error);
  }
  last_error_ = load_error;

  const double now = unix_now_();
  if (!adopted_) AdoptSleeping(in.jobs, in.node_addr, now);
  autoscale::ControllerPlan plan =
      autoscale::PlanPass(o_.settings, in, TimePoint(now), memory_);
  for (const std::string& line : plan.log) spdlog::info("inference controller: {}", line);
  SleepAndWake(**slurm, plan);
  for (const autoscale::ReplicaSubmit& s : plan.submits) {
    auto d = std::find_if(in.deployments.begin(), in.deployments.end(),
                          [&](const Deployment& d) { return d.model == s.model; });
    autoscale::ReplicaJobContext c{o_.bmas, o_.listen_host, s.port,
                                   s.floor ? o_.settings.floor_partition : o_.settings.partition,
                                   o_.replica_dir, o_.replica_env};
    if (!o_.backend_secret.empty()) c.environment["VLLM_API_KEY"] = KeyFor(s.port);
    c.tls_cert = o_.replica_tls_cert;
    c.tls_key = o_.replica_tls_key;
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
  LoadReader load = [gateways = options.gateways, bearer = OperatorBearer(options.operator_secret)]() {
    std::vector<Result<std::string>> bodies;
    for (const std::string& gateway : gateways) {
      bodies.push_back(HttpGet(gateway, "/load", fmt::format("the gateway at {}", gateway), bearer));
    }
    return bodies;
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
