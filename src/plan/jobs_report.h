#pragma once

// What `bmas plan` reports of the jobs it simulated: waits, completions, the makespan and the
// GPUs allocated, overall and by job size; as text and as the JSON of `bmas plan --json`.
// Pure: takes the model's result, returns figures and strings.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "plan/calibration.h"
#include "plan/slurm_model.h"

namespace bmas::plan {

struct Stats {
  int64_t count = 0;
  double mean = 0;
  double p50 = 0;
  double p95 = 0;
  double p99 = 0;
};

// Nearest-rank percentiles (the value that q of the samples do not exceed) and the mean.
Stats Summarize(std::vector<double> samples);

struct JobsReport {
  int64_t count = 0;        // jobs in the trace
  int64_t started = 0;      // jobs that ran
  int64_t cannot_run = 0;   // jobs no partition could hold (the first error is kept)
  std::string first_error;
  int64_t requeues = 0;
  Stats wait_s;        // submission to (last) start
  Stats completion_s;  // submission to end
  double makespan_s = 0;           // first submission to last end
  int total_gpus = 0;
  double allocated_fraction = 0;   // GPU-seconds allocated / (GPUs x makespan)
  std::map<int, Stats> wait_by_gpus;        // wait_s by the job's GPU count
  std::map<int, Stats> completion_by_gpus;  // completion_s by the job's GPU count
};

JobsReport ReportJobs(const Cluster& cluster, const std::vector<SimJob>& jobs,
                      const SlurmModelResult& result);

// How the simulation itself went.
struct SimInfo {
  double wall_s = 0;
  double simulated_s = 0;
  int64_t events = 0;
  // The model's timing and where each value came from (plan/calibration.h).
  Calibrated launch_delay_s;
  Calibrated backfill_interval_s;
  std::string time_limits;  // where the jobs' time limits came from
};

// One sentence: the jobs, the GPUs, the wait p95 and how busy the GPUs were.
std::string JobsVerdict(const JobsReport& report);

// `bmas plan --json` for a job trace alone: verdict, jobs, gpus and sim as the issue names
// them; inference and cost are null (no inference load and no scenario's prices).
std::string JobsPlanJson(const JobsReport& report, const SimInfo& sim);

// The same for people.
std::string JobsPlanText(const JobsReport& report, const SimInfo& sim);

}  // namespace bmas::plan
