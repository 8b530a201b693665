#pragma once

// `bmas slurm monitor`: watches a Slurm cluster through slurmrestd and
//  - serves /metrics: jobs and GPUs held per user and partition, pending jobs, nodes and
//    GPUs by state, and the current mode (lab or research);
//  - records every job it sees finish in bmas's store, for `bmas usage`'s GPU-hours.
// slurmctld remembers a finished job for MinJobAge (300 s by default), so polling every few
// seconds sees each one; slurmdbd is not needed.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "slurm/modes.h"
#include "slurm/slurm_json.h"
#include "store/store.h"

namespace bmas {

// One poll of the cluster.
struct SlurmSnapshot {
  bool reachable = false;  // false: the rest is from no poll yet, or stale
  std::string error;       // why the last poll failed
  std::string cluster;     // Slurm's ClusterName, recorded with each finished job
  std::vector<JobInfo> jobs;
  std::vector<JobInfo> accounted;  // finished jobs from slurmdbd, when the cluster has it
  std::vector<NodeInfo> nodes;
  slurm::Mode mode;
};

// The Prometheus text for a snapshot, plus the monitor's own counters.
std::string RenderSlurmMetrics(const SlurmSnapshot& s, int64_t jobs_recorded, int64_t poll_errors);

// The jobs of `jobs` in a final state, as accounting records of `cluster`.
std::vector<JobRecord> FinishedJobRecords(const std::vector<JobInfo>& jobs,
                                          const std::string& cluster);

struct SlurmMonitorOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::chrono::milliseconds interval{2000};
  std::string store_path;
  // What /metrics asks for: "Bearer <operator_secret>" (common/operator_auth.h); "" refuses
  // everyone. /health stays open.
  std::string operator_secret;
  // Polls the cluster once (slurmrestd's jobs and nodes, and the mode). Called on the
  // monitor's poll thread; it resolves the endpoint each time, so tokens never go stale.
  std::function<Result<SlurmSnapshot>()> poll;
};

// Serves until SIGINT or SIGTERM; prints "bmas slurm monitor: listening on URL" once ready.
// Returns the process exit code.
int RunSlurmMonitor(const SlurmMonitorOptions& options);

}  // namespace bmas
