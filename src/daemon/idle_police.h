#pragma once

// Applies the idle-GPU policy (core/idle_policy.h) to each GPU sample of the agent: the GPUs a
// job's processes run on give its utilisation; Slurm gives its user, partition and output
// file. What to do about a warning or a cancellation is the caller's (`act`): the agent writes
// the warning to the job's output, cancels through Slurm and records both in the store.

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "common/result.h"
#include "core/idle_policy.h"
#include "gpu/dcgm_metrics.h"
#include "gpu/gpu_telemetry.h"
#include "slurm/slurm_json.h"

namespace bmas {

struct IdlePoliceHooks {
  // Slurm's view of a running job.
  std::function<Result<JobInfo>(int64_t job)> job;
  // A warning or a cancellation to carry out, with the job it is about.
  std::function<void(const IdleAction& action, const JobInfo& job)> act;
};

// Jobs named so are inference replicas, which the controller owns: never policed.
inline constexpr std::string_view kReplicaJobPrefix = "bmas-inference";

class IdlePolice {
 public:
  IdlePolice(IdleSettings settings, IdlePoliceHooks hooks)
      : settings_(std::move(settings)), hooks_(std::move(hooks)) {}

  // One sample of this node's GPUs and who holds them, taken at `now` (unix seconds).
  void OnSample(const std::vector<GpuReading>& gpus, const std::map<int, GpuHolder>& holders,
                int64_t now);

 private:
  IdleSettings settings_;
  IdlePoliceHooks hooks_;
  IdleState state_;
  std::map<int64_t, JobInfo> jobs_;  // Slurm's answer for each job seen, while it is sampled
};

// Appends `line` to the job's output file, as root, only when it is a regular file that the
// job's user owns (never through a symlink): the path is the user's to choose.
Result<void> AppendToJobOutput(const JobInfo& job, const std::string& line);

}  // namespace bmas
