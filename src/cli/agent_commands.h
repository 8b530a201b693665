#pragma once

// `bmas agent` (the root broker that runs jobs in workspaces; bmas up starts it) and
// `bmas agent exec -- CMD` (what a job's batch script runs, as the user).

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "daemon/agent_main.h"

namespace bmas {

class AgentCommands {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int Serve(GlobalOptions& global);

  CLI::App* agent_ = nullptr;
  AgentFlags flags_;
  std::vector<std::string> command_;
};

}  // namespace bmas
