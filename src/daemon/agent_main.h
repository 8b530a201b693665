#pragma once

// `bmas agent`'s main: the node's root broker wired from the config, the command's flags and
// the adapters Services hands out (agent/agent.h is the broker itself).

#include <functional>
#include <string>

#include "common/config.h"
#include "common/result.h"
#include "daemon/services.h"

namespace bmas {

// The flags of `bmas agent` (0 or "" where the config's value applies).
struct AgentFlags {
  std::string socket;  // "" = <state dir>/run/agent.sock
  int metrics_port = 0;
  double reconcile_s = 60;
  double io_timeout_s = 10;
  int max_per_uid = 64;
  std::string nvml_library;  // "" = [telemetry] nvml_library
  double telemetry_s = 0;    // 0 = [telemetry] interval_s
};

// Runs the agent until it is stopped; its exit code. `root_slurm` gives Slurm's endpoint acting
// as root, resolved anew on each call (a local cluster may come up later; tokens expire).
int RunAgentMain(const AgentFlags& flags, const Config& config, const std::string& state_dir,
                 std::function<Result<RestEndpoint>()> root_slurm, Services& services);

}  // namespace bmas
