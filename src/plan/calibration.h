#pragma once

// Where `bmas plan` takes its model of Slurm's timing from when no flag gives it: the cluster
// it is pointed at. Each value says where it came from, and the report prints that. Pure.
//
//  - Backfill interval: slurm.conf's SchedulerParameters bf_interval (Slurm's default, 30 s,
//    when it names none). bmas writes bf_interval=1 (src/slurm/slurm_config.cc).
//  - Time limits: each trace job's own (the csv's time_limit_s column: what it asked Slurm
//    for), else its duration (a perfect estimate).
//  - Launch delay, from a job's submission on free GPUs to its first instruction: from the
//    history of the Slurm bmas talks to, when one answers (LaunchDelayFromHistory), else
//    kMeasuredLaunchDelayS, what bmas's local Slurm measures from sbatch to a job's first
//    instruction on an empty cluster (bench/RESULTS.md, "Planner fidelity": 0.94-0.97 s over 5
//    tries; Slurm 22.05 starts a batch job at its next scheduling pass, about half a second on
//    average with bf_interval=1, then the prolog and the launch).
//
// What Slurm's records show of the launch delay, and what they do not: a job's start_time is
// when slurmctld allocated its nodes, before the prolog runs and the batch script is launched
// on the node; its eligible_time, when it could first start (submission, or its begin time or
// dependencies met). So start - eligible is the wait for a scheduling pass, in whole seconds,
// and the rest, allocation to first instruction (prolog, launch), is in no record. The
// estimate is the mean of start - eligible over finished jobs that started on free GPUs (the
// mean of whole-second differences is the mean of the true ones when submissions fall at any
// moment of a second), plus kUnseenLaunchS: that rest as bmas's local Slurm measures it, its
// launch delay less the half second a job waits there on average for its pass. A cluster
// whose prolog does more than bmas's needs --launch-delay.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bmas::plan {

inline constexpr double kMeasuredLaunchDelayS = 0.95;
// Allocation to first instruction (prolog, launch) on bmas's local Slurm: what Slurm's records
// do not see of kMeasuredLaunchDelayS (see above).
inline constexpr double kUnseenLaunchS = 0.45;
// Fewer jobs that started on free GPUs than this, and the history gives no launch delay: a
// whole-second wait of about half a second varies by about 0.5 s, so 10 put the mean within
// about 0.15 s.
inline constexpr int kMinLaunchJobs = 10;

struct Calibrated {
  double value = 0;
  std::string source;  // "slurm.conf SchedulerParameters bf_interval=1", "--launch-delay", ...
};

// bf_interval from the text of a slurm.conf; `where` names it in the source.
Calibrated BackfillIntervalOf(std::string_view slurm_conf, std::string_view where);

// The launch delay: `flag` when given (>= 0), else kMeasuredLaunchDelayS; `why` (when not
// empty) says in its source why the cluster's history did not give one.
Calibrated LaunchDelayOf(double flag, std::string_view why = "");

// A job as Slurm recorded it (slurmctld's or slurmdbd's jobs): whole unix seconds.
struct RecordedJob {
  int64_t submit_s = 0;
  int64_t eligible_s = 0;  // 0: none recorded (submit_s stands in)
  int64_t start_s = 0;     // 0: never started
  int64_t end_s = 0;       // 0: not finished
  int gpus = 0;
  bool allocated = false;  // it held nodes (a job cancelled while pending has a start_s too)
};

// The jobs of one Slurm, pending, running and finished, and what they ran on.
struct JobHistory {
  std::string where;  // "slurmrestd at 127.0.0.1:6820"
  std::vector<RecordedJob> jobs;
  int cluster_gpus = 0;
  double backfill_interval_s = 30;  // its bf_interval
};

// The launch delay from `history`: the mean eligible-to-start of its finished jobs that started
// on free GPUs, plus kUnseenLaunchS. A job started on free GPUs when it held nodes, started
// within bf_interval + 2 s of being eligible (a backfill pass, a second's rounding either side;
// longer is a wait for something: QOS limits, a reservation, a hold), and when it became
// eligible, the GPUs of the jobs then running or pending ahead of it (eligible no later, not
// yet ended) and its own fit the cluster. Fewer than kMinLaunchJobs such jobs: the measured
// default, and the source says why.
Calibrated LaunchDelayFromHistory(const JobHistory& history);

}  // namespace bmas::plan
