#pragma once

// Where `bmas plan` takes its model of Slurm's timing from when no flag gives it: the cluster
// it is pointed at. Each value says where it came from, and the report prints that. Pure.
//
//  - Backfill interval: slurm.conf's SchedulerParameters bf_interval (Slurm's default, 30 s,
//    when it names none). bmas writes bf_interval=1 (src/slurm/slurm_config.cc).
//  - Time limits: each trace job's own (the csv's time_limit_s column: what it asked Slurm
//    for), else its duration (a perfect estimate).
//  - Launch delay, from Slurm's decision to the job's first instruction: kMeasuredLaunchDelayS,
//    what bmas's local Slurm measures from sbatch to a job's first instruction on an empty
//    cluster (bench/RESULTS.md, "Planner fidelity": 0.94-0.97 s over 5 tries; Slurm 22.05 starts
//    a batch job at its next scheduling pass, about half a second on average with bf_interval=1,
//    then the prolog and the launch). A cluster whose prolog does more needs --launch-delay.

#include <string>
#include <string_view>

namespace bmas::plan {

inline constexpr double kMeasuredLaunchDelayS = 0.95;

struct Calibrated {
  double value = 0;
  std::string source;  // "slurm.conf SchedulerParameters bf_interval=1", "--launch-delay", ...
};

// bf_interval from the text of a slurm.conf; `where` names it in the source.
Calibrated BackfillIntervalOf(std::string_view slurm_conf, std::string_view where);

// The launch delay: `flag` when given (>= 0), else kMeasuredLaunchDelayS.
Calibrated LaunchDelayOf(double flag);

}  // namespace bmas::plan
