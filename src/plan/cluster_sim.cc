#include "plan/cluster_sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "plan/workload.h"

namespace bmas::plan {
namespace {

std::vector<std::string> SplitNodes(const std::string& nodes) {
  std::vector<std::string> out;
  std::stringstream in(nodes);
  std::string n;
  while (std::getline(in, n, ',')) {
    if (!n.empty()) out.push_back(n);
  }
  return out;
}

const Partition* FindPartition(const Cluster& cluster, const std::string& name) {
  for (const Partition& p : cluster.partitions) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

// Adds `gpus` x [from, to) to hourly buckets.
void AddToHours(std::vector<double>& hours, double from, double to, double gpus) {
  while (from < to) {
    const size_t h = static_cast<size_t>(from / 3600);
    if (h >= hours.size()) break;
    const double end = std::min(to, (h + 1) * 3600.0);
    hours[h] += gpus * (end - from);
    from = end;
  }
}

}  // namespace

std::vector<SimJob> TraceJobs(const Trace& trace, double start_s) {
  std::vector<SimJob> jobs;
  for (const TraceJob& t : trace.jobs) {
    if (t.submit_s < start_s) continue;
    jobs.push_back(SimJob{.id = static_cast<int64_t>(jobs.size()) + 1,
                          .user = t.user,
                          .partition = t.partition,
                          .gpus = t.gpus,
                          .submit = TimePoint{t.submit_s - start_s},
                          .duration = Duration{t.duration_s},
                          .time_limit = Duration{t.time_limit_s}});
  }
  return jobs;
}

PlanRun RunPlan(const Scenario& scenario, const engine::Profile& profile,
                const std::vector<SimJob>* trace_jobs, const PlanSettings& settings) {
  PlanRun run;
  const Cluster& cluster = *scenario.cluster;
  run.horizon_s = scenario.simulation.days * 86400;
  const int hours = static_cast<int>(std::ceil(run.horizon_s / 3600));
  run.total_gpus = PhysicalGpuCount(cluster);

  // The floor, on the floor partition's last nodes.
  const int per_replica = std::max(1, scenario.engine.gpus_per_replica);
  SlurmModelSettings slurm = settings.slurm;
  slurm.relayout = scenario.policies.relayout;
  const Partition* floor_part = FindPartition(cluster, scenario.policies.floor_partition);
  int floor_left = scenario.policies.autoscale.min_replicas;
  if (floor_part != nullptr) {
    for (auto it = floor_part->nodes.rbegin(); it != floor_part->nodes.rend() && floor_left > 0; ++it) {
      const auto node = std::find_if(cluster.nodes.begin(), cluster.nodes.end(),
                                     [&](const Node& n) { return n.name == *it; });
      // Not on a GPU whose layout follows demand: the model would re-partition it under them.
      if (node == cluster.nodes.end() || !node->gpu_group.empty()) continue;
      const int fit = std::min(floor_left, WholeGpuCount(node->gpus) / per_replica);
      slurm.held_gpus[*it] = fit * per_replica;
      floor_left -= fit;
    }
  }
  if (floor_left > 0) {
    run.error = fmt::format(
        "the inference floor ({} replicas of {} GPU(s)) does not fit in partition '{}': lower "
        "[policies.autoscale] min_replicas",
        scenario.policies.autoscale.min_replicas, per_replica, scenario.policies.floor_partition);
    return run;
  }
  run.floor_gpus = scenario.policies.autoscale.min_replicas * per_replica;

  // Research windows become Slurm reservations, day by day, through the horizon and a week
  // past it (jobs may run on).
  for (const ResearchWindow& w : scenario.policies.research) {
    for (int day = 0; day * 86400.0 < run.horizon_s + kWeekSeconds; ++day) {
      if (std::find(w.window.days.begin(), w.window.days.end(), day % 7) == w.window.days.end()) continue;
      slurm.reservations.push_back(SimReservation{.users = w.users,
                                                  .nodes = w.nodes,
                                                  .start = day * 86400 + w.window.start_hour * 3600,
                                                  .end = day * 86400 + w.window.end_hour * 3600});
    }
  }

  // Training.
  if (trace_jobs != nullptr) {
    run.jobs = *trace_jobs;
    run.job_cohort.assign(run.jobs.size(), -1);
  } else {
    run.jobs = GenerateJobs(scenario, run.job_cohort);
  }
  run.slurm = RunSlurmModel(cluster, run.jobs, slurm);
  run.events += run.slurm.events;
  run.training_gpu_seconds_by_hour.assign(hours, 0);

  // What training leaves to replicas, node by node: changes of GPUs used per node.
  std::map<std::string, int> node_index;
  for (size_t i = 0; i < cluster.nodes.size(); ++i) node_index[cluster.nodes[i].name] = static_cast<int>(i);
  struct Change {
    double time;
    int node;
    int delta;              // GPUs that jobs take (or give back)
    int capacity_delta = 0;  // whole GPUs that a layout change adds (or takes)
  };
  std::vector<Change> changes;
  for (size_t i = 0; i < run.jobs.size(); ++i) {
    const SimJobResult& r = run.slurm.jobs[i];
    if (!r.started) continue;
    AddToHours(run.training_gpu_seconds_by_hour, r.start.count(), r.end.count(), r.gpu_equivalents);
    if (!r.gres.empty()) continue;  // on slices: replicas take whole GPUs
    const std::vector<std::string> nodes = SplitNodes(r.nodes);
    if (nodes.empty()) continue;
    const int per_node = (run.jobs[i].gpus + static_cast<int>(nodes.size()) - 1) / static_cast<int>(nodes.size());
    for (const std::string& n : nodes) {
      auto it = node_index.find(n);
      if (it == node_index.end()) continue;
      changes.push_back({r.start.count(), it->second, per_node});
      changes.push_back({r.end.count(), it->second, -per_node});
    }
  }
  // GPUs whose layout follows demand hold a replica only while whole.
  for (const LayoutChange& c : run.slurm.layout_changes) {
    const int from = node_index.at(c.from), to = node_index.at(c.to);
    changes.push_back({c.time, from, 0, -WholeGpuCount(cluster.nodes[from].gpus)});
    changes.push_back({c.time, to, 0, WholeGpuCount(cluster.nodes[to].gpus)});
  }
  // Research windows take their nodes from replicas: a change at every window edge.
  std::vector<std::vector<int>> research_nodes;
  for (const ResearchWindow& w : scenario.policies.research) {
    std::vector<int> idx;
    for (const std::string& n : w.nodes) {
      if (auto it = node_index.find(n); it != node_index.end()) idx.push_back(it->second);
    }
    research_nodes.push_back(idx);
  }
  std::vector<double> edges;
  for (const ResearchWindow& w : scenario.policies.research) {
    for (double day = 0; day * 86400 < run.horizon_s; ++day) {
      edges.push_back(day * 86400 + w.window.start_hour * 3600);
      edges.push_back(day * 86400 + w.window.end_hour * 3600);
    }
  }
  for (double e : edges) changes.push_back({e, -1, 0});
  std::stable_sort(changes.begin(), changes.end(),
                   [](const Change& a, const Change& b) { return a.time < b.time; });

  const Partition* inference_part = FindPartition(cluster, scenario.policies.inference_partition);
  std::vector<bool> serves(cluster.nodes.size(), inference_part == nullptr);
  if (inference_part != nullptr) {
    for (const std::string& n : inference_part->nodes) {
      if (auto it = node_index.find(n); it != node_index.end()) serves[it->second] = true;
    }
  }
  std::vector<int> used(cluster.nodes.size(), 0);
  std::vector<int> capacity(cluster.nodes.size(), 0);  // whole GPUs
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    if (cluster.nodes[i].layout_index <= 0) capacity[i] = WholeGpuCount(cluster.nodes[i].gpus);
  }
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    auto held = slurm.held_gpus.find(cluster.nodes[i].name);
    if (held != slurm.held_gpus.end()) used[i] = held->second;
  }
  auto slots_at = [&](double t) {
    std::vector<bool> reserved(cluster.nodes.size(), false);
    for (size_t w = 0; w < scenario.policies.research.size(); ++w) {
      if (!scenario.policies.research[w].window.Contains(t)) continue;
      for (int n : research_nodes[w]) reserved[n] = true;
    }
    int slots = 0;
    for (size_t n = 0; n < cluster.nodes.size(); ++n) {
      if (!serves[n] || reserved[n]) continue;
      slots += std::max(0, capacity[n] - used[n]) / per_replica;
    }
    return slots;
  };
  std::vector<SlotChange> slots;
  slots.push_back({0, slots_at(0)});
  for (size_t i = 0; i < changes.size();) {
    const double t = changes[i].time;
    for (; i < changes.size() && changes[i].time == t; ++i) {
      if (changes[i].node < 0) continue;
      used[changes[i].node] += changes[i].delta;
      capacity[changes[i].node] += changes[i].capacity_delta;
    }
    const int s = slots_at(t);
    if (s != slots.back().replicas) slots.push_back({t, s});
  }

  // Inference.
  InferenceSettings inference = settings.inference;
  inference.horizon_s = run.horizon_s;
  run.inference = RunInference(scenario, profile, GenerateSessions(scenario), slots, inference);
  run.events += run.inference.events;
  return run;
}

}  // namespace bmas::plan
