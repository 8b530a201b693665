#pragma once

#include <string>

// `bmas doctor [--json]`: this node against the cluster's hardware specification and against
// what bmas needs here (src/doctor/).

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace bmas {

class DoctorCommand {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int Run(GlobalOptions& global);

  CLI::App* cmd_ = nullptr;
  bool json_ = false;
  std::string cluster_;  // --cluster: the inventory whose MIG layouts this node's GPUs must have
  std::string node_;     // --node: this node's name in it ("" = the host name)
};

}  // namespace bmas
