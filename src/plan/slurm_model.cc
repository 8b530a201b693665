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
#include "core/mig_relayout.h"
#include "plan/gpu_pools.h"

namespace bmas::plan {
namespace {

constexpr double kForever = std::numeric_limits<double>::infinity();

enum class State { kPending, kRunning, kDone, kFailed };

struct ModelJob {
  const SimJob* job = nullptr;
  JobShape shape;
  const Partition* partition = nullptr;
  std::vector<int> part_nodes;  // the pools it may take GPUs from, inventory order
  std::string type;             // its pools' type: "" = whole GPUs, or a MIG profile
  State state = State::kPending;
  double eligible = 0;     // pending: may start from then (submission, requeue)
  double allocated = 0;    // running: GPUs held from then
  double planned_end = 0;  // running: allocated + launch + time limit (what backfill assumes)
  std::vector<int> nodes;  // running: where
  int generation = 0;      // bumped on each start, so a stale end event is ignored
  SimJobResult result;
};

// One pool of GPUs (plan/gpu_pools.h) as the scheduler sees it now.
struct NodeState {
  std::string name;  // its node's
  int total = 0;     // 0 while its node is a standby layout node
  int free = 0;
  GpuPool pool;
  int group = -1;  // the flexible GPU whose layout node it is on; -1 = none
};

enum class EventKind { kSubmit, kEnd, kBackfill, kWake, kRelayout, kActivate };

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
    groups_ = FlexGroupsOf(cluster);
    std::vector<int> group_of(cluster.nodes.size(), -1);
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (int n : groups_[g].nodes) group_of[n] = static_cast<int>(g);
    }
    active_.assign(groups_.size(), 0);  // each GPU starts in its first layout
    changed_at_.assign(groups_.size(), 0);
    for (const GpuPool& pool : GpuPoolsOf(cluster)) {
      const Node& n = cluster.nodes[pool.node];
      auto held = s.held_gpus.find(n.name);
      int gpus = pool.capacity;
      if (pool.type.empty() && held != s.held_gpus.end()) gpus = std::max(0, gpus - held->second);
      if (n.layout_index > 0) gpus = 0;  // a standby layout node
      nodes_.push_back(NodeState{n.name, gpus, gpus, pool, group_of[pool.node]});
    }
    reserved_.resize(nodes_.size());
    for (const SimReservation& r : settings_.reservations) {
      for (size_t p = 0; p < nodes_.size(); ++p) {
        if (std::find(r.nodes.begin(), r.nodes.end(), nodes_[p].name) != r.nodes.end()) {
          reserved_[p].push_back(&r);
        }
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
          case EventKind::kRelayout:
            relayout_scheduled_ = false;
            Relayout(now);
            break;
          case EventKind::kActivate:
            Activate(e.job, e.generation);
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
      if (!groups_.empty() && !relayout_scheduled_ && AnyPending()) {
        relayout_scheduled_ = true;
        const double every = std::max(1e-3, settings_.relayout.every_s);
        Push((std::floor(now / every) + 1) * every, EventKind::kRelayout, -1);
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
    ShapeRequest request{.gpus = j.job->gpus, .partition = j.job->partition,
                         .mig_profile = j.job->mig_profile};
    auto shape = PlanJobShape(cluster_, request);
    if (!shape && !request.mig_profile.empty()) {
      request.mig_profile.clear();  // no such slices there: a whole GPU, as a student would ask
      shape = PlanJobShape(cluster_, request);
    }
    if (!shape) {
      j.state = State::kFailed;
      j.result.error = shape.error().message;
      return false;
    }
    j.shape = *shape;
    for (const Partition& p : cluster_.partitions) {
      if (p.name == j.shape.partition) j.partition = &p;
    }
    j.type = request.mig_profile;
    for (size_t p = 0; p < nodes_.size(); ++p) {
      if (nodes_[p].pool.type == j.type &&
          std::find(j.partition->nodes.begin(), j.partition->nodes.end(), nodes_[p].name) !=
              j.partition->nodes.end()) {
        j.part_nodes.push_back(static_cast<int>(p));
      }
    }
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
    result_.gpu_seconds_allocated += (now - j.allocated) * GpuEquivalents(j);
    j.nodes.clear();
  }

  double GpuEquivalents(const ModelJob& j) const {
    double held = 0;
    for (int n : j.nodes) held += j.shape.gpus_per_node * nodes_[n].pool.gpu_equivalents;
    return held;
  }

  // Its duration where it runs: on slices, times their factor.
  double WorkTime(const ModelJob& j) const {
    return j.job->duration.count() * (j.type.empty() ? 1 : j.job->slice_duration_factor);
  }
  double Limit(const ModelJob& j) const {
    const double limit = j.job->time_limit.count();
    return limit > 0 ? limit : WorkTime(j);
  }
  // How long it runs: its duration, or until Slurm ends it at its time limit.
  double RunLength(const ModelJob& j) const { return std::min(WorkTime(j), Limit(j)); }

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
    j.result.gres = j.type;
    j.result.gpu_equivalents = GpuEquivalents(j);
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

  // The layout policy's pass: what waits, against the flexible GPUs that are idle.
  void Relayout(double now) {
    RelayoutInput input;
    std::vector<int> group_by_input;
    std::vector<bool> busy(groups_.size(), false);  // a job holds its GPU or a slice of it
    for (const NodeState& p : nodes_) {
      if (p.group >= 0 && p.free < p.total) busy[p.group] = true;
    }
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (active_[g] < 0) continue;  // changing now
      const int node = groups_[g].nodes[active_[g]];
      input.gpus.push_back(FlexGpu{.node = cluster_.nodes[node].name,
                                   .gpu = cluster_.nodes[node].gpus.first_index,
                                   .layout = groups_[g].layouts[active_[g]],
                                   .busy = busy[g],
                                   .changed_at = changed_at_[g]});
      group_by_input.push_back(static_cast<int>(g));
    }
    for (const NodeState& p : nodes_) {
      // An idle flexible GPU's capacity is the policy's to choose; a busy one's free slices
      // count as free elsewhere.
      if (p.group >= 0 && !busy[p.group]) continue;
      input.free_elsewhere[p.pool.type.empty() ? kWholeGpu : p.pool.type] += p.free;
    }
    for (ModelJob* j : PendingByPriority(now)) {
      if (j->shape.nodes != 1 || !TouchesFlexGpus(*j)) continue;
      input.pending.push_back(PendingSlices{.profile = j->type.empty() ? kWholeGpu : j->type,
                                            .count = j->shape.gpus_per_node,
                                            .since = std::llround(j->eligible)});
    }
    const RelayoutSettings settings{.candidates = groups_.front().layouts,
                                    .min_wait_s = settings_.relayout.min_wait_s,
                                    .hold_s = settings_.relayout.hold_s};
    const int64_t at = std::llround(now);
    for (const RelayoutDecision& d : DecideRelayouts(settings, input, at)) {
      for (size_t i = 0; i < input.gpus.size(); ++i) {
        if (input.gpus[i].node != d.node) continue;
        const int g = group_by_input[i];
        const auto to = std::find(groups_[g].layouts.begin(), groups_[g].layouts.end(), d.to);
        if (to == groups_[g].layouts.end()) break;
        const int layout = static_cast<int>(to - groups_[g].layouts.begin());
        for (NodeState& p : nodes_) {
          if (p.pool.node == groups_[g].nodes[active_[g]]) p.total = p.free = 0;
        }
        result_.layout_changes.push_back(LayoutChange{
            now, d.node, cluster_.nodes[groups_[g].nodes[layout]].name});
        active_[g] = -1;
        changed_at_[g] = at;
        Push(now + settings_.relayout.delay_s, EventKind::kActivate, g, layout);
        ++result_.events;
        break;
      }
    }
  }

  // GPU `g`'s layout node `layout` becomes its active one: its GPUs or slices are Slurm's.
  void Activate(int g, int layout) {
    active_[g] = layout;
    for (NodeState& p : nodes_) {
      if (p.pool.node == groups_[g].nodes[layout]) p.total = p.free = p.pool.capacity;
    }
  }

  // Whether some layout of a flexible GPU has what `j` asks for.
  bool TouchesFlexGpus(const ModelJob& j) const {
    return std::any_of(j.part_nodes.begin(), j.part_nodes.end(),
                       [&](int p) { return nodes_[p].group >= 0; });
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
  std::vector<NodeState> nodes_;  // pools, node by node
  std::vector<FlexGroup> groups_;
  std::vector<int> active_;          // per group: its active layout; -1 while it changes
  std::vector<int64_t> changed_at_;  // per group: when its layout last changed
  std::vector<ModelJob> jobs_;
  std::vector<std::vector<const SimReservation*>> reserved_;  // by node
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  int64_t seq_ = 0;
  bool backfill_scheduled_ = false;
  bool relayout_scheduled_ = false;
  bool dirty_ = false;  // a submission, end or requeue since the last backfill pass
  SlurmModelResult result_;
};

}  // namespace

SlurmModelResult RunSlurmModel(const Cluster& cluster, const std::vector<SimJob>& jobs,
                               const SlurmModelSettings& settings) {
  return Model(cluster, jobs, settings).Run();
}

}  // namespace bmas::plan
