#pragma once

// Who holds each GPU of the cluster, from Slurm's allocations (which GPU indexes each running
// job holds on each node), the mode (research reservations), the nodes' states, and the
// agents' telemetry for utilisation. Pure.

#include <cstdint>
#include <string>
#include <vector>

#include "dashboard/node_health.h"
#include "dashboard/state.h"

namespace bmas::dashboard {

struct GpuCell {
  int index = 0;
  // "training" (a Slurm job), "inference" (a replica job), "idle", "reserved" (research mode),
  // "drained" (the node is drained or draining: an admin's hold) or "down" (the node is down,
  // not responding, or in a state Slurm does not know).
  std::string state;
  int64_t job_id = 0;
  std::string user;
  std::string job_name;
  std::string partition;
  std::string slice;  // held as a MIG slice: its profile ("1g.10gb"); "" for a whole GPU
  // A shared GPU: the shards its jobs hold and how many jobs (the cell names the first).
  int shards = 0;
  int sharers = 0;
  int util = -1;  // percent from the agent; -1 = no telemetry for this GPU
  uint64_t mem_used_mb = 0;
  uint64_t mem_total_mb = 0;
};

struct NodeCell {
  std::string name;
  std::string state;   // Slurm's, lower case: idle, mixed, allocated, down, ...; "" without Slurm
  std::string reason;  // why drained or down, as Slurm has it
  bool telemetry = false;  // an agent reported this node's GPUs
  NodeHealth health;       // Slurm's state and the agent's, as the page shows them
  std::vector<GpuCell> gpus;
};

// A replica of the inference path: a job in the inference partition or named bmas-inference*.
bool IsInferenceJob(const JobInfo& job);

// Every node, in Slurm's order (the agents' when there is no Slurm), each GPU by index.
std::vector<NodeCell> BuildClusterMap(const ClusterState& s);

}  // namespace bmas::dashboard
