#pragma once

// `bmas mode [--json]`, `bmas mode research --users a,b (--nodes LIST | --count N) [--force]`,
// `bmas mode lab`: a shared lab, or a few users owning whole nodes through a Slurm reservation.

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace bmas {

class ModeCommands {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int Show(GlobalOptions& global);
  int Research(GlobalOptions& global);
  int Lab(GlobalOptions& global);

  CLI::App* mode_ = nullptr;
  std::vector<std::string> users_;
  std::string nodes_;
  int count_ = 0;
  bool force_ = false;
  bool add_ = false;
  bool json_ = false;
};

}  // namespace bmas
