#include "plan/slurm_model.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/job_shape.h"

namespace bmas::plan {
namespace {

constexpr double kForever = std::numeric_limits<double>::infinity();

enum class State { kPending, kRunning, kDone, kFailed };

struct ModelJob {
  const SimJob* job = nullptr;
  JobShape shape;
  const Partition* partition = nullptr;
  std::vector<int> part_nodes;  // indices of its partition's nodes, inventory order
  State state = State::kPending;
  double eligible = 0;     // pending: may start from then (submission, requeue)
  double allocated = 0;    // running: GPUs held from then
  double planned_end = 0;  // running: allocated + launch + time limit (what backfill assumes)
  std::vector<int> nodes;  // running: where
  int generation = 0;      // bumped on each start, so a stale end event is ignored
  SimJobResult result;
};

struct NodeState {
  std::string name;
  int total = 0;
  int free = 0;
};

enum class EventKind { kSubmit, kEnd, kBackfill, kWake };

struct Event {
  double time;
  int64_t seq;
  EventKind kind;
  int job;
  int generation;
  bool operator>(const Event& o) const { return std::tie(time, seq) > std::tie(o.time, o.seq); }
};

// GPUs in use on one node over time, as backfill plans: step changes at times, kept sorted.
class Profile {
 public:
  void Add(double from, double to, int gpus) {
    Insert(from, gpus);
    Insert(to, -gpus);
  }
  // The most GPUs in use at any moment of [from, to).
  int PeakUse(double from, double to) const {
    int use = 0;
    size_t i = 0;
    for (; i < steps_.size() && steps_[i].first <= from; ++i) use += steps_[i].second;
    int peak = use;
    for (; i < steps_.size() && steps_[i].first < to; ++i) {
      use += steps_[i].second;
      peak = std::max(peak, use);
    }
    return peak;
  }
  // The times at which use drops: the candidate start times.
  void Ends(std::vector<double>& out) const {
    for (const auto& [t, d] : steps_) {
      if (d < 0) out.push_back(t);
    }
  }

 private:
  void Insert(double t, int delta) {
    const auto at = std::upper_bound(steps_.begin(), steps_.end(), std::make_pair(t, delta));
    steps_.insert(at, {t, delta});
  }

  std::vector<std::pair<double, int>> steps_;
};

class Model {
 public:
  Model(const Cluster& cluster, const std::vector<SimJob>& jobs, const SlurmModelSettings& s)
      : cluster_(cluster), settings_(s) {
    for (const Node& n : cluster.nodes) {
      node_index_[n.name] = static_cast<int>(nodes_.size());
      auto held = s.held_gpus.find(n.name);
      const int gpus = std::max(0, n.gpus.count - (held == s.held_gpus.end() ? 0 : held->second));
      nodes_.push_back(NodeState{n.name, gpus, gpus});
    }
    reserved_.resize(nodes_.size());
    for (const SimReservation& r : settings_.reservations) {
      for (const std::string& name : r.nodes) {
        if (auto it = node_index_.find(name); it != node_index_.end()) reserved_[it->second].push_back(&r);
      }
      Push(r.end, EventKind::kWake, -1);  // its nodes open to everyone: a scheduling pass
    }
    jobs_.resize(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      ModelJob& j = jobs_[i];
      j.job = &jobs[i];
      j.result.id = jobs[i].id;
      j.eligible = jobs[i].submit.count();
      Push(j.eligible, EventKind::kSubmit, static_cast<int>(i));
    }
  }

  SlurmModelResult Run() {
    while (!events_.empty()) {
      const double now = events_.top().time;
      bool backfill = false;
      bool changed = false;
      // Everything that happens at this instant, then one scheduling pass.
      while (!events_.empty() && events_.top().time == now) {
        Event e = events_.top();
        events_.pop();
        ++result_.events;
        switch (e.kind) {
          case EventKind::kSubmit:
            changed |= Submit(e.job);
            break;
          case EventKind::kEnd:
            changed |= End(e.job, e.generation, now);
            break;
          case EventKind::kBackfill:
            backfill_scheduled_ = false;
            backfill = true;
            break;
          case EventKind::kWake:  // a requeued job becomes eligible again
            changed = true;
            break;
        }
      }
      if (changed || backfill) MainPass(now);
      // Backfill at the next bf_interval tick after anything changed: a pass over the same
      // jobs and GPUs finds nothing new (time moving on only makes a job's window later), so
      // the ticks between changes are skipped rather than simulated.
      dirty_ |= changed;
      const double period = std::max(1e-3, settings_.backfill_interval.count());
      const bool on_tick = backfill || std::floor(now / period) * period == now;
      if (on_tick && dirty_) {
        Backfill(now);
        dirty_ = false;
      }
      if (dirty_ && !backfill_scheduled_ && AnyPending()) {
        backfill_scheduled_ = true;
        Push((std::floor(now / period) + 1) * period, EventKind::kBackfill, -1);
      }
    }
    for (ModelJob& j : jobs_) result_.jobs.push_back(j.result);
    return result_;
  }

