#include "cli/agent_commands.h"

#include <fmt/format.h>

#include "agent/agent.h"
#include "cli/slurm_target.h"
#include "common/config.h"
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
