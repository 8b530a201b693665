#pragma once

// The deep path from a user's shell: `bmas run`, `bmas jobs`, `bmas job show`, `bmas cancel`
// and `bmas logs`, through slurmrestd as the calling Unix user (root may act for others).
// The cluster is the local one `bmas slurm up` started in the state dir, else the inventory
// in the config file, whose [cluster.slurm] slurmrestd names where to reach Slurm.

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace bmas {

class JobCommands {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

  // For a `bmas run` whose command has options but no `--` before it (`bmas run python
  // train.py --epochs 3`: CLI11 takes --epochs for one of run's), the line that says so, with
  // the command as it should be; "" for any other parse error. Call after app.parse threw.
  std::string ForgottenDashDashHint(const CLI::ParseError& error, int argc,
                                    const char* const* argv) const;

 private:
  int Run(GlobalOptions& global);
  int Jobs(GlobalOptions& global);
  int Show(GlobalOptions& global);
  int Cancel(GlobalOptions& global);
  int Logs(GlobalOptions& global);

  // bmas run
  CLI::App* run_ = nullptr;
  std::string user_;
  std::string gpus_ = "0";  // ParseGpusOption: 4, 1g.10gb, 2x3g.40gb
  int nodes_ = 0, gpus_per_node_ = 0, cpus_per_gpu_ = 0, share_ = 0;
  std::string mem_;
  std::string partition_, time_, name_, launcher_ = "none";
  bool wait_ = false;
  bool detach_ = false;
  std::vector<std::string> command_;
  // bmas jobs / job show / cancel / logs
  bool all_ = false, json_ = false, follow_ = false;
  int64_t id_ = 0;
};

}  // namespace bmas
