#pragma once

// The replica autoscaling policy: how many vLLM replicas one model's deployment should have.
//
// Pure, like idle/idle_policy: a snapshot of the deployment and the time go in, a decision
// comes out, and the caller keeps the policy's small memory (AutoscaleMemory) between calls. No
// clock is read and nothing is submitted here: the controller (live, every 2 s or less) or the
// simulator (in virtual time) calls DecideReplicas and carries out the decision.
//
// Replicas are counted by state. Pending (a Slurm job not running yet) and starting (running,
// /health not answering: vLLM loading weights) are capacity coming: they count towards the
// target, so a controller that calls this every 2 s never submits a second job for the load
// the first was submitted for. Draining replicas are already leaving and count for nothing;
// so do sleeping ones (the controller wakes them before it submits new ones).
//
// The rules, in the order they are applied:
//  1. Floor and ceiling: never fewer than min_replicas nor more than max_replicas.
//  2. Scale from zero: no replica at all and a request queued: one replica at once.
//  3. Scale up on load: the in-flight and queued requests, smoothed over `load_window` (as
//     GWDG's SAIA sizes its replicas from in-flight requests averaged over 60 s), above
//     `scale_up_utilization` of what the replicas admit: enough replicas for the smoothed load
//     to sit at `target_utilization`. A surge does not wait for that average: when the load
//     smoothed over the short `burst_window` exceeds `burst_utilization` of what the replicas
//     admit (requests are queueing), the replicas are sized from the short average instead (as
//     Knative's panic window does). Only scale-up listens to the short window.
//  4. Scale up on a breach: TTFT p95 over the SLO, or requests waiting in the gateway's queue
//     longer than `queue_wait_breach`: one replica more (more when the queue needs more). Not
//     while a replica is still coming within its `startup_allowance`, nor before the newest
//     ready replica has been up `breach_settle` (the p95 still holds requests from before it);
//     a breach that outlasts both gets another replica.
//  5. Scale down: only after the load has stayed low (it would fit in one replica fewer at
//     `scale_down_utilization`, no queue, no breach) for `scale_down_idle`, and one replica at a
//     time, at most one per `scale_down_step`. To zero only when min_replicas is 0 and nothing
//     at all was in flight or queued for `scale_down_idle`.
// The gap between scale_up_utilization and scale_down_utilization is the hysteresis: a load
// that moves around one threshold never crosses the other, so the count does not flap.
//
// Which replicas go (drain) when scaling down: pending first (cancelling a queued job costs
// nothing), then starting, then the ready one with the fewest requests in flight; among equals
// the youngest.

#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "core/replica_state.h"

namespace bmas::autoscale {

// One model's deployment settings.
struct AutoscaleSettings {
  int min_replicas = 0;
  int max_replicas = 1;
  // TTFT p95 above this is a breach; 0: no latency objective.
  double ttft_slo_ms = 0;
  // Requests each replica is given at once (the gateway's admission limit per backend).
  int max_in_flight_per_replica = 64;
  // Load-based sizing aims at this share of the admission limit...
  double target_utilization = 0.7;
  // ... and is triggered above this share; below `scale_down_utilization` the load is low.
  double scale_up_utilization = 0.8;
  double scale_down_utilization = 0.5;
  // The smoothing of the load (time constant of an exponential moving average).
  Duration load_window{60};
  // The surge rule's shorter smoothing, and the share of the admission limit it fires above.
  Duration burst_window{6};
  double burst_utilization = 1.0;
  // Requests waiting in the queue this long count as a breach.
  Duration queue_wait_breach{5};
  // How long a pending or starting replica is waited for before a breach may add another:
  // scheduling plus vLLM's start-up (tens of seconds; minutes for 70B models).
  Duration startup_allowance{180};
  // A replica that just became ready: how long the TTFT p95 is given to show it.
  Duration breach_settle{30};
  // Low load this long before the first replica goes; then at most one per `scale_down_step`.
  Duration scale_down_idle{300};
  Duration scale_down_step{60};
};

// One replica as the controller sees it now.
struct ReplicaSnapshot {
  std::string id;  // the caller's name for it (job id, backend URL): what `drain` returns
  ReplicaState state = ReplicaState::kPending;
  TimePoint since{0};  // when it entered `state`
  int in_flight = 0;   // requests it serves now
};

// One model at one time.
struct ModelSnapshot {
  std::vector<ReplicaSnapshot> replicas;
  int queued = 0;                      // requests waiting in the gateway for a replica
  Duration oldest_queued_wait{0};      // how long the oldest of them has waited
  std::optional<double> ttft_p95_ms;   // recent TTFT p95; nullopt: no recent request
};

// What the policy remembers between calls; the caller keeps one per model, starting from {}.
struct AutoscaleMemory {
  bool started = false;
  TimePoint last_update{0};
  double smoothed_load = 0;  // in-flight + queued requests, smoothed over load_window
  double burst_load = 0;     // the same, smoothed over burst_window
  TimePoint last_load_seen{0};  // last time anything was in flight or queued
  TimePoint last_busy{0};       // last time the load was not low (see rule 5)
  std::optional<TimePoint> last_scale_up;
  std::optional<TimePoint> last_scale_down;
};

struct AutoscaleDecision {
  // Replicas the deployment should have: pending + starting + ready, draining not counted.
  // Above that count now: submit the difference; below: drain `drain`.
  int target_replicas = 0;
  // Why, in plain words, for logs, `bmas` listings and the dashboard.
  std::string reason;
  // Ids of the replicas to drain, in the order they should go; as many as the count is over
  // the target.
  std::vector<std::string> drain;
};

// Decides the replica count of one model at `now` and updates `memory`. REQUIRES: `now` does
// not go back between calls with the same memory; 0 <= min_replicas <= max_replicas;
// max_in_flight_per_replica > 0; 0 < scale_down_utilization < scale_up_utilization.
AutoscaleDecision DecideReplicas(const AutoscaleSettings& settings, const ModelSnapshot& model,
                                 TimePoint now, AutoscaleMemory& memory);

// The replicas to drain to go down by `count`, in the order above (pending, starting, the
// least loaded ready; youngest first among equals). Draining and sleeping replicas are never
// chosen.
std::vector<std::string> ChooseDrain(const std::vector<ReplicaSnapshot>& replicas, int count);

}  // namespace bmas::autoscale
