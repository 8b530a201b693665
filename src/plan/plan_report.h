#pragma once

// What `bmas plan --scenario` reports: inference latency per cohort and the share of hours
// meeting the SLOs, job waits per cohort and size, GPUs by path over time, costs against the
// cloud and a GPU per user, and a verdict; as text and as the JSON of `bmas plan --json` (its
// fields: docs in README, "Planning capacity"). Pure: a finished run goes in, figures come out.

#include <optional>
#include <string>
#include <vector>

#include "engine/timing.h"
#include "plan/cluster_sim.h"
#include "plan/jobs_report.h"
#include "plan/scenario.h"

namespace bmas::plan {

struct CohortInference {
  std::string cohort;
  int64_t requests = 0;
  Stats ttft_s, itl_s, e2e_s;
};

struct CohortJobs {
  std::string cohort;
  Stats wait_s, completion_s;
  double gpu_hours = 0;
};

struct HourPoint {
  double inference = 0;  // GPUs held on average over the hour
  double training = 0;
  double idle = 0;
  std::optional<bool> slo_met;  // nullopt: no load that hour
  double ttft_p99_s = 0;        // of requests sent that hour (failed ones count as endless)
  double wait_p95_s = 0;        // of jobs submitted that hour
  Stats wait_s;                 // the same jobs' waits (a job that never started: endless)
};

struct CostReport {
  std::string currency;
  double cluster_per_month = 0;
  std::optional<double> per_user_month;
  std::optional<double> per_gpu_hour;
  std::optional<double> cloud_on_demand_per_user_month;
  std::optional<double> cloud_reserved_per_user_month;
  std::optional<double> gpu_per_user_per_user_month;
};

// How the engine profile the replicas use compares with published figures: for the llama
// H100 profile, NVIDIA NIM's ITL and TTFT (engine/calibrate.h, as `bmas engine calibrate`).
struct EngineCalibration {
  std::string profile;
  std::string reference;          // "" when there is none for this profile
  std::optional<double> worst_error;  // largest relative ITL/TTFT error over the reference points
};

EngineCalibration CalibrateProfile(const engine::Profile& profile);

// What MIG slices did: jobs on slices and their wait, layout changes of the GPUs that follow
// demand, and users per physical GPU (the figure the 300-on-48 verdict turns on).
struct MigReport {
  int sliced_gpus = 0;    // GPUs split by a fixed layout
  int flexible_gpus = 0;  // GPUs whose layout follows demand
  Stats slice_wait_s;     // of jobs that ran on slices
  int64_t fell_back = 0;  // jobs that fit a slice but ran on whole GPUs
  int64_t layout_changes = 0;
  double users_per_gpu = 0;
};

struct PlanReport {
  std::string verdict;
  EngineCalibration engine;
  bool met = false;  // the SLOs hold in hours_met_fraction of the hours with load
  int users = 0;
  JobsReport jobs;
  std::vector<CohortJobs> jobs_by_cohort;
  MigReport mig;
  // Inference.
  int64_t requests = 0, completed = 0, failed = 0, tokens_served = 0;
  Stats ttft_s, itl_s, e2e_s;
  std::vector<CohortInference> inference_by_cohort;
  double slo_hours_met_fraction = 0;
  int hours_with_load = 0;
  int64_t preemptions = 0, resumed_streams = 0;
  int replicas_max = 0;
  double inference_gpu_hours = 0;
  // GPUs.
  double allocated_fraction = 0, inference_fraction = 0, training_fraction = 0;
  // Allocated and computing: training jobs all the time they hold GPUs (the simulator cannot
  // see inside them), replicas while their engine runs a step.
  double busy_fraction = 0;
  std::vector<HourPoint> timeline;
  std::vector<std::pair<double, double>> ttft_cdf, wait_cdf;
  CostReport cost;
  SimInfo sim;
};

PlanReport BuildPlanReport(const Scenario& scenario, const PlanRun& run);

// One line per sweep value, for the report's sweep section.
struct SweepPoint {
  double value = 0;
  bool met = false;
  double slo_hours_met_fraction = 0;
  double job_wait_p95_s = 0;
  double ttft_p99_s = 0;
  std::optional<double> per_user_month;
};

struct Sweep {
  std::string key;  // "gpus" or "users"
  std::vector<SweepPoint> points;
  std::optional<double> smallest_meeting;
};

std::string PlanJson(const Scenario& scenario, const PlanReport& report, const Sweep* sweep);
std::string PlanText(const PlanReport& report, const Sweep* sweep);

}  // namespace bmas::plan
