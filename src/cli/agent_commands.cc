#include "cli/agent_commands.h"

#include <fmt/format.h>

#include "agent/agent.h"
#include "cli/slurm_target.h"
#include "common/config.h"
#include "common/operator_auth.h"
#include "daemon/secret.h"
#include "slurm/rest_client.h"
#include "daemon/agent_main.h"

namespace bmas {

void AgentCommands::Register(CLI::App& app, GlobalOptions& global) {
  agent_ = app.add_subcommand(
      "agent", "The node's broker (root): runs jobs in their users' workspaces, unplugs GPUs of "
               "jobs that are gone, serves /metrics (bmas up starts it)");
  agent_->add_option("--socket", flags_.socket, "Unix socket (default: <state dir>/run/agent.sock)");
  agent_->add_option("--metrics-port", flags_.metrics_port, "Port of /metrics (0 picks a free one)")
      ->check(CLI::Range(0, 65535));
  agent_->add_option("--reconcile-interval", flags_.reconcile_s,
                     "Seconds between reconcile passes (default 60)")
      ->check(CLI::Range(0.1, 86400.0));
  agent_
      ->add_option("--io-timeout", flags_.io_timeout_s,
                   "Seconds a connection may take to send its request (default 10)")
      ->check(CLI::Range(0.1, 3600.0));
  agent_
      ->add_option("--max-connections-per-uid", flags_.max_per_uid,
                   "Connections one user may hold open at once (default 64)")
      ->check(CLI::Range(1, 100000));
  agent_->add_option("--nvml-library", flags_.nvml_library,
                     "The NVIDIA driver's libnvidia-ml to read GPUs with (default: [telemetry] "
                     "nvml_library, else libnvidia-ml.so.1)");
  agent_
      ->add_option("--telemetry-interval", flags_.telemetry_s,
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
        RunAgentExec(flags_.socket.empty() ? AgentSocketPath(state_dir) : flags_.socket, command_);
  });
  CLI::App* get = agent_->add_subcommand(
      "get", "Print an agent's /gpus (or /metrics, /health) as the dashboard reads it: over TLS "
             "checked against [agent] ca for https://NODE:PORT, with the operator secret");
  get->add_option("address", get_address_,
                  "The agent's metrics listener: https://NODE:PORT, or a loopback host:port")
      ->required();
  get->add_option("path", get_path_, "/gpus (default), /metrics or /health")
      ->check(CLI::IsMember({"/gpus", "/metrics", "/health"}));
  get->callback([this, &global] { global.exit_code = Get(global); });
}

int AgentCommands::Get(GlobalOptions& global) {
  const Config config = global.LoadConfigOrDefaults();
  const std::string state_dir = ResolveStateDir(global.state_dir, config);
  if (auto parsed = ParseOperatorAddress(get_address_, config.agent.ca); !parsed) {
    fmt::print(stderr, "bmas agent get: {}\n", parsed.error().message);
    return 2;
  }
  auto secret = ReadSecret(OperatorSecretPath(state_dir), kOperatorSecretEnv);
  if (!secret || secret->empty()) {
    fmt::print(stderr,
               "bmas agent get: no operator secret to send ({}): run it as the account that "
               "runs bmas's daemons, with their state dir (--state-dir), or set {}\n",
               secret ? OperatorSecretPath(state_dir) + " is missing" : secret.error().message,
               kOperatorSecretEnv);
    return 1;
  }
  auto body = HttpGet(get_address_, get_path_, "the agent", OperatorBearer(*secret),
                      std::chrono::seconds(10), config.agent.ca);
  if (!body) {
    fmt::print(stderr, "bmas agent get: {}\n", body.error().message);
    return 1;
  }
  fmt::print("{}", *body);
  if (!body->empty() && body->back() != '\n') fmt::print("\n");
  return 0;
}

int AgentCommands::Serve(GlobalOptions& global) {
  global.SetUpLogging();
  const Config config = global.LoadConfigOrDefaults();
  auto root_slurm = [&global]() -> Result<RestEndpoint> {
    auto target = ResolveSlurm(global, "root");
    if (!target) return target.error();
    return target->endpoint;
  };
  return RunAgentMain(flags_, config, ResolveStateDir(global.state_dir, config), root_slurm,
                      *global.services);
}

}  // namespace bmas
