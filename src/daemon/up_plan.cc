#include "daemon/up_plan.h"

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <string_view>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <fmt/format.h>

#include "common/listen_socket.h"

namespace bmas {
namespace {

namespace fs = std::filesystem;

std::string LogPath(const UpOptions& options, const std::string& file) {
  return (fs::path(options.state_dir) / "logs" / file).string();
}

// `bmas ...` as the service account, then `words`.
std::vector<std::string> ServiceArgs(const UpOptions& options, const UpFacts& facts,
                                     std::initializer_list<std::string> words) {
  std::vector<std::string> args = facts.service_prefix;
  const std::vector<std::string> self = SelfArgs(options);
  args.insert(args.end(), self.begin(), self.end());
  args.insert(args.end(), words);
  return args;
}

// Which Slurm step, and its summary line where the plan can tell it.
void PlanSlurm(const UpOptions& options, const UpFacts& facts, UpPlan& plan) {
  const bool running = !facts.slurm_running_url.empty();
  plan.slurm_runs = running;
  if (!options.config.up.slurm) {
    if (running || facts.cluster_slurm.empty()) return;
    plan.slurm = UpSlurm::kCluster;
    plan.slurm_runs = true;
    plan.slurm_line = fmt::format(
        "  {:<10} {:<28} the cluster's Slurm ([cluster.slurm] slurmrestd of {}); up neither "
        "starts nor stops it\n",
        "slurm", facts.cluster_slurm, options.config.source);
    return;
  }
  if (running && facts.previous_pid != 0 && facts.previous_owns_slurm) {
    plan.slurm = UpSlurm::kAdopt;
    plan.owns_slurm = true;
    plan.slurm_line = fmt::format(
        "  {:<10} {:<28} local Slurm started by the last bmas up (pid {}), which died; adopted: "
        "this one stops it\n",
        "slurm", facts.slurm_running_url, facts.previous_pid);
  } else if (running) {
    plan.slurm = UpSlurm::kLeaveRunning;
    plan.slurm_line = fmt::format("  {:<10} {:<28} local Slurm started by `bmas slurm up`; left "
                                  "running\n",
                                  "slurm", facts.slurm_running_url);
  } else if (!facts.slurm_why_not.empty() || !facts.slurm_start_error.empty()) {
    plan.slurm = UpSlurm::kCannot;
    plan.slurm_line = fmt::format("  {:<10} not started: {}\n", "slurm",
                                  facts.slurm_why_not.empty() ? facts.slurm_start_error
                                                              : facts.slurm_why_not);
  } else {
    plan.slurm = UpSlurm::kStart;
    plan.owns_slurm = true;
    plan.slurm_runs = true;
  }
}

// Whether the engines are a deployment of Slurm jobs, and the command that deploys it.
void PlanInference(const UpOptions& options, const UpFacts& facts, UpPlan& plan) {
  const Config& config = options.config;
  if (config.up.engines == 0 || !config.up.gateway) return;
  if (config.up.inference != "slurm") {
    plan.inference_why = "[up] inference = \"processes\"";
    return;
  }
  if (!plan.slurm_runs) {
    plan.inference_why = "no Slurm runs here";
    return;
  }
  plan.elastic = true;
  plan.model = config.engine.model;
  plan.deploy = ServiceArgs(options, facts,
                            {"inference", "deploy", config.engine.model, "--min", "1", "--max",
                             std::to_string(std::max(1, config.up.engines)), "--profile",
                             config.engine.profile, "--if-missing"});
}

UpPartPlan Engine(const UpOptions& options, const UpFacts& facts, int i) {
  const Config& config = options.config;
  UpPartPlan p;
  p.kind = UpPartKind::kEngine;
  p.name = fmt::format("engine-{}", i);
  p.log = LogPath(options, p.name + ".log");
  p.args = ServiceArgs(options, facts, {"engine"});
  p.listeners.push_back(
      {"--port", config.engine.host,
       static_cast<uint16_t>(config.up.engine_base_port > 0 ? config.up.engine_base_port + i : 0)});
  p.port_flag = "--port";
  p.backend_key = true;
  p.essential = true;
  p.fail_label = p.name;
  p.what = fmt::format("simulated vLLM engine, model {}, profile {}", config.engine.model,
                       config.engine.profile);
  p.serving = true;
  return p;
}

UpPartPlan Gateway(const UpOptions& options, const UpFacts& facts) {
  const Config& config = options.config;
  UpPartPlan p;
  p.kind = UpPartKind::kGateway;
  p.name = "gateway";
  p.log = LogPath(options, "gateway.log");
  p.args = ServiceArgs(options, facts, {"gateway"});
  p.listeners.push_back(
      {"--port", config.gateway.host, static_cast<uint16_t>(config.gateway.port)});
  if (!config.gateway.metrics_listen.empty()) {
    UpListenerPlan metrics{"--metrics-listen", "", 0, /*pass_host=*/true};
    if (auto hp = SplitHostPort(config.gateway.metrics_listen)) {
      metrics.host = hp->first;
      metrics.port = hp->second;
    } else {
      metrics.error = fmt::format("gateway: metrics_listen {}", hp.error().message);
    }
    p.listeners.push_back(std::move(metrics));
  }
  p.links.push_back({UpLinkTo::kEngines, "--backend"});
  p.port_flag = "--port";
  p.backend_key = true;
  p.essential = true;
  p.fail_label = p.name;
  p.what = fmt::format("OpenAI-compatible gateway ({} routing, {} fairness) over the engines",
                       config.gateway.routing, config.gateway.fairness);
  p.what_names_operator_metrics = true;
  p.scrape = UpScrape::kMetricsUrl;
  p.serving = true;
  return p;
}

// Runs the deployment's replicas as Slurm jobs of the service account.
// On the cluster's Slurm (UpSlurm::kCluster) the replicas run on the nodes: they listen on the
// node's addresses and, where `bmas cluster init` made the replica CA, serve TLS with the
// replica certificate each node's join wrote in /etc/bmas.
UpPartPlan Controller(const UpOptions& options, const UpFacts& facts, bool on_cluster) {
  const UpSettings& up = options.config.up;
  UpPartPlan p;
  p.kind = UpPartKind::kController;
  p.name = "controller";
  p.log = LogPath(options, "controller.log");
  p.args = ServiceArgs(options, facts, {"inference", "controller"});
  p.links.push_back({UpLinkTo::kGatewayMetrics, "--gateway", /*required=*/true});
  p.trailing_args = {"--port-base", std::to_string(up.replica_port_base), "--listen-host",
                     on_cluster ? "0.0.0.0" : "127.0.0.1"};
  if (on_cluster && facts.replica_ca) {
    p.trailing_args.push_back("--replica-tls");
    p.trailing_args.push_back("/etc/bmas");
  }
  p.trailing_args.insert(p.trailing_args.end(), {"--cancel-on-exit", "--scale-down-idle",
                     fmt::format("{}", up.replica_scale_down_idle_s), "--load-window",
                     fmt::format("{}", up.replica_load_window_s), "--breach-settle",
                     fmt::format("{}", up.replica_breach_settle_s), "--timetable-lead",
                     fmt::format("{}", up.timetable_lead_s)});
  if (!up.timezone.empty()) {
    p.trailing_args.push_back("--timezone");
    p.trailing_args.push_back(up.timezone);
  }
  p.backend_key = true;
  p.essential = true;
  p.fail_label = "inference controller";
  // The replica jobs' working directory and logs (operator data).
  p.private_dir = (fs::path(options.state_dir) / "replicas").string();
  p.shown = "(Slurm jobs)";
  p.what = fmt::format("replicas of {} as Slurm jobs (min 1, max {}), sized to load; "
                       "`bmas inference list`",
                       options.config.engine.model, std::max(1, up.engines));
  p.serving = true;
  return p;
}

// `bmas ARGS...` as up's user, beside the others: a helper that serves /metrics on loopback.
UpPartPlan Helper(const UpOptions& options, UpPartKind kind, const std::string& name,
                  const std::string& log, std::initializer_list<std::string> words,
                  const std::string& port_flag, int port, const std::string& what) {
  UpPartPlan p;
  p.kind = kind;
  p.name = name;
  p.log = LogPath(options, log);
  p.args = SelfArgs(options);
  p.args.insert(p.args.end(), words);
  p.listeners.push_back({port_flag, "127.0.0.1", static_cast<uint16_t>(port)});
  p.port_flag = port_flag;
  p.what = what;
  p.what_names_metrics = true;
  p.scrape = UpScrape::kUrl;
  return p;
}

// `bmas slurm tls-front` in front of the local slurmrestd, serving `url` ("https://HOST:PORT")
// with a certificate from the cluster CA for HOST: on HOST when it is an address, else on every
// address. Root's, as up is (it reads the CA key, then serves as nobody).
UpPartPlan TlsFront(const UpOptions& options, const std::string& url) {
  UpPartPlan p;
  p.kind = UpPartKind::kTlsFront;
  p.name = "tls-front";
  p.log = LogPath(options, "tls-front.log");
  p.args = SelfArgs(options);
  p.args.insert(p.args.end(), {"slurm", "tls-front"});
  std::string host_port = url.substr(std::string_view("https://").size());
  if (!host_port.empty() && host_port.back() == '/') host_port.pop_back();
  std::string host = host_port;
  std::string port = "6821";
  if (const size_t colon = host_port.rfind(':');
      colon != std::string::npos && host_port.find(']', colon) == std::string::npos) {
    host = host_port.substr(0, colon);
    port = host_port.substr(colon + 1);
  }
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  in6_addr any{};
  const bool literal = inet_pton(AF_INET, host.c_str(), &any) == 1 ||
                       inet_pton(AF_INET6, host.c_str(), &any) == 1;
  if (literal) {
    const bool v6 = host.find(':') != std::string::npos;
    p.args.insert(p.args.end(), {"--listen", v6 ? "[" + host + "]:" + port : host + ":" + port});
  } else {
    p.args.insert(p.args.end(), {"--listen", "0.0.0.0:" + port, "--name", host});
  }
  p.links = {{UpLinkTo::kSlurmRest, "--backend", true}};
  p.shown = url;
  p.what = "TLS in front of slurmrestd for the other nodes (certificate from the cluster CA)";
  return p;
}

// The web dashboard, as the service account (it faces the network): it reads Slurm, the
// store, the gateway's /load and the agent's /gpus.
UpPartPlan Dashboard(const UpOptions& options, const UpFacts& facts, const UpPlan& plan) {
  UpPartPlan p;
  p.kind = UpPartKind::kDashboard;
  p.name = "dashboard";
  p.log = LogPath(options, "dashboard.log");
  p.args = ServiceArgs(options, facts, {"dashboard"});
  // On [dashboard] listen's host, any free port (the summary gives the URL).
  UpListenerPlan listener{"--port"};
  listener.bind_error_prefix = "[dashboard] listen: ";
  if (auto hp = SplitHostPort(options.config.dashboard.listen)) {
    listener.host = hp->first;
  } else {
    listener.error = listener.bind_error_prefix + hp.error().message;
  }
  p.listeners.push_back(std::move(listener));
  p.links = {{UpLinkTo::kGatewayMetrics, "--gateway"}, {UpLinkTo::kAgent, "--agent"}};
  if (!plan.slurm_runs) p.trailing_args.push_back("--no-slurm");
  p.port_flag = "--port";
  p.what = "web dashboard: sign in with a bmas API key (bmas key create NAME)";
  return p;
}

// The summary's lines on how the engines run.
std::string Notes(const UpFacts& facts, const UpPlan& plan, size_t num_engines) {
  std::string notes;
  if (num_engines > 0 && !plan.inference_why.empty()) {
    notes += fmt::format("  engines are plain processes: {}\n", plan.inference_why);
  }
  if (num_engines > 0 || plan.elastic) {
    const std::string runs_as =
        facts.service_name.empty()
            ? fmt::format("as uid {} ({})", facts.euid, facts.service_why_not)
            : fmt::format("as the {} account", facts.service_name);
    notes += fmt::format("  engines and gateway run {}\n", runs_as);
  }
  return notes;
}

}  // namespace

std::vector<std::string> SelfArgs(const UpOptions& options) {
  std::vector<std::string> args = {options.self_exe, "--state-dir", options.state_dir};
  if (!options.config.source.empty()) {
    args.push_back("--config");
    args.push_back(options.config.source);
  }
  return args;
}

UpPlan PlanUp(const UpOptions& options, const UpFacts& facts) {
  const Config& config = options.config;
  UpPlan plan;
  PlanSlurm(options, facts, plan);
  PlanInference(options, facts, plan);
  for (int i = 0; !plan.elastic && i < config.up.engines; ++i) {
    plan.parts.push_back(Engine(options, facts, i));
  }
  const size_t num_engines = plan.parts.size();
  if (config.up.gateway && (num_engines > 0 || plan.elastic)) {
    plan.parts.push_back(Gateway(options, facts));
  }
  if (plan.elastic) {
    plan.parts.push_back(Controller(options, facts, plan.slurm == UpSlurm::kCluster));
  }
  // With a Slurm to watch: `bmas slurm monitor` serves its /metrics and records finished jobs.
  if (plan.slurm_runs) {
    plan.parts.push_back(Helper(options, UpPartKind::kSlurmMonitor, "slurm-mon",
                                "slurm-monitor.log", {"slurm", "monitor"}, "--port",
                                config.up.slurm_monitor_port,
                                "Slurm jobs and GPUs per user and partition, mode"));
    // Other nodes call this Slurm over https ([cluster.slurm] slurmrestd): a TLS front. The
    // cluster's own Slurm has the admin's (bmas-slurm-tls-front).
    if (!facts.slurmrestd_https.empty() && plan.slurm != UpSlurm::kCluster) {
      plan.parts.push_back(TlsFront(options, facts.slurmrestd_https));
    }
  }
  // LXD for workspaces, when this machine can run it; otherwise why not.
  plan.lxd_at = plan.parts.size();
  plan.previous_owns_lxd = facts.previous_pid != 0 && facts.previous_owns_lxd;
  if (config.up.lxd) {
    plan.lxd = facts.lxd_why_not.empty() ? UpLxd::kStart : UpLxd::kCannot;
    if (plan.lxd == UpLxd::kCannot) {
      plan.lxd_line = fmt::format("  {:<10} not started: {}\n", "lxd", facts.lxd_why_not);
    }
    plan.default_image = plan.lxd == UpLxd::kStart && config.up.image;
  }
  // With both: `bmas agent` runs jobs in their users' workspaces and unplugs stray GPUs.
  if (plan.lxd == UpLxd::kStart && plan.slurm_runs) {
    UpPartPlan agent = Helper(options, UpPartKind::kAgent, "agent", "agent.log", {"agent"},
                              "--metrics-port", 0, "runs jobs in workspaces, unplugs stray GPUs");
    agent.needs_lxd = true;
    plan.parts.push_back(std::move(agent));
  }
  if (config.up.dashboard) plan.parts.push_back(Dashboard(options, facts, plan));
  plan.notes = Notes(facts, plan, num_engines);
  plan.write_system_config = facts.euid == 0 && config.source.empty() &&
                             !facts.system_config_exists && facts.default_state_dir;
  plan.key_hint = (num_engines > 0 || plan.elastic) && config.up.gateway;
  plan.stop_grace = std::chrono::seconds(config.engine.shutdown_timeout_s + 5);
  return plan;
}

}  // namespace bmas