 private:
  void Push(double t, EventKind kind, int job, int generation = 0) {
    events_.push(Event{t, seq_++, kind, job, generation});
  }

  bool Submit(int i) {
    ModelJob& j = jobs_[i];
    auto shape = PlanJobShape(cluster_, ShapeRequest{.gpus = j.job->gpus,
                                                     .partition = j.job->partition});
    if (!shape) {
      j.state = State::kFailed;
      j.result.error = shape.error().message;
      return false;
    }
    j.shape = *shape;
    for (const Partition& p : cluster_.partitions) {
      if (p.name == j.shape.partition) j.partition = &p;
    }
    for (const std::string& n : j.partition->nodes) {
      if (auto it = node_index_.find(n); it != node_index_.end()) j.part_nodes.push_back(it->second);
    }
    std::sort(j.part_nodes.begin(), j.part_nodes.end());
    return true;
  }

  bool End(int i, int generation, double now) {
    ModelJob& j = jobs_[i];
    if (j.state != State::kRunning || j.generation != generation) return false;
    Release(j, now);
    j.state = State::kDone;
    j.result.end = TimePoint{now};
    result_.makespan = std::max(result_.makespan, TimePoint{now});
    return true;
  }

  void Release(ModelJob& j, double now) {
    for (int n : j.nodes) nodes_[n].free += j.shape.gpus_per_node;
    result_.gpu_seconds_allocated +=
        (now - j.allocated) * j.shape.gpus_per_node * static_cast<double>(j.nodes.size());
    j.nodes.clear();
  }

  double Limit(const ModelJob& j) const {
    const double limit = j.job->time_limit.count();
    return limit > 0 ? limit : j.job->duration.count();
  }
  // How long it runs: its duration, or until Slurm ends it at its time limit.
  double RunLength(const ModelJob& j) const { return std::min(j.job->duration.count(), Limit(j)); }

  void Start(ModelJob& j, const std::vector<int>& nodes, double now) {
    j.state = State::kRunning;
    j.nodes = nodes;
    for (int n : nodes) nodes_[n].free -= j.shape.gpus_per_node;
    j.allocated = now;
    const double start = now + settings_.launch_delay.count();
    j.planned_end = start + Limit(j);
    ++j.generation;
    j.result.started = true;
    j.result.start = TimePoint{start};
    std::vector<std::string> names;
    for (int n : nodes) names.push_back(nodes_[n].name);
    j.result.nodes = fmt::format("{}", fmt::join(names, ","));
    Push(start + RunLength(j), EventKind::kEnd, static_cast<int>(&j - jobs_.data()),
         j.generation);
  }

  // Nodes where `j` fits now with `free` GPUs per node; empty when it does not.
  std::vector<int> Fit(const ModelJob& j, const std::vector<int>& free, double now) const {
    std::vector<int> chosen;
    const double until = now + settings_.launch_delay.count() + Limit(j);
    for (int n : j.part_nodes) {
      if (free[n] >= j.shape.gpus_per_node && !Reserved(j, n, now, until) &&
          (j.shape.nodes == 1 || free[n] == nodes_[n].total)) {
        chosen.push_back(n);
        if (static_cast<int>(chosen.size()) == j.shape.nodes) return chosen;
      }
    }
    return {};
  }

  std::vector<int> FreeNow() const {
    std::vector<int> free;
    for (const NodeState& n : nodes_) free.push_back(n.free);
    return free;
  }

  // Whether a reservation keeps node `n` from `j` at some moment of [from, to).
  bool Reserved(const ModelJob& j, int n, double from, double to) const {
    for (const SimReservation* r : reserved_[n]) {
      if (r->start >= to || r->end <= from) continue;
      if (std::find(r->users.begin(), r->users.end(), j.job->user) == r->users.end()) return true;
    }
    return false;
  }

  bool Preemptable(const ModelJob& victim, const ModelJob& by) const {
    return victim.state == State::kRunning && victim.partition->preempt_mode != PreemptMode::kOff &&
           victim.partition->priority_tier < by.partition->priority_tier;
  }

