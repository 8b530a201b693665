#pragma once

// `bmas agent` (the root broker that runs jobs in workspaces; bmas up starts it) and
// `bmas agent exec -- CMD` (what a job's batch script runs, as the user), and `bmas agent get`
// (an operator reads an agent's /gpus, /metrics or /health, as the dashboard does).

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
  int Get(GlobalOptions& global);

  CLI::App* agent_ = nullptr;
  AgentFlags flags_;
  std::vector<std::string> command_;
  std::string get_address_;
  std::string get_path_ = "/gpus";
};

}  // namespace bmas
