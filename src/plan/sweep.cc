#include "plan/sweep.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "common/config_table.h"

namespace bmas::plan {
namespace {

// "oss12" -> "oss13": the trailing number plus `k`, keeping its width.
std::string NextName(const std::string& last, int k) {
  size_t digits = last.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(last[digits - 1]))) --digits;
  const std::string stem = last.substr(0, digits);
  const std::string num = last.substr(digits);
  const int n = num.empty() ? 0 : std::stoi(num);
  return fmt::format("{}{:0{}d}", stem, n + k, static_cast<int>(num.size()));
}

}  // namespace

SweepSpec ParseSweep(const std::string& text) {
  SweepSpec spec;
  const size_t eq = text.find('=');
  if (eq == std::string::npos) {
    throw ConfigError(fmt::format("--sweep {}: write KEY=V1,V2,... with KEY gpus or users, e.g. "
                                  "--sweep gpus=24,32,48", text));
  }
  spec.key = text.substr(0, eq);
  if (spec.key != "gpus" && spec.key != "users") {
    throw ConfigError(fmt::format("--sweep: '{}' is not a key bmas sweeps; use gpus or users", spec.key));
  }
  std::string rest = text.substr(eq + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    const size_t comma = std::min(rest.find(',', pos), rest.size());
    const std::string item = rest.substr(pos, comma - pos);
    int v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 1 || v > 100000) {
      throw ConfigError(fmt::format("--sweep {}: '{}' is not a whole number from 1 to 100000", text, item));
    }
    spec.values.push_back(v);
    pos = comma + 1;
  }
  return spec;
}

Cluster ResizeCluster(const Cluster& cluster, int gpus) {
  if (!GpuGroups(cluster).empty()) {
    throw ConfigError(fmt::format(
        "--sweep gpus: {} has GPUs whose layout follows demand ([[cluster.nodes.gpus.flexible]]), "
        "which bmas plan does not resize; sweep users, or give inventories of each size",
        cluster.source));
  }
  Cluster out = cluster;
  out.nodes.clear();
  int have = 0;
  for (const Node& n : cluster.nodes) {
    if (have >= gpus) break;
    out.nodes.push_back(n);
    have += n.gpus.count;
  }
  for (int k = 1; have < gpus && !cluster.nodes.empty(); ++k) {
    Node n = cluster.nodes.back();
    n.name = NextName(cluster.nodes.back().name, k);
    n.address = "";
    n.hostname = "";
    out.nodes.push_back(n);
    have += n.gpus.count;
  }
  std::vector<std::string> names;
  for (const Node& n : out.nodes) names.push_back(n.name);
  for (Partition& p : out.partitions) {
    if (p.nodes.size() == cluster.nodes.size()) {
      p.nodes = names;  // it was over all nodes
    } else {
      std::erase_if(p.nodes, [&](const std::string& n) {
        return std::find(names.begin(), names.end(), n) == names.end();
      });
    }
  }
  out.switches.clear();  // topology is not simulated
  return out;
}

Scenario SweepScenario(const Scenario& scenario, const SweepSpec& spec, int value) {
  Scenario s = scenario;
  if (spec.key == "users") {
    int users = 0;
    for (const Cohort& c : s.cohorts) users += c.count;
    for (Cohort& c : s.cohorts) {
      c.count = std::max(1, static_cast<int>(std::lround(c.count * static_cast<double>(value) / std::max(1, users))));
    }
    return s;
  }
  Cluster cluster = ResizeCluster(*scenario.cluster, value);
  for (ResearchWindow& w : s.policies.research) {
    std::erase_if(w.nodes, [&](const std::string& n) { return cluster.FindNode(n) == nullptr; });
  }
  std::erase_if(s.policies.research, [](const ResearchWindow& w) { return w.nodes.empty(); });
  AttachCluster(s, std::move(cluster));
  return s;
}

}  // namespace bmas::plan
