#pragma once

// `bmas dashboard`: the web dashboard (daemon/dashboard_main.h), as `bmas up` starts it.

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace bmas {

class DashboardCommand {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int Run(GlobalOptions& global);

  std::string listen_;
  int port_ = -1;  // -1: --listen's
  double refresh_s_ = 0;
  std::string gateway_;
  std::vector<std::string> agents_;
  bool slurm_ = true;
};

}  // namespace bmas
