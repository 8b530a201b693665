#include "cli/dashboard_command.h"

#include <pwd.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "cli/slurm_commands.h"
#include "common/listen_socket.h"
#include "daemon/secret.h"
#include "daemon/dashboard_main.h"
#include "slurm/rest_client.h"

namespace bmas {

void DashboardCommand::Register(CLI::App& app, GlobalOptions& global) {
  CLI::App* cmd = app.add_subcommand(
      "dashboard", "Serve the web dashboard: cluster map, queue, inference, users, mode (bmas up "
                   "starts it)");
  cmd->add_option("--listen", listen_, "host:port to listen on (default: [dashboard] listen)");
  cmd->add_option("--port", port_, "Port to listen on, over --listen's (0 picks a free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--refresh", refresh_s_, "Seconds between reads of the cluster's state")
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--gateway", gateway_, "host:port of the gateway's operator listener (/load)");
  cmd->add_option("--agent", agents_,
                  "An agent's metrics listener (/gpus): a loopback host:port, or "
                  "https://NODE:PORT checked against [agent] ca; repeat (adds to [dashboard] "
                  "agents)");
  cmd->add_flag("--slurm,!--no-slurm", slurm_, "Watch the Slurm this bmas finds (default on)");
  cmd->callback([this, &global] { global.exit_code = Run(global); });
}

int DashboardCommand::Run(GlobalOptions& global) {
  global.SetUpLogging();
  const Config config = global.LoadConfigOrDefaults();
  const std::string state_dir = ResolveStateDir(global.state_dir, config);
  DashboardOptions o;
  // "host:port" where port 0 picks a free one.
  const std::string listen = listen_.empty() ? config.dashboard.listen : listen_;
  auto address = SplitHostPort(listen);
  if (!address) {
    fmt::print(stderr, "bmas dashboard: listen address {}\n", address.error().message);
    return 2;
  }
  o.host = address->first;
  const int port = address->second;
  o.port = static_cast<uint16_t>(port_ >= 0 ? port_ : port);
  const double refresh = refresh_s_ > 0 ? refresh_s_ : config.dashboard.refresh_s;
  o.interval = std::chrono::milliseconds(static_cast<int64_t>(refresh * 1000));
  o.session_s = int64_t{config.dashboard.session_hours} * 3600;
  o.store_path = StorePath(state_dir);
  o.gateway = gateway_;
  o.agents = config.dashboard.agents;
  o.agents.insert(o.agents.end(), agents_.begin(), agents_.end());
  o.ca_file = config.agent.ca;
  for (const std::string& a : o.agents) {
    if (auto parsed = ParseOperatorAddress(a, o.ca_file); !parsed) {
      fmt::print(stderr, "bmas dashboard: agent {}: {}\n", a, parsed.error().message);
      return 2;
    }
  }
  if (!o.gateway.empty() || !o.agents.empty()) {
    auto secret = EnsureOperatorSecret(state_dir);
    if (!secret) {
      fmt::print(stderr, "bmas dashboard: reading the gateway's and agents' operator data: {}\n",
                 secret.error().message);
      return 1;
    }
    o.operator_secret = std::move(*secret);
  }
  if (slurm_) {
    passwd* pw = getpwuid(geteuid());
    o.poll_slurm = SlurmPoller(global, pw != nullptr ? pw->pw_name : "root", false);
  }
  return RunDashboard(o);
}

}  // namespace bmas
