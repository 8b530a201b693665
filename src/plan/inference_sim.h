#pragma once

// The inference half of `bmas plan`: the cohorts' chat sessions sent through the gateway's own
// admission library (fair queues, the reserve, the router with its prefix-cache model) to
// replicas, each an EngineCore with the profile's step times, sized by the autoscaler's own
// policy every control period, in virtual time. Pure and deterministic.
//
// Replicas and GPUs. The floor (min_replicas) holds its GPUs from the start and is never
// preempted. The others run in the inference partition, below training's tier, and get only
// the GPUs training leaves: `slots` says how many replicas those GPUs hold over time (the
// caller derives it from the Slurm model's schedule, node by node). When training takes GPUs
// back, the youngest replicas above the floor are preempted at once (GraceTime 0) and
// requeued; their streams resume on another replica, as the gateway resumes them: the prompt
// plus the text so far, max_tokens reduced by what was sent. A replica job that starts holds
// its GPUs through `launch_delay` and the profile's start-up before it serves (/health).
// What it leaves out: the network and the gateway's own processing time (sub-millisecond on
// loopback, bench/RESULTS.md), tokenization (prompts are token ids), client timeouts other
// than the queue's deadline, and a TTFT p95 per model (one model here).

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "engine/timing.h"
#include "plan/scenario.h"
#include "plan/workload.h"

namespace bmas::plan {

// From `time` on, `replicas` replicas above the floor fit in the GPUs training leaves.
struct SlotChange {
  double time = 0;
  int replicas = 0;
};

struct InferenceSettings {
  double control_period_s = 2;  // the controller's loop
  double launch_delay_s = 1;    // Slurm's start of a replica job (prolog, launch)
  double horizon_s = 0;         // no session starts after it; the run ends when work does
  // No request at all is sent after it, not even a session's next (a benchmark's --duration).
  double stop_sending_s = std::numeric_limits<double>::infinity();
};

struct RequestRecord {
  int cohort = 0;
  double sent = 0;
  double ttft = -1;  // -1: no token (failed before its first)
  double e2e = -1;   // -1: failed
  double itl = -1;   // mean inter-token latency; -1 with fewer than two tokens
  int output_tokens = 0;
  bool failed = false;
  bool resumed = false;  // its stream was cut by a preemption and continued elsewhere
};

struct InferenceResult {
  std::vector<RequestRecord> requests;  // in the order they were sent
  std::vector<double> gpu_seconds_by_hour;  // GPUs held by replicas (all states but pending)
  double gpu_seconds = 0;
  double busy_gpu_seconds = 0;  // GPUs x seconds of engine steps (replicas computing)
  int64_t preemptions = 0;
  int64_t resumed_streams = 0;
  int64_t tokens_served = 0;
  int replicas_max = 0;
  int64_t events = 0;  // requests sent, engine steps, control ticks, replica changes
  std::string error;   // why nothing could be served (no room for the floor)
};

// The engine's scheduler settings for `profile`, as `bmas engine --profile` sets them with no
// overriding flags.
engine::SchedulerConfig SchedulerConfigOf(const engine::Profile& profile);

InferenceResult RunInference(const Scenario& scenario, const engine::Profile& profile,
                             const std::vector<SessionPlan>& sessions,
                             const std::vector<SlotChange>& slots,
                             const InferenceSettings& settings);

}  // namespace bmas::plan
