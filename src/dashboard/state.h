#pragma once

// What the dashboard knows of the cluster at one moment, gathered by its daemon from bmas's own
// interfaces: Slurm (slurmrestd), the store, the gateway's /load and each agent's /gpus. The
// views (views.h) are pure functions of it, of who asks, and of the time.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "slurm/modes.h"
#include "slurm/slurm_json.h"
#include "store/store.h"

namespace bmas::dashboard {

// One GPU as its node's agent read it.
struct GpuTelemetryRow {
  int index = 0;
  unsigned util = 0;  // percent
  uint64_t mem_used_mb = 0;
  uint64_t mem_total_mb = 0;
  int64_t job_id = 0;  // from the cgroup of a process on it; 0 = none
  std::string user;
};

// An agent's /gpus: `up` false when it has no driver or its last read failed, or when it did
// not answer (`answered` false, `error` saying why).
struct NodeTelemetry {
  std::string node;  // as its sample names it; the agent's address when it has no sample
  bool up = false;
  std::string error;
  std::vector<GpuTelemetryRow> gpus;
  std::string agent;     // the address the dashboard reads it at ("https://oss01:9400")
  bool answered = true;  // false: no answer from it (refused, timed out, unreachable)
};

// A histogram as the gateway keeps it: counts per bucket (not cumulative), one more than
// `bounds` (the last is +Inf).
struct LatencyHistogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  uint64_t count = 0;
  double sum = 0;
};

struct BackendLoad {
  std::string url;
  std::vector<std::string> models;
  bool healthy = false;
  bool draining = false;
  int in_flight = 0;
  int capacity = 0;  // admission limit; 0 = unknown
  double kv_usage = 0;
};

// The gateway's /load.
struct GatewayLoad {
  bool reachable = false;
  std::string error;
  std::map<std::string, int> queued;  // per model; each in [0, 2^24] (sources.h)
  std::map<std::string, double> oldest_wait_s;  // per model; seconds, >= 0
  std::vector<BackendLoad> backends;
  LatencyHistogram ttft;
  LatencyHistogram queue_wait;
};

// One point of the plots, taken at each refresh.
struct HistoryPoint {
  int64_t t = 0;  // unix seconds
  int gpus_training = 0;
  int gpus_inference = 0;
  int gpus_idle = 0;  // free and usable (neither drained nor reserved)
  int64_t queue = 0;  // pending Slurm jobs plus requests queued at the gateway
  double ttft_p95_s = -1;  // over the interval since the previous point; -1 = no requests
};

struct ClusterState {
  int64_t now = 0;  // unix seconds of the refresh
  bool slurm_reachable = false;
  std::string slurm_error;  // why not, in words
  std::vector<JobInfo> jobs;
  std::vector<NodeInfo> nodes;
  slurm::Mode mode;
  std::vector<NodeTelemetry> telemetry;
  GatewayLoad gateway;
  bool store_ok = false;
  std::string store_error;
  std::vector<User> users;
  std::vector<UsageRow> tokens_hour;  // per (user, model, backend), the last hour
  std::vector<UsageRow> tokens_day;   // since midnight UTC, as tokens_per_day counts
  std::vector<JobUsageRow> gpu_usage;  // finished jobs of the last 30 days
  std::vector<IdleRecord> idle;        // idle policing of the last 30 days
  std::vector<HistoryPoint> history;   // oldest first
};

// Who asks: the user a session or key belongs to.
struct Viewer {
  std::string user;
  bool admin = false;
};

}  // namespace bmas::dashboard
