#include "autoscale/controller.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "autoscale/replica_job.h"

namespace bmas::autoscale {
namespace {

// One replica job as this pass sees it.
struct Seen {
  const JobInfo* job;
  ReplicaName name;
  ReplicaState state;
  bool floor;
  bool retiring;  // near its time limit: the policy counts it as leaving
  std::string url;
  TimePoint since;
  int in_flight;
  bool moving = false;  // on a node Slurm drains: replaced, then drained
};

}  // namespace

std::string ReplicaJobName(const std::string& model, int port) {
  return fmt::format("{}{}:{}", kReplicaJobPrefix, port, model);
}

std::optional<ReplicaName> ParseReplicaJobName(std::string_view name) {
  if (name.substr(0, kReplicaJobPrefix.size()) != kReplicaJobPrefix) return std::nullopt;
  name.remove_prefix(kReplicaJobPrefix.size());
  const size_t colon = name.find(':');
  if (colon == std::string_view::npos || colon + 1 >= name.size()) return std::nullopt;
  ReplicaName r;
  auto [end, ec] = std::from_chars(name.data(), name.data() + colon, r.port);
  if (ec != std::errc() || end != name.data() + colon || r.port <= 0 || r.port > 65535) {
    return std::nullopt;
  }
  r.model = std::string(name.substr(colon + 1));
  return r;
}

bool IsActiveJobState(JobState state) {
  // Waiting or holding, but not winding down: a COMPLETING or STOPPED replica frees its port.
  if (state == JobState::kCompleting || state == JobState::kStopped) return false;
  return IsPending(state) || HoldsGpus(state) || state == JobState::kResizing ||
         state == JobState::kSignaling || state == JobState::kStageOut;
}

bool UsesSleepMode(const Deployment& d) {
  return d.command.empty() || d.command.starts_with("{bmas} engine ");
}

std::optional<std::string> GpuDemandWaiting(const std::vector<JobInfo>& jobs,
                                            const std::vector<NodeInfo>& nodes,
                                            const std::string& partition) {
  // The partitions that share a node with the replicas' one.
  std::set<std::string, std::less<>> sharing = {partition};
  for (const NodeInfo& n : nodes) {
    if (std::find(n.partitions.begin(), n.partitions.end(), partition) == n.partitions.end()) {
      continue;
    }
    sharing.insert(n.partitions.begin(), n.partitions.end());
  }
  static const std::set<std::string, std::less<>> kNotWaiting = {
      "Dependency", "DependencyNeverSatisfied", "BeginTime", "JobHeldUser", "JobHeldAdmin"};
  for (const JobInfo& j : jobs) {
    if (!IsPending(j.state) || ParseReplicaJobName(j.name) || kNotWaiting.contains(j.reason) ||
        (j.gpus <= 0 && j.shards <= 0)) {
      continue;
    }
    // A job may name several partitions ("training,inference").
    std::string_view list = j.partition;
    while (!list.empty()) {
      const size_t comma = std::min(list.find(','), list.size());
      if (sharing.contains(list.substr(0, comma))) {
        return fmt::format("job {} of {} in {} waits for GPUs ({})", j.id, j.user, j.partition,
                           j.reason);
      }
      list.remove_prefix(std::min(comma + 1, list.size()));
    }
  }
  return std::nullopt;
}

void ForgetSleep(ControllerMemory& memory, int64_t job) {
  memory.sleeping.erase(job);
  memory.sleep_after_drain.erase(job);
}

ControllerPlan PlanPass(const ControllerSettings& settings, const ControllerInput& input,
                        TimePoint now, ControllerMemory& memory) {
  ControllerPlan plan;
  for (const JobInfo& job : input.jobs) {
    auto name = ParseReplicaJobName(job.name);
    if (!name || !IsFailure(job.state) || !memory.failed_seen.insert(job.id).second) continue;
    const int n = ++memory.failures[name->model];
    const double backoff = std::min(300.0, 5.0 * static_cast<double>(1 << std::min(n - 1, 10)));
    memory.retry_at[name->model] = now + Duration(backoff);
    plan.log.push_back(fmt::format("{}: replica job {} ended {} ({}); next replica in {:.0f} s "
                                   "(see its log replica-{}.log)",
                                   name->model, job.id, job.state, job.reason, backoff, job.id));
  }
  std::set<int> ports_in_use;
  std::map<std::string, std::vector<Seen>> by_model;
  std::set<int64_t> live;
  for (const JobInfo& job : input.jobs) {
    auto name = ParseReplicaJobName(job.name);
    if (!name || !IsActiveJobState(job.state)) continue;
    ports_in_use.insert(name->port);
    live.insert(job.id);
    Seen s{&job, *name, ReplicaState::kPending, job.partition == settings.floor_partition,
           false, "", TimePoint(static_cast<double>(job.submit_time)), 0};
    if (job.state == JobState::kRunning && !job.nodes.empty()) {
      auto addr = input.node_addr.find(job.nodes[0]);
      const std::string host = addr != input.node_addr.end() && !addr->second.empty()
                                   ? addr->second
                                   : job.nodes[0];
      s.url = fmt::format("{}://{}:{}", settings.replica_scheme, host, name->port);
      auto b = input.backends.find(s.url);
      const bool healthy = b != input.backends.end() && b->second.healthy;
      if (b != input.backends.end()) s.in_flight = b->second.in_flight;
      auto slept = memory.sleeping.find(job.id);
      if (slept != memory.sleeping.end() && slept->second.start_time != job.start_time) {
        memory.sleeping.erase(slept);  // requeued and started over: awake
        slept = memory.sleeping.end();
      }
      if (slept != memory.sleeping.end()) {
        s.state = ReplicaState::kSleeping;
        s.since = slept->second.since;
      } else if (healthy) {
        memory.failures.erase(name->model);
        auto [it, fresh] = memory.ready_since.emplace(job.id, now);
        if (auto w = memory.woken.find(job.id); fresh && w != memory.woken.end()) {
          plan.log.push_back(fmt::format("{}: replica job {} serves {:.1f} s after it was woken",
                                         name->model, job.id, (now - w->second).count()));
        } else if (fresh) {
          plan.log.push_back(
              fmt::format("{}: replica job {} serves {:.1f} s after it was "
                          "submitted (a cold start)",
                          name->model, job.id,
                          (now - TimePoint(static_cast<double>(job.submit_time))).count()));
        }
        memory.woken.erase(job.id);
        s.state = ReplicaState::kReady;
        s.since = it->second;
      } else {
        s.state = ReplicaState::kStarting;
        auto w = memory.woken.find(job.id);
        s.since =
            w != memory.woken.end() ? w->second : TimePoint(static_cast<double>(job.start_time));
        memory.ready_since.erase(job.id);  // a replica that went down starts over
      }
      if (job.time_limit_minutes > 0 && job.start_time > 0) {
        const double ends = static_cast<double>(job.start_time) + 60.0 * job.time_limit_minutes;
        s.retiring = TimePoint(ends) - now < settings.replace_margin;
      }
      s.moving = input.drained_nodes.contains(job.nodes[0]);
    } else {
      memory.ready_since.erase(job.id);
      memory.sleeping.erase(job.id);  // requeued (preempted): it starts over awake
      memory.woken.erase(job.id);
    }
    if (auto d = memory.draining.find(job.id); d != memory.draining.end()) {
      s.state = ReplicaState::kDraining;
      s.since = d->second;
    }
    by_model[name->model].push_back(std::move(s));
  }
  // Forget jobs that ended.
  std::erase_if(memory.draining, [&](const auto& e) { return !live.contains(e.first); });
  std::erase_if(memory.ready_since, [&](const auto& e) { return !live.contains(e.first); });
  std::erase_if(memory.sleeping, [&](const auto& e) { return !live.contains(e.first); });
  std::erase_if(memory.woken, [&](const auto& e) { return !live.contains(e.first); });
  std::erase_if(memory.sleep_after_drain,
                [&](int64_t job) { return !memory.draining.contains(job); });

  auto next_port = [&]() -> std::optional<int> {
    for (int p = settings.port_base; p < settings.port_base + settings.port_count; ++p) {
      if (!ports_in_use.contains(p)) {
        ports_in_use.insert(p);
        return p;
      }
    }
    return std::nullopt;
  };

  std::set<std::string> deployed;
  for (const Deployment& d : input.deployments) {
    deployed.insert(d.model);
    std::vector<Seen>& seen = by_model[d.model];
    // The floor now: min_replicas, raised by a timetable floor that is (or is about to be) in
    // force.
    const int min_now = EffectiveMinReplicas(d, settings.timezone, now, settings.timetable_lead);
    if (auto [last, fresh] = memory.last_min.try_emplace(d.model, d.min_replicas);
        last->second != min_now) {
      plan.log.push_back(
          min_now > d.min_replicas
              ? fmt::format("{}: timetable floor of {} replica(s) in force (from {:.0f} s before "
                            "its start, time zone {})",
                            d.model, min_now, settings.timetable_lead.count(),
                            settings.timezone.name())
              : fmt::format("{}: timetable floor ended; the floor is min {} again", d.model,
                            d.min_replicas));
      last->second = min_now;
    }
    AutoscaleSettings a;
    a.min_replicas = min_now;
    a.max_replicas = d.max_replicas;
    a.ttft_slo_ms = d.ttft_slo_ms;
    a.max_in_flight_per_replica = settings.max_in_flight_per_replica;
    a.scale_down_idle = settings.scale_down_idle;
    a.scale_down_step = std::min(settings.scale_down_step, settings.scale_down_idle);
    a.load_window = settings.load_window;
    a.breach_settle = settings.breach_settle;
    ModelSnapshot snap;
    for (const Seen& s : seen) {
      ReplicaSnapshot r{std::to_string(s.job->id), s.state, s.since, s.in_flight};
      if ((s.retiring || s.moving) && r.state != ReplicaState::kDraining) {
        r.state = ReplicaState::kDraining;
      }
      if (auto b = input.backends.find(s.url); b != input.backends.end() && b->second.capacity > 0) {
        a.max_in_flight_per_replica = b->second.capacity;
      }
      snap.replicas.push_back(std::move(r));
    }
    auto q = input.queued.find(d.model);
    snap.queued = q != input.queued.end() ? q->second : 0;
    if (auto w = input.oldest_wait_s.find(d.model); w != input.oldest_wait_s.end()) {
      snap.oldest_queued_wait = Duration(w->second);
    }
    snap.ttft_p95_ms = input.ttft_p95_ms;
    AutoscaleDecision decision = DecideReplicas(a, snap, now, memory.models[d.model]);
    if (!input.gateway_reachable) {
      // Without the gateway's view, hold what runs (and the floor): no load-based change.
      int counted = 0;
      for (const ReplicaSnapshot& r : snap.replicas) {
        counted += r.state != ReplicaState::kDraining && r.state != ReplicaState::kSleeping;
      }
      decision.target_replicas = std::max(counted, min_now);
      decision.drain.clear();
      decision.reason = "the gateway's /load cannot be read; keeping the replicas as they are";
    }
    auto last = memory.last_target.find(d.model);
    if (last == memory.last_target.end() || last->second != decision.target_replicas) {
      plan.log.push_back(fmt::format("{}: {} replica(s): {}", d.model, decision.target_replicas,
                                     decision.reason));
      memory.last_target[d.model] = decision.target_replicas;
    }
    // Drain: never the floor while others can go. Sleeping replicas count for nothing here.
    auto leaving = [](const Seen& s) {
      return s.state == ReplicaState::kDraining || s.state == ReplicaState::kSleeping ||
             s.retiring || s.moving;
    };
    int counted = 0, floor_counted = 0;
    for (const Seen& s : seen) {
      if (leaving(s)) continue;
      ++counted;
      floor_counted += s.floor;
    }
    int over = counted - decision.target_replicas;
    if (over > 0) {
      std::vector<ReplicaSnapshot> others, floors;
      for (size_t i = 0; i < seen.size(); ++i) {
        const Seen& s = seen[i];
        if (leaving(s)) continue;
        (s.floor ? floors : others).push_back(snap.replicas[i]);
      }
      std::vector<std::string> chosen = ChooseDrain(others, std::min<int>(over, others.size()));
      if (static_cast<int>(chosen.size()) < over) {
        // Only as many floor replicas as are above the floor.
        const int floor_over = std::min<int>(over - static_cast<int>(chosen.size()),
                                             std::max(0, floor_counted - min_now));
        for (const std::string& id : ChooseDrain(floors, floor_over)) chosen.push_back(id);
      }
      for (const std::string& id : chosen) {
        const int64_t job = std::stoll(id);
        for (Seen& s : seen) {
          if (s.job->id != job) continue;
          if (s.state == ReplicaState::kPending) {
            plan.cancels.push_back(job);  // nothing to drain
            plan.log.push_back(fmt::format("{}: cancelling pending replica job {}", d.model, job));
          } else {
            memory.draining.emplace(job, now);
            // Kept asleep rather than cancelled when nothing else wants its GPU.
            const bool to_sleep = s.state == ReplicaState::kReady && !s.floor && UsesSleepMode(d) &&
                                  !input.gpus_wanted;
            if (to_sleep) memory.sleep_after_drain.insert(job);
            s.state = ReplicaState::kDraining;
            s.since = now;
            plan.log.push_back(fmt::format("{}: draining replica job {} ({}){}", d.model, job,
                                           s.url, to_sleep ? " to put it to sleep" : ""));
          }
        }
      }
    }
    // Floor-partition replicas above the floor (a timetable window ended while load held
    // them) are out of training's reach: while a GPU job waits, they drain one at a time (the
    // next once the last is gone, if a job still waits), and what the load still needs is
    // submitted again in the preemptible partition.
    const bool floor_draining = std::any_of(seen.begin(), seen.end(), [](const Seen& s) {
      return s.floor && s.state == ReplicaState::kDraining;
    });
    if (input.gpus_wanted && floor_counted > min_now && !floor_draining) {
      std::vector<ReplicaSnapshot> floors;
      for (size_t i = 0; i < seen.size(); ++i) {
        if (seen[i].floor && !leaving(seen[i]) && seen[i].state != ReplicaState::kPending) {
          floors.push_back(snap.replicas[i]);
        }
      }
      for (const std::string& id : ChooseDrain(floors, 1)) {
        for (Seen& s : seen) {
          if (std::to_string(s.job->id) != id) continue;
          memory.draining.emplace(s.job->id, now);
          s.state = ReplicaState::kDraining;
          s.since = now;
          --counted;
          --floor_counted;
          plan.log.push_back(fmt::format("{}: draining floor replica job {} ({}), above the floor "
                                         "of {}: {}",
                                         d.model, s.job->id, s.url, min_now, *input.gpus_wanted));
        }
      }
    }
    // Submit: the floor first; above it, wake sleeping replicas before submitting any; no
    // submission while failures back off.
    std::vector<Seen*> sleepers;
    for (Seen& s : seen) {
      if (s.state == ReplicaState::kSleeping && !s.moving) sleepers.push_back(&s);
    }
    auto retry = memory.retry_at.find(d.model);
    const bool backing_off = retry != memory.retry_at.end() && now < retry->second;
    for (int i = counted; i < decision.target_replicas; ++i) {
      if (floor_counted >= min_now && !sleepers.empty()) {
        Seen& s = *sleepers.back();
        sleepers.pop_back();
        plan.wakes.push_back({s.job->id, d.model, s.url, s.name.port});
        plan.log.push_back(fmt::format("{}: waking replica job {} ({}), asleep for {:.0f} s",
                                       d.model, s.job->id, s.url, (now - s.since).count()));
        memory.sleeping.erase(s.job->id);
        memory.woken[s.job->id] = now;
        s.state = ReplicaState::kStarting;
        s.since = now;
        continue;
      }
      if (backing_off) break;
      auto port = next_port();
      if (!port) {
        plan.log.push_back(fmt::format("{}: no free replica port in {}-{}", d.model,
                                       settings.port_base,
                                       settings.port_base + settings.port_count - 1));
        break;
      }
      const bool floor = floor_counted < min_now;
      floor_counted += floor;
      plan.submits.push_back({d.model, *port, floor});
    }
    // Replicas on a drained node keep serving until no replacement is still on its way (none
    // submitted or woken in this pass, none pending or starting), then drain and are cancelled.
    bool replacing = std::any_of(plan.submits.begin(), plan.submits.end(),
                                 [&](const ReplicaSubmit& r) { return r.model == d.model; });
    for (const Seen& s : seen) {
      replacing = replacing || (!leaving(s) && (s.state == ReplicaState::kPending ||
                                                s.state == ReplicaState::kStarting));
    }
    for (Seen& s : seen) {
      if (replacing || !s.moving || s.state == ReplicaState::kDraining ||
          s.state == ReplicaState::kSleeping) {
        continue;
      }
      memory.draining.emplace(s.job->id, now);
      memory.sleep_after_drain.erase(s.job->id);
      s.state = ReplicaState::kDraining;
      s.since = now;
      plan.log.push_back(fmt::format("{}: draining replica job {} ({}): its node {} is drained in "
                                     "Slurm, and its replacement serves",
                                     d.model, s.job->id, s.url, s.job->nodes[0]));
    }
  }
  // Draining replicas with nothing left in flight (or past the timeout), and every replica of
  // a deployment that was removed, are cancelled.
  for (auto& [model, seen] : by_model) {
    const bool gone = !deployed.contains(model);
    for (Seen& s : seen) {
      if (gone) {
        plan.cancels.push_back(s.job->id);
        continue;
      }
      if (s.state == ReplicaState::kSleeping && (input.gpus_wanted || s.moving)) {
        plan.cancels.push_back(s.job->id);
        plan.log.push_back(fmt::format(
            "{}: cancelling sleeping replica job {}: {}", model, s.job->id,
            s.moving ? fmt::format("its node {} is drained in Slurm", s.job->nodes[0])
                     : *input.gpus_wanted));
        continue;
      }
      if (s.state != ReplicaState::kDraining) continue;
      auto b = input.backends.find(s.url);
      // The gateway must have seen the drain (the replica is absent or draining there) and
      // finished what it sent.
      const bool quiet = input.every_gateway_reached &&
                         (b == input.backends.end() || (b->second.draining && b->second.in_flight == 0));
      if (quiet && memory.sleep_after_drain.contains(s.job->id) && !input.gpus_wanted) {
        // Nothing in flight: vLLM's sleep aborts no request.
        plan.sleeps.push_back({s.job->id, model, s.url, s.name.port});
        memory.draining.erase(s.job->id);
        memory.sleep_after_drain.erase(s.job->id);
        memory.sleeping[s.job->id] = {now, s.job->start_time};
        s.state = ReplicaState::kSleeping;
        s.since = now;
        plan.log.push_back(
            fmt::format("{}: putting replica job {} ({}) to sleep", model, s.job->id, s.url));
      } else if (quiet || now - s.since >= settings.drain_timeout) {
        plan.cancels.push_back(s.job->id);
      }
    }
    if (gone && !seen.empty()) {
      plan.log.push_back(fmt::format("{}: deployment removed; cancelling its {} replica(s)", model,
                                     seen.size()));
    }
  }
  for (auto& [model, seen] : by_model) {
    if (!deployed.contains(model)) continue;
    for (const Seen& s : seen) {
      ReplicaRecord r;
      r.job_id = s.job->id;
      r.model = model;
      r.state = s.state;
      r.node = s.job->nodes.empty() ? "" : s.job->nodes[0];
      r.port = s.name.port;
      r.url = s.url;
      r.gpus = s.job->gpus;
      r.floor = s.floor;
      r.since = static_cast<int64_t>(s.since.count());
      plan.replicas.push_back(std::move(r));
    }
  }
  return plan;
}

}  // namespace bmas::autoscale
