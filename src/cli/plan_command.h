#pragma once

// `bmas plan`: the capacity planner.
//  - `--scenario FILE` simulates the whole cluster for the scenario's days (src/plan/
//    cluster_sim.h): the cohorts' chat sessions through the gateway's admission and autoscaled
//    replicas, their jobs (or a trace's) through the model of Slurm, and reports latency, waits,
//    GPUs by path, costs and a verdict; `--sweep KEY=V1,...` runs it once per value.
//  - `--cluster FILE --trace FILE` alone replays the trace's jobs on the inventory with no
//    inference load.

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/clock.h"
#include "core/cluster.h"
#include "plan/calibration.h"
#include "plan/slurm_model.h"

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
  // -1: from the cluster (plan/calibration.h).
  double launch_delay_s_ = -1;
  double backfill_interval_s_ = -1;
  double time_limit_s_ = -1;
  std::string sweep_;
  std::string html_;
  int64_t seed_ = -1;  // -1: the scenario's

  int RunScenario(const Clock& clock, const plan::Calibrated& launch);
  // Writes the report to --html's file, if given; false (having said why) when it cannot.
  bool WriteHtml(const std::string& json) const;
  // Sets the jobs' time limits from --time-limit when given; says where they came from.
  std::string ApplyTimeLimits(std::vector<plan::SimJob>& jobs) const;
  // --backfill-interval, else bf_interval in the slurm.conf bmas writes for `cluster` (`file`).
  plan::Calibrated BackfillInterval(const Cluster& cluster, const std::string& file) const;
  // --launch-delay, else the estimate from the history of the Slurm bmas talks to
  // (cli/slurm_target.h), asked with a short deadline, else the measured default.
  plan::Calibrated LaunchDelay(GlobalOptions& global) const;
};

}  // namespace bmas
