#include "cli/cluster_commands.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cluster/cluster_files.h"
#include "cluster/controller_files.h"
#include "cluster/join_service.h"
#include "cluster/join_tls.h"
#include "cluster/node_files.h"
#include "cluster/prometheus_config.h"
#include "common/config.h"
#include "common/config_table.h"
#include "core/cluster.h"
#include "daemon/secret.h"
#include "daemon/services.h"

namespace bmas {
namespace {

// Root alone holds the cluster's CA key: refuse anyone else before touching anything.
Result<void> RequireRoot(const std::string& what) {
  if (geteuid() == 0) return {};
  return Error{ErrorCode::kPermissionDenied,
               fmt::format("only root {} (the cluster's CA key and join secrets are root's): run "
                           "it as root on the controller, e.g. with sudo",
                           what),
               {}};
}

}  // namespace

void ClusterCommands::Register(CLI::App& app, GlobalOptions& global) {
  CLI::App* cluster = app.add_subcommand(
      "cluster", "The cluster's identity on the controller: its CA and join tokens (root only)");
  cluster->require_subcommand(1);

  CLI::App* init = cluster->add_subcommand(
      "init",
      "Make the cluster's CA under <state-dir>/cluster/ (kept when it exists) and print "
      "a `bmas node join TOKEN` line for the nodes");
  init->add_option("--cluster", cluster_file_, "The cluster inventory (TOML)")
      ->required()
      ->check(CLI::ExistingFile);
  init->add_option("--address", address_,
                   "Where nodes reach this controller to join (default: the inventory's "
                   "controller address, else its name)");
  init->add_option("--port", port_,
                   fmt::format("The port nodes join at (default {})", cluster::kDefaultJoinPort))
      ->check(CLI::Range(1, 65535));
  init->add_option("--ttl-s", ttl_s_,
                   fmt::format("How long the token is valid, in seconds (default {})",
                               cluster::kDefaultJoinTokenTtlSeconds))
      ->check(kPositive);
  init->add_option("--slurm-dir", slurm_dir_,
                   "Where Slurm's configuration is written when absent (default /etc/slurm)");
  init->add_option("--munge-key", munge_key_,
                   "The munge key, made when absent (default /etc/munge/munge.key)");
  init->add_option("--jwt-key", jwt_key_,
                   "slurmrestd's JWT key, made when absent (default: the inventory's "
                   "slurm.jwt_key, else <slurm-dir>/jwt_hs256.key)");
  init->add_flag("--dynamic-nodes", dynamic_nodes_,
                 "slurm.conf lists no node: nodes register themselves when they join "
                 "(`bmas node join --dynamic`, slurmd -Z)");
  init->callback([this, &global] { global.exit_code = Init(global); });

  CLI::App* serve = cluster->add_subcommand(
      "serve", fmt::format("Serve `bmas node join` over TLS at the join endpoint (port {} unless "
                           "`cluster init --port` said otherwise) until SIGTERM",
                           cluster::kDefaultJoinPort));
  serve->add_option("--cluster", cluster_file_, "The cluster inventory (TOML)")
      ->required()
      ->check(CLI::ExistingFile);
  serve->add_option("--munge-key", munge_key_,
                    "The munge key nodes get (default /etc/munge/munge.key)");
  serve->add_option("--listen", listen_,
                    "The address to listen on (default: the join endpoint's address)");
  serve->callback([this, &global] { global.exit_code = Serve(global); });

  CLI::App* token = cluster->add_subcommand(
      "token", "Print a new `bmas node join TOKEN` line (after `bmas cluster init`)");
  token
      ->add_option("--ttl-s", ttl_s_,
                   fmt::format("How long the token is valid, in seconds (default {})",
                               cluster::kDefaultJoinTokenTtlSeconds))
      ->check(kPositive);
  token->callback([this, &global] { global.exit_code = Token(global); });

  CLI::App* prometheus = cluster->add_subcommand(
      "prometheus-config",
      "Print a Prometheus scrape config for every node's agent: https, checked against the "
      "cluster CA, with the operator secret as the bearer token");
  prometheus->add_option("--cluster", cluster_file_, "The cluster inventory (TOML)")
      ->required()
      ->check(CLI::ExistingFile);
  prometheus
      ->add_option("--agent-port", agent_port_,
                   fmt::format("The port of the agents' [agent] listen (default {})",
                               cluster::kDefaultAgentMetricsPort))
      ->check(CLI::Range(1, 65535));
  prometheus->add_option("--ca-file", prometheus_ca_,
                         "Where Prometheus reads the cluster CA's certificate (default "
                         "/etc/prometheus/bmas-ca.crt)");
  prometheus->add_option("--secret-file", prometheus_secret_,
                         "Where Prometheus reads the operator secret (default "
                         "/etc/prometheus/bmas-operator.secret)");
  prometheus->callback([this, &global] { global.exit_code = PrometheusConfig(global); });
  store_tls_.Register(*cluster, global);
}

int ClusterCommands::PrometheusConfig(GlobalOptions& global) {
  Cluster inventory;
  try {
    inventory = LoadCluster(cluster_file_);
  } catch (const ConfigError& e) {
    fmt::print(stderr, "bmas cluster prometheus-config: {}\n", e.what());
    return 2;
  }
  cluster::AgentScrape scrape;
  if (agent_port_ != 0) scrape.port = static_cast<uint16_t>(agent_port_);
  if (!prometheus_ca_.empty()) scrape.ca_file = prometheus_ca_;
  if (!prometheus_secret_.empty()) scrape.bearer_file = prometheus_secret_;
  fmt::print("{}", cluster::AgentScrapeConfig(inventory, scrape));
  const std::string state_dir = ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
  fmt::print(stderr,
             "Prometheus reads two files this config names: copy {}/ca.crt to {} and {} to {} "
             "(mode 0640, group prometheus); each agent listens on its address:{} ([agent] "
             "listen)\n",
             cluster::ClusterDir(state_dir), scrape.ca_file, OperatorSecretPath(state_dir),
             scrape.bearer_file, scrape.port);
  return 0;
}

int ClusterCommands::Init(GlobalOptions& global) {
  if (auto root = RequireRoot("sets up the cluster"); !root) {
    return ReportFailure("cluster init", root.error());
  }
  Cluster inventory;
  try {
    inventory = LoadCluster(cluster_file_);
  } catch (const ConfigError& e) {
    fmt::print(stderr, "bmas cluster init: {}\n", e.what());
    return 2;
  }
  cluster::JoinEndpoint endpoint;
  endpoint.address = !address_.empty()                       ? address_
                     : !inventory.controller.address.empty() ? inventory.controller.address
                                                             : inventory.controller.name;
  endpoint.port = static_cast<uint16_t>(port_ != 0 ? port_ : cluster::kDefaultJoinPort);
  const std::string state_dir = ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
  Env& env = global.services->env();
  auto id = cluster::EnsureClusterCa(state_dir, inventory.slurm.cluster_name, endpoint,
                                     static_cast<int64_t>(env.UnixNow()));
  if (!id) return ReportFailure("cluster init", id.error());
  fmt::print(stderr, "{} the cluster CA {}/ca.crt (sha256:{}); nodes join at {}:{}\n",
             id->created ? "Made" : "Kept", cluster::ClusterDir(state_dir),
             cluster::Hex(id->ca_sha256), endpoint.address, endpoint.port);
  cluster::ControllerPaths paths;
  paths.slurm_dir = slurm_dir_;
  paths.munge_key = munge_key_;
  paths.jwt_key = jwt_key_;
  paths.dynamic_nodes = dynamic_nodes_;
  auto files = cluster::WriteControllerFiles(inventory, paths, env);
  if (!files) return ReportFailure("cluster init", files.error());
  for (const auto& f : *files) {
    fmt::print(stderr, "{} {}{}\n", f.created ? "Wrote" : "Kept", f.path,
               f.note.empty() ? "" : " (" + f.note + ")");
  }
  fmt::print(
      stderr,
      "Start on this controller: munged, `slurmctld` (configless: nodes fetch {}/slurm.conf) "
      "and `bmas cluster serve --cluster {}` for the joins\n",
      slurm_dir_, cluster_file_);
  return PrintNewToken(global, "cluster init", state_dir);
}

int ClusterCommands::Serve(GlobalOptions& global) {
  if (auto root = RequireRoot("serves joins"); !root) {
    return ReportFailure("cluster serve", root.error());
  }
  global.SetUpLogging();
  Cluster inventory;
  try {
    inventory = LoadCluster(cluster_file_);
  } catch (const ConfigError& e) {
    fmt::print(stderr, "bmas cluster serve: {}\n", e.what());
    return 2;
  }
  const std::string state_dir = ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
  Env& env = global.services->env();
  const auto now = static_cast<int64_t>(env.UnixNow());
  auto id = cluster::LoadClusterCa(state_dir);
  if (!id) return ReportFailure("cluster serve", id.error());
  auto endpoint = cluster::LoadJoinEndpoint(state_dir);
  if (!endpoint) return ReportFailure("cluster serve", endpoint.error());
  auto server_cert = cluster::EnsureControllerCertificate(
      state_dir, {inventory.controller.name, endpoint->address}, now);
  if (!server_cert) return ReportFailure("cluster serve", server_cert.error());

  cluster::JoinMaterial material;
  material.ca = id->ca;
  material.replica_ca = id->replica_ca;
  for (const Node& n : inventory.nodes) {
    if (n.layout_index < 0) material.nodes.push_back({n.name, n.address});
  }
  auto munge = cluster::ReadNodeFile(munge_key_);
  if (!munge || !*munge) {
    return ReportFailure("cluster serve",
                         NotFound(fmt::format("there is no munge key at {}: run `bmas cluster "
                                              "init` first, or give --munge-key",
                                              munge_key_)));
  }
  material.munge_key = (*munge)->contents;
  std::ifstream in(cluster_file_, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  material.bmas_toml = text.str();
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  material.prolog = cluster::HookScript(self, "prolog");
  material.epilog = cluster::HookScript(self, "epilog");
  // The nodes' agents ask for this controller's operator secret, which its dashboard and
  // Prometheus send them.
  auto secret = EnsureOperatorSecret(state_dir);
  if (!secret) return ReportFailure("cluster serve", secret.error());
  material.operator_secret = *secret;

  cluster::JoinServerOptions options;
  options.host = listen_.empty() ? endpoint->address : listen_;
  options.port = endpoint->port;
  options.server = *server_cert;
  options.ca_cert_pem = id->ca.cert_pem;
  auto server = cluster::ListenForJoins(options, [&](const cluster::JoinRequest& request,
                                                     const std::string&) {
    // Read for each request: `bmas cluster token` adds records while this serves.
    auto records = cluster::LoadTokenRecords(state_dir);
    if (!records) return Result<cluster::JoinReply>(records.error());
    return cluster::DecideJoinAndKeep(state_dir, material, *records, request,
                                      static_cast<int64_t>(env.UnixNow()));
  }, [&](const std::string& host, const std::string& cert_pem, const std::string&) {
    return cluster::DecideLxdPeersFromKept(state_dir, material, host, cert_pem,
                                           static_cast<int64_t>(env.UnixNow()));
  });
  if (!server) return ReportFailure("cluster serve", server.error());
  fmt::print(stderr, "Serving node joins at {}:{} (TLS, certificate sha256 of the CA {})\n",
             options.host, (*server)->port(), cluster::Hex(id->ca_sha256));
  std::fflush(stderr);
  (*server)->Run(true);
  return 0;
}

int ClusterCommands::Token(GlobalOptions& global) {
  if (auto root = RequireRoot("makes join tokens"); !root) {
    return ReportFailure("cluster token", root.error());
  }
  return PrintNewToken(global, "cluster token",
                       ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults()));
}

int ClusterCommands::PrintNewToken(GlobalOptions& global, const std::string& command,
                                   const std::string& state_dir) {
  Env& env = global.services->env();
  const auto now = static_cast<int64_t>(env.UnixNow());
  auto token = cluster::IssueJoinToken(state_dir, env, now,
                                       ttl_s_ > 0 ? ttl_s_ : cluster::kDefaultJoinTokenTtlSeconds);
  if (!token) return ReportFailure(command, token.error());
  fmt::print(stderr,
             "Run this as root on each node to join it, until {} (`bmas cluster token` makes "
             "another); it is a secret, like a password:\n",
             cluster::UtcStamp(token->expires_at));
  std::fflush(stderr);
  fmt::print("bmas node join {}\n", cluster::FormatJoinToken(*token));
  return 0;
}

}  // namespace bmas
