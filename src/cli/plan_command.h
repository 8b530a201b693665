#pragma once

// `bmas plan`: the capacity planner. Today it simulates a job trace on a cluster's inventory
// (`--cluster FILE --trace FILE [--trace-format csv|alibaba-v2023]`) with the model of Slurm in
// src/plan/slurm_model.h, and reports waits, completions, the makespan and the GPUs allocated.
// The scenario (`--scenario FILE`: cohorts, inference, policies, costs) is read and checked; its
// simulation of inference beside training is not built yet, and the command says so.

#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace bmas {

class PlanCommand {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int Run(GlobalOptions& global);

  std::string scenario_;
  std::string cluster_;
  std::string trace_;
  std::string trace_format_ = "csv";
  bool json_ = false;
  double launch_delay_s_ = 0;
  double backfill_interval_s_ = 1;
};

}  // namespace bmas
