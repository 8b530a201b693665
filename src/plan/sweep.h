#pragma once

// `bmas plan --sweep KEY=V1,V2,...`: the scenario again with one thing changed.
//  - gpus=N: the cluster cut down to, or grown to, N GPUs: its first nodes, or more nodes like
//    its last one (named after it: oss12 gives oss13, oss14, ...). Partitions over all nodes
//    cover the new ones; research windows keep the nodes that remain.
//  - users=N: every cohort scaled by N / (the scenario's users), at least one member each.

#include <string>
#include <vector>

#include "core/cluster.h"
#include "plan/scenario.h"

namespace bmas::plan {

struct SweepSpec {
  std::string key;  // "gpus" or "users"
  std::vector<int> values;
};

// Parses "gpus=24,32,48"; throws ConfigError saying what is wrong.
SweepSpec ParseSweep(const std::string& text);

// The cluster with `gpus` GPUs (rounded up to whole nodes).
Cluster ResizeCluster(const Cluster& cluster, int gpus);

// The scenario with `value` applied (its cluster re-attached for gpus).
Scenario SweepScenario(const Scenario& scenario, const SweepSpec& spec, int value);

}  // namespace bmas::plan