  // Frees GPUs for `j` by requeueing lower-tier jobs, the youngest first, when that is enough.
  bool Preempt(ModelJob& j, double now) {
    std::vector<ModelJob*> victims;
    for (ModelJob& v : jobs_) {
      if (Preemptable(v, j)) victims.push_back(&v);
    }
    if (victims.empty()) return false;
    std::sort(victims.begin(), victims.end(), [](const ModelJob* a, const ModelJob* b) {
      return std::tie(a->allocated, a->job->id) > std::tie(b->allocated, b->job->id);
    });
    // Take victims until the job would fit with their GPUs, then keep only those on the nodes
    // it is placed on.
    std::vector<int> free = FreeNow();
    std::vector<ModelJob*> taken;
    std::vector<int> place;
    for (ModelJob* v : victims) {
      for (int n : v->nodes) free[n] += v->shape.gpus_per_node;
      taken.push_back(v);
      place = Fit(j, free, now);
      if (!place.empty()) break;
    }
    if (place.empty()) return false;
    for (ModelJob* v : taken) {
      const bool on_place = std::any_of(v->nodes.begin(), v->nodes.end(), [&](int n) {
        return std::find(place.begin(), place.end(), n) != place.end();
      });
      if (!on_place) continue;
      Release(*v, now);
      v->state = State::kPending;
      v->eligible = now + settings_.requeue_delay.count();
      ++v->result.requeues;
      ++result_.events;
      if (settings_.requeue_delay.count() > 0) Push(v->eligible, EventKind::kWake, -1);
    }
    place = Fit(j, FreeNow(), now);
    if (place.empty()) return false;  // a victim elsewhere was needed after all; try later
    Start(j, place, now);
    return true;
  }

  std::vector<ModelJob*> PendingByPriority(double now) {
    std::vector<ModelJob*> pending;
    for (ModelJob& j : jobs_) {
      if (j.state == State::kPending && j.partition != nullptr && j.eligible <= now) {
        pending.push_back(&j);
      }
    }
    std::sort(pending.begin(), pending.end(), [](const ModelJob* a, const ModelJob* b) {
      return std::make_tuple(-a->partition->priority_tier, a->job->submit.count(), a->job->id) <
             std::make_tuple(-b->partition->priority_tier, b->job->submit.count(), b->job->id);
    });
    return pending;
  }

  bool AnyPending() const {
    return std::any_of(jobs_.begin(), jobs_.end(),
                       [](const ModelJob& j) { return j.state == State::kPending; });
  }

  void MainPass(double now) {
    std::vector<std::string> blocked;
    for (ModelJob* j : PendingByPriority(now)) {
      if (std::find(blocked.begin(), blocked.end(), j->partition->name) != blocked.end()) continue;
      std::vector<int> place = Fit(*j, FreeNow(), now);
      if (!place.empty()) {
        Start(*j, place, now);
      } else if (!Preempt(*j, now)) {
        blocked.push_back(j->partition->name);
      }
    }
  }

  // Reservations for the jobs that cannot start, in priority order; a job starts now only when
  // it fits around every reservation made before it.
  void Backfill(double now) {
    std::vector<Profile> use(nodes_.size());
    for (const ModelJob& r : jobs_) {
      if (r.state != State::kRunning) continue;
      for (int n : r.nodes) use[n].Add(r.allocated, std::max(r.planned_end, now + 1e-6), r.shape.gpus_per_node);
    }
    int tested = 0;
    std::vector<double> times;
    for (ModelJob* j : PendingByPriority(now)) {
      if (++tested > settings_.backfill_max_job_test) break;
      const double length = settings_.launch_delay.count() + Limit(*j);
      times.assign(1, now);
      for (int n : j->part_nodes) use[n].Ends(times);
      std::sort(times.begin(), times.end());
      times.erase(std::unique(times.begin(), times.end()), times.end());
      for (double t : times) {
        if (t < now) continue;
        if (t > now + settings_.backfill_window.count()) break;  // no reservation so far out
        std::vector<int> chosen;
        for (int n : j->part_nodes) {
          const int free = nodes_[n].total - use[n].PeakUse(t, t + length);
          if (free >= j->shape.gpus_per_node && !Reserved(*j, n, t, t + length) &&
              (j->shape.nodes == 1 || free == nodes_[n].total)) {
            chosen.push_back(n);
            if (static_cast<int>(chosen.size()) == j->shape.nodes) break;
          }
        }
        if (static_cast<int>(chosen.size()) < j->shape.nodes) continue;
        for (int n : chosen) use[n].Add(t, t + length, j->shape.gpus_per_node);
        if (t == now) Start(*j, chosen, now);
        break;
      }
    }
  }

  const Cluster& cluster_;
  SlurmModelSettings settings_;
  std::vector<NodeState> nodes_;
  std::map<std::string, int> node_index_;
  std::vector<ModelJob> jobs_;
  std::vector<std::vector<const SimReservation*>> reserved_;  // by node
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  int64_t seq_ = 0;
  bool backfill_scheduled_ = false;
  bool dirty_ = false;  // a submission, end or requeue since the last backfill pass
  SlurmModelResult result_;
};

}  // namespace

SlurmModelResult RunSlurmModel(const Cluster& cluster, const std::vector<SimJob>& jobs,
                               const SlurmModelSettings& settings) {
  return Model(cluster, jobs, settings).Run();
}

}  // namespace bmas::plan
