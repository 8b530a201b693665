// bmas: one binary, git-style subcommands.

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/agent_commands.h"
#include "cli/cluster_commands.h"
#include "cli/node_commands.h"
#include "cli/node_join_command.h"
#include "cli/commands.h"
#include "cli/dashboard_command.h"
#include "cli/doctor_command.h"
#include "cli/job_commands.h"
#include "cli/lxd_commands.h"
#include "cli/inference_commands.h"
#include "cli/plan_command.h"
#include "cli/mode_commands.h"
#include "cli/slurm_commands.h"
#include "cli/user_commands.h"
#include "common/config.h"
#include "common/config_table.h"
#include "common/version.h"
#include "daemon/services.h"

int main(int argc, char** argv) {
  using namespace bmas;
  // A closed stdin, stdout or stderr would be taken by the next socket opened, which would then
  // be read or written as one (`workspace shell` relays all three); /dev/null holds the place.
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    if (fcntl(fd, F_GETFD) < 0) open("/dev/null", O_RDWR);  // the lowest free descriptor: fd
  }
  CLI::App app{"bmas: the operating layer of a shared bare-metal AI cluster", "bmas"};
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 done; 1 a failure bmas explains on stderr; 2 a usage error or a refusal "
      "(a wrong flag, a value out of range, a request that cannot be met). `bmas run --wait` "
      "exits with the job's own code.\n");
  app.set_help_all_flag("--help-all", "Show help for every command");
  app.set_version_flag("--version", fmt::format("bmas {}", kBmasVersion), "Print bmas's version");

  GlobalOptions global;
  global.services = &RealServices();
  app.add_option("--config", global.config_file,
                 "TOML config file (see examples/bmas.toml; default: $BMAS_CONFIG, else "
                 "/etc/bmas/bmas.toml when it exists)")
      ->check(CLI::ExistingFile)
      // Where the store is, for every part of this process that opens it.
      ->each([](const std::string& path) { UseConfigForStore(path); });
  app.add_option("--state-dir", global.state_dir,
                 "Directory for all state (default: $BMAS_STATE_DIR, else the config's state_dir, "
                 "else /var/lib/bmas, the cluster's, for every user)");
  app.add_option("--log-level", global.log_level, "trace, debug, info, warn or error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));

  CLI::App* version = app.add_subcommand("version", "Print bmas's version");
  version->callback([] { fmt::print("bmas {}\n", kBmasVersion); });

  EngineCommand engine_cmd;
  engine_cmd.Register(app, global);
  GatewayCommand gateway_cmd;
  gateway_cmd.Register(app, global);
  UpCommand up_cmd;
  up_cmd.Register(app, global);
  UserCommands user_cmds;
  user_cmds.Register(app, global);
  SlurmCommands slurm_cmds;
  slurm_cmds.Register(app, global);
  JobCommands job_cmds;
  job_cmds.Register(app, global);
  ModeCommands mode_cmds;
  mode_cmds.Register(app, global);
  AgentCommands agent_cmds;
  agent_cmds.Register(app, global);
  LxdCommands lxd_cmds;
  lxd_cmds.Register(app, global);
  DoctorCommand doctor_cmd;
  doctor_cmd.Register(app, global);
  DashboardCommand dashboard_cmd;
  dashboard_cmd.Register(app, global);
  InferenceCommands inference_cmds;
  inference_cmds.Register(app, global);
  PlanCommand plan_cmd;
  plan_cmd.Register(app, global);
  ClusterCommands cluster_cmds;
  cluster_cmds.Register(app, global);
  NodeCommands node_cmds;
  node_cmds.Register(app, global);
  NodeJoinCommand node_join_cmd;
  node_join_cmd.Register(app, global);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (std::string hint = job_cmds.ForgottenDashDashHint(e, argc, argv); !hint.empty()) {
      fmt::print(stderr, "{}\n", hint);
      return 2;
    }
    // --help and --version print and exit 0; every usage error exits 2 (CLI11's own codes
    // would be 100 and up).
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const ConfigError& e) {
    fmt::print(stderr, "bmas: {}\n", e.what());
    return 2;
  }
  return global.exit_code;
}
