#include "autoscale/autoscaler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

namespace bmas::autoscale {
namespace {

struct Counts {
  int pending = 0;
  int starting = 0;
  int ready = 0;
  int in_flight = 0;  // on replicas that are not draining
  int Current() const { return pending + starting + ready; }
};

Counts CountReplicas(const std::vector<ReplicaSnapshot>& replicas) {
  Counts c;
  for (const ReplicaSnapshot& r : replicas) {
    switch (r.state) {
      case ReplicaState::kPending: ++c.pending; break;
      case ReplicaState::kStarting: ++c.starting; break;
      case ReplicaState::kReady: ++c.ready; break;
      case ReplicaState::kDraining: continue;
      // Capacity the controller may wake; not counted.
      case ReplicaState::kSleeping:
        continue;
    }
    c.in_flight += r.in_flight;
  }
  return c;
}

std::string Replicas(int n) { return fmt::format("{} replica{}", n, n == 1 ? "" : "s"); }

// Replicas needed for `load` requests to sit at the target utilisation.
int ReplicasFor(const AutoscaleSettings& s, double load) {
  return static_cast<int>(
      std::ceil(load / (s.max_in_flight_per_replica * s.target_utilization) - 1e-9));
}

// The replica still coming (pending or starting) within its start-up allowance that came last;
// nullptr when none is.
const ReplicaSnapshot* ComingWithinAllowance(const AutoscaleSettings& s,
                                             const std::vector<ReplicaSnapshot>& replicas,
                                             TimePoint now) {
  const ReplicaSnapshot* latest = nullptr;
  for (const ReplicaSnapshot& r : replicas) {
    if (r.state != ReplicaState::kPending && r.state != ReplicaState::kStarting) continue;
    if (now - r.since >= s.startup_allowance) continue;
    if (latest == nullptr || r.since > latest->since) latest = &r;
  }
  return latest;
}

// The ready replica that became ready last, when that was less than breach_settle ago.
const ReplicaSnapshot* ReadyNotSettled(const AutoscaleSettings& s,
                                       const std::vector<ReplicaSnapshot>& replicas,
                                       TimePoint now) {
  const ReplicaSnapshot* latest = nullptr;
  for (const ReplicaSnapshot& r : replicas) {
    if (r.state != ReplicaState::kReady || now - r.since >= s.breach_settle) continue;
    if (latest == nullptr || r.since > latest->since) latest = &r;
  }
  return latest;
}

void Smooth(const AutoscaleSettings& s, double load, TimePoint now, AutoscaleMemory& m) {
  if (!m.started) {
    m.started = true;
    m.smoothed_load = load;
    m.burst_load = load;
    m.last_load_seen = now;
    m.last_busy = now;
  } else {
    const double dt = std::max(0.0, (now - m.last_update).count());
    auto alpha = [dt](Duration window) {
      return window.count() > 0 ? 1.0 - std::exp(-dt / window.count()) : 1.0;
    };
    m.smoothed_load += alpha(s.load_window) * (load - m.smoothed_load);
    m.burst_load += alpha(s.burst_window) * (load - m.burst_load);
  }
  m.last_update = now;
  if (load > 0) m.last_load_seen = now;
}

}  // namespace

std::vector<std::string> ChooseDrain(const std::vector<ReplicaSnapshot>& replicas, int count) {
  std::vector<const ReplicaSnapshot*> candidates;
  for (const ReplicaSnapshot& r : replicas) {
    if (r.state != ReplicaState::kDraining && r.state != ReplicaState::kSleeping) {
      candidates.push_back(&r);
    }
  }
  // Pending < starting < ready; fewer in flight first; the youngest first; then by id, so that
  // the choice never depends on the order the caller listed them in.
  auto key = [](const ReplicaSnapshot* r) {
    return std::tuple<int, int, double, const std::string&>(
        static_cast<int>(r->state), r->in_flight, -r->since.count(), r->id);
  };
  std::sort(candidates.begin(), candidates.end(),
            [&](const ReplicaSnapshot* a, const ReplicaSnapshot* b) { return key(a) < key(b); });
  std::vector<std::string> out;
  for (int i = 0; i < count && i < static_cast<int>(candidates.size()); ++i) {
    out.push_back(candidates[i]->id);
  }
  return out;
}

AutoscaleDecision DecideReplicas(const AutoscaleSettings& s, const ModelSnapshot& model,
                                 TimePoint now, AutoscaleMemory& memory) {
  assert(s.min_replicas >= 0 && s.min_replicas <= s.max_replicas);
  assert(s.max_in_flight_per_replica > 0);
  const Counts c = CountReplicas(model.replicas);
  const int current = c.Current();
  const double load = c.in_flight + model.queued;
  Smooth(s, load, now, memory);
  const double smoothed = memory.smoothed_load;
  const double per_replica = s.max_in_flight_per_replica;

  const bool slo_breach =
      s.ttft_slo_ms > 0 && model.ttft_p95_ms.has_value() && *model.ttft_p95_ms > s.ttft_slo_ms;
  const bool queue_breach = model.queued > 0 && model.oldest_queued_wait >= s.queue_wait_breach;

  // Low load: it would fit in one replica fewer at the scale-down utilisation. Going to zero
  // needs nothing at all in flight or queued.
  const double fewer_admit = (current - 1) * per_replica * s.scale_down_utilization;
  const bool low = current > 0 && model.queued == 0 && !slo_breach &&
                   (current == 1 ? load == 0 : load <= fewer_admit && smoothed <= fewer_admit);
  if (!low) memory.last_busy = now;

  auto decide = [&](int target, std::string reason) {
    AutoscaleDecision d;
    d.target_replicas = target;
    d.reason = std::move(reason);
    if (target > current) memory.last_scale_up = now;
    if (target < current) {
      memory.last_scale_down = now;
      d.drain = ChooseDrain(model.replicas, current - target);
    }
    return d;
  };

  // 1. Floor and ceiling.
  if (current > s.max_replicas) {
    return decide(s.max_replicas, fmt::format("{}, over the ceiling of {}", Replicas(current),
                                              s.max_replicas));
  }
  if (current < s.min_replicas) {
    return decide(s.min_replicas, fmt::format("{}, under the floor of {}", Replicas(current),
                                              s.min_replicas));
  }

  // 2. Scale from zero.
  if (current == 0 && model.queued > 0) {
    if (s.max_replicas == 0) {
      return decide(0, fmt::format("{} request(s) queued, but max_replicas is 0", model.queued));
    }
    return decide(1, fmt::format("scale from zero: {} request(s) queued and no replica",
                                 model.queued));
  }

  // 3. Scale up on the smoothed load.
  const double utilization = current > 0 ? smoothed / (current * per_replica) : 0;
  const std::string load_words =
      fmt::format("{:.1f} requests in flight or queued on average over {:.0f} s, {:.0f}% of what "
                  "{} admit ({} each)",
                  smoothed, s.load_window.count(), utilization * 100, Replicas(current),
                  s.max_in_flight_per_replica);
  if (current > 0 && utilization > s.scale_up_utilization) {
    const int want = std::min(s.max_replicas, ReplicasFor(s, smoothed));
    if (want > current) {
      return decide(want, fmt::format("{}: {} for {:.0f}%", load_words, Replicas(want),
                                      s.target_utilization * 100));
    }
  }
  const double burst = memory.burst_load;
  const double burst_utilization = current > 0 ? burst / (current * per_replica) : 0;
  if (current > 0 && burst_utilization > s.burst_utilization) {
    // A queue that already waits too long (rule 4) is sized for at once, not averaged.
    const int want = std::min(s.max_replicas, std::max(ReplicasFor(s, burst),
                                                       queue_breach ? ReplicasFor(s, load) : 0));
    if (want > current) {
      return decide(want, fmt::format("a surge: {:.1f} requests in flight or queued on average "
                                      "over {:.0f} s, {:.0f}% of what {} admit{}: {} for {:.0f}%",
                                      burst, s.burst_window.count(), burst_utilization * 100,
                                      Replicas(current),
                                      queue_breach ? fmt::format(
                                                         ", {} request(s) queued, the oldest for "
                                                         "{:.1f} s",
                                                         model.queued,
                                                         model.oldest_queued_wait.count())
                                                   : "",
                                      Replicas(want), s.target_utilization * 100));
    }
  }

  // 4. Scale up on a breach, unless capacity is still coming or has not shown yet.
  if (slo_breach || queue_breach) {
    const std::string breach =
        slo_breach ? fmt::format("TTFT p95 {:.0f} ms over the {:.0f} ms SLO", *model.ttft_p95_ms,
                                 s.ttft_slo_ms)
                   : fmt::format("{} request(s) queued, the oldest for {:.1f} s", model.queued,
                                 model.oldest_queued_wait.count());
    if (current >= s.max_replicas) {
      return decide(current, fmt::format("{}, but already at the ceiling of {}", breach,
                                         s.max_replicas));
    }
    if (const ReplicaSnapshot* coming = ComingWithinAllowance(s, model.replicas, now)) {
      return decide(current, fmt::format("{}, but replica {} is still {} ({:.0f} s of its "
                                         "{:.0f} s start-up allowance)",
                                         breach, coming->id, ReplicaStateName(coming->state),
                                         (now - coming->since).count(),
                                         s.startup_allowance.count()));
    }
    if (const ReplicaSnapshot* fresh = ReadyNotSettled(s, model.replicas, now)) {
      return decide(current, fmt::format("{}, but replica {} has been ready only {:.0f} s of "
                                         "the {:.0f} s its effect takes to show",
                                         breach, fresh->id, (now - fresh->since).count(),
                                         s.breach_settle.count()));
    }
    int want = current + 1;
    if (queue_breach) want = std::max(want, ReplicasFor(s, load));
    want = std::min(want, s.max_replicas);
    return decide(want, fmt::format("{}: {}", breach, Replicas(want)));
  }

  // 5. Scale down, one at a time, after the load stayed low long enough.
  if (current > s.min_replicas && low) {
    const Duration low_for = now - memory.last_busy;
    if (low_for < s.scale_down_idle) {
      return decide(current, fmt::format("load low for {:.0f} s; one replica goes after {:.0f} s",
                                         low_for.count(), s.scale_down_idle.count()));
    }
    if (memory.last_scale_down && now - *memory.last_scale_down < s.scale_down_step) {
      return decide(current, fmt::format("load low for {:.0f} s; the next replica goes {:.0f} s "
                                         "after the last",
                                         low_for.count(), s.scale_down_step.count()));
    }
    return decide(current - 1,
                  current == 1
                      ? fmt::format("nothing in flight or queued for {:.0f} s: scale to zero",
                                    low_for.count())
                      : fmt::format("load low for {:.0f} s ({}): one replica fewer",
                                    low_for.count(), load_words));
  }

  if (current == 0) return decide(0, "no replica and no request");
  return decide(current, fmt::format("steady: {}", load_words));
}

}  // namespace bmas::autoscale
