#pragma once

// Idle-GPU policing: a job that holds GPUs and leaves them all idle is warned, then cancelled,
// as Princeton's Job Defense Shield does (warnings first, cancelled after 2 hours). Pure: the
// GPU samples of each job and the time go in, warnings and cancellations come out, and the
// caller (the agent's telemetry loop, or a simulator) keeps the state between calls. A job's
// GPUs are those Slurm allocated it; one that none of its processes runs on is idle.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace bmas {

struct IdleSettings {
  double threshold_pct = 1.0;       // a GPU under this utilisation is idle
  int64_t warn_after_s = 60 * 60;   // all of a job's GPUs idle this long: a warning
  int64_t cancel_after_s = 120 * 60;  // ... and this long: the job is cancelled
  // Where it applies: on by default in `lab`, off in `training`; research mode turns it off.
  std::set<std::string> partitions = {"lab"};
  // Samples further apart than this (the telemetry stopped) start the idle time again: a gap
  // is never counted as idle.
  int64_t max_sample_gap_s = 5 * 60;
  // Exempt: inference replicas, which the controller owns and scales down itself. A job is one
  // when both its owner (the service account that runs replicas, or root) and its partition
  // say so; never by its name, which any user chooses.
  std::set<std::string> replica_owners = {"bmas", "root"};
  std::set<std::string> replica_partitions = {"inference", "inference_floor"};
};

// One GPU that Slurm allocated to a job, at one time.
struct GpuUse {
  double util_pct = 0;
  bool has_process = false;  // a process of the job's runs on it; without one it is idle
};

// One job's GPUs at one time: Slurm's allocation on this node, with the node's telemetry.
struct JobGpuSample {
  int64_t job_id = 0;
  std::string user;       // its owner, as Slurm says
  std::string partition;  // "" when it is not policed (research mode)
  std::vector<GpuUse> gpus;  // one per GPU allocated here; empty: none, or no telemetry
};

// What the policy remembers of one job between calls.
struct JobIdleState {
  int64_t idle_since = -1;  // unix seconds since when all its GPUs were idle; -1: busy
  int64_t last_sample = -1;
  bool warned = false;
  bool cancelled = false;
};

struct IdleState {
  std::map<int64_t, JobIdleState> jobs;
};

struct IdleAction {
  enum class Kind { kWarn, kCancel };
  Kind kind = Kind::kWarn;
  int64_t job_id = 0;
  std::string user;
  int64_t idle_since = 0;
  int64_t cancel_at = 0;       // for a warning: when it will be cancelled if still idle
  int gpus = 0;                // its GPUs here
  double wasted_gpu_hours = 0;  // GPUs x idle time so far
  std::string reason;          // for the job's output, `bmas jobs` and the store
};

// The samples of every job that runs now (a job missing from them has ended, and is
// forgotten). Each job is warned once per idle stretch and cancelled once; a busy sample starts
// it over. In research mode nothing is policed.
std::vector<IdleAction> DecideIdle(const IdleSettings& settings, bool research_mode,
                                   const std::vector<JobGpuSample>& samples, int64_t now,
                                   IdleState& state);

}  // namespace bmas
