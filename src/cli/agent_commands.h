#pragma once

// `bmas agent` (the root broker that runs jobs in workspaces; bmas up starts it) and
// `bmas agent exec -- CMD` (what a job's batch script runs, as the user).

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace bmas {

class AgentCommands {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int Serve(GlobalOptions& global);

  CLI::App* agent_ = nullptr;
  std::string socket_;
  int metrics_port_ = 0;
  double reconcile_s_ = 60;
  double io_timeout_s_ = 10;
  std::string nvml_library_;  // "" = [telemetry] nvml_library
  double telemetry_s_ = 0;     // 0 = [telemetry] interval_s
  int max_per_uid_ = 64;
  std::vector<std::string> command_;
};

}  // namespace bmas
