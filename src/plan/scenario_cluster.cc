// The parts of a scenario that need its cluster, and the helpers its users share.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/config_table.h"
#include "plan/scenario.h"

namespace bmas::plan {

namespace {

constexpr double kDaySeconds = 24 * 3600;

[[noreturn]] void Fail(const Scenario& s, int line, std::string_view key, const std::string& what) {
  if (s.source.empty()) {
    throw ConfigError(fmt::format("the default scenario: {}: {}", key, what));
  }
  throw ConfigError(fmt::format("{}:{}: {}: {}", s.source, line, key, what));
}

const Partition* FindPartition(const Cluster& c, std::string_view name) {
  auto it = std::find_if(c.partitions.begin(), c.partitions.end(), [&](const Partition& p) {
    return name.empty() ? p.is_default : p.name == name;
  });
  return it == c.partitions.end() ? nullptr : &*it;
}

int GpusOf(const Cluster& c, const Partition& p) {
  int gpus = 0;
  for (const std::string& name : p.nodes) {
    const Node* n = c.FindNode(name);
    if (n != nullptr && n->layout_index <= 0) gpus += n->gpus.count;
  }
  return gpus;
}

// The partition `name` ("" = the default one), or a ConfigError at `key`.
const Partition& NeedPartition(const Scenario& s, const Cluster& c, int line, std::string_view key,
                               std::string_view name) {
  if (const Partition* p = FindPartition(c, name)) return *p;
  std::vector<std::string_view> names;
  for (const Partition& p : c.partitions) names.push_back(p.name);
  Fail(s, line, key,
       name.empty() ? fmt::format("{} has no default partition: name one of {}", c.source,
                                  fmt::join(names, ", "))
                    : fmt::format("\"{}\" is not a partition of {}: name one of {}", name, c.source,
                                  fmt::join(names, ", ")));
}

}  // namespace

bool WeeklyWindow::Contains(double t) const {
  double in_week = std::fmod(t, kWeekSeconds);
  if (in_week < 0) in_week += kWeekSeconds;
  const int day = static_cast<int>(in_week / kDaySeconds);
  const double hour = (in_week - day * kDaySeconds) / 3600;
  return std::binary_search(days.begin(), days.end(), day) && hour >= start_hour && hour < end_hour;
}

std::string MemberName(std::string_view cohort, int i) { return fmt::format("{}-{}", cohort, i); }

void AttachCluster(Scenario& s, Cluster cluster) {
  const int total_gpus = PhysicalGpuCount(cluster);
  int node_gpus = 0;
  for (const Node& n : cluster.nodes) node_gpus = std::max(node_gpus, n.gpus.count);
  if (total_gpus == 0) {
    throw ConfigError(
        fmt::format("{}: no node has GPUs: give the nodes [cluster.nodes.gpus] "
                    "count = N (bmas plan simulates GPU nodes)",
                    cluster.source));
  }
  if (s.engine.gpus_per_replica > node_gpus) {
    Fail(s, s.engine.line, "engine.gpus_per_replica",
         fmt::format("{} GPUs do not fit on one node of {} (at most {}): a replica runs on one "
                     "node",
                     s.engine.gpus_per_replica, cluster.source, node_gpus));
  }
  NeedPartition(s, cluster, s.policies.line, "policies.inference_partition",
                s.policies.inference_partition);
  NeedPartition(s, cluster, s.policies.line, "policies.floor_partition",
                s.policies.floor_partition);
  for (size_t i = 0; i < s.cohorts.size(); ++i) {
    const Cohort& c = s.cohorts[i];
    if (c.training.jobs_per_week == 0) continue;
    const std::string key = fmt::format("cohorts[{}].training", i);
    const Partition& p =
        NeedPartition(s, cluster, c.line, key + ".partition", c.training.partition);
    const double limit_s = c.training.time_limit_s;
    if (p.max_time_min != kUnlimitedMinutes && limit_s > p.max_time_min * 60.0) {
      Fail(s, c.line, key + ".time_limit_s",
           fmt::format("{:g} s is over partition {}'s max_time ({}): Slurm would refuse the jobs; "
                       "ask for {} s or less",
                       limit_s, p.name, FormatSlurmMinutes(p.max_time_min), p.max_time_min * 60));
    }
    const int gpus = GpusOf(cluster, p);
    for (const GpuShare& share : c.training.gpus_per_job) {
      if (share.gpus > gpus) {
        Fail(s, c.line, key + ".gpus_per_job",
             fmt::format("jobs of {} GPUs do not fit in partition {} ({} GPUs)", share.gpus, p.name,
                         gpus));
      }
    }
  }
  for (size_t i = 0; i < s.policies.research.size(); ++i) {
    const ResearchWindow& r = s.policies.research[i];
    for (const std::string& node : r.nodes) {
      if (cluster.FindNode(node) == nullptr) {
        Fail(s, r.line, fmt::format("policies.research[{}].nodes", i),
             fmt::format("\"{}\" is not a node of {}", node, cluster.source));
      }
    }
  }
  autoscale::AutoscaleSettings& a = s.policies.autoscale;
  const int fit = total_gpus / s.engine.gpus_per_replica;
  if (s.policies.fill_max_replicas) a.max_replicas = fit;
  if (a.min_replicas > fit) {
    Fail(s, s.policies.line, "policies.autoscale.min_replicas",
         fmt::format("{} replicas need {} GPUs; {} has {}", a.min_replicas,
                     a.min_replicas * s.engine.gpus_per_replica, cluster.source, total_gpus));
  }
  s.cluster = std::move(cluster);
}

}  // namespace bmas::plan
