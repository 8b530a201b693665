#include "cli/cluster_commands.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "cluster/cluster_files.h"
#include "common/config.h"
#include "common/config_table.h"
#include "core/cluster.h"
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
  init->callback([this, &global] { global.exit_code = Init(global); });

  CLI::App* token = cluster->add_subcommand(
      "token", "Print a new `bmas node join TOKEN` line (after `bmas cluster init`)");
  token
      ->add_option("--ttl-s", ttl_s_,
                   fmt::format("How long the token is valid, in seconds (default {})",
                               cluster::kDefaultJoinTokenTtlSeconds))
      ->check(kPositive);
  token->callback([this, &global] { global.exit_code = Token(global); });
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
  return PrintNewToken(global, "cluster init", state_dir);
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
