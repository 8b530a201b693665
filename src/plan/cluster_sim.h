#pragma once

// The whole cluster in virtual time, for `bmas plan --scenario`: the cohorts' (or a trace's)
// training jobs through the model of Slurm, and their chat sessions through the gateway's
// admission and autoscaled replicas on the GPUs training leaves. Pure and deterministic for a
// scenario (its seed included).
//
// Why training first, then inference: replicas run below training's priority tier, are
// preempted at once (GraceTime 0) and never hold a GPU a training job wants, so training's
// schedule does not depend on them. The floor's replicas (never preempted) are placed first,
// on the floor partition's last nodes, and training sees those GPUs as taken. Replicas then
// get what training leaves, node by node, over time.
// Research windows (policies.research) are Slurm reservations: their nodes take only the
// named users' jobs, and no replica, while they last.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/timing.h"
#include "plan/inference_sim.h"
#include "plan/scenario.h"
#include "plan/slurm_model.h"

namespace bmas::plan {

struct PlanSettings {
  SlurmModelSettings slurm;
  InferenceSettings inference;  // horizon_s is set from the scenario's days
};

struct PlanRun {
  std::vector<SimJob> jobs;
  std::vector<int> job_cohort;  // per job: its cohort's index, or -1 (from a trace)
  SlurmModelResult slurm;
  InferenceResult inference;
  std::vector<double> training_gpu_seconds_by_hour;
  int total_gpus = 0;
  int floor_gpus = 0;
  double horizon_s = 0;
  double wall_s = 0;  // left to the caller, who has a clock: RunPlan reads none
  int64_t events = 0;
  std::string error;  // why the plan could not run (the floor does not fit)
};

// Runs `scenario` (its cluster attached). `trace_jobs`, when not null, replaces the cohorts'
// training models.
PlanRun RunPlan(const Scenario& scenario, const engine::Profile& profile,
                const std::vector<SimJob>* trace_jobs, const PlanSettings& settings);

// The trace's jobs as the model takes them, ids from 1; jobs submitted before `start_s` left
// out and the rest shifted to start at 0.
std::vector<SimJob> TraceJobs(const Trace& trace, double start_s = 0);

}  // namespace bmas::plan
