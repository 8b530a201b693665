#pragma once

// A Slurm job's state, typed: what squeue and slurmrestd call job_state. Slurm's names are
// parsed in one place (slurm_json.cc's ParseJobState) and printed with JobStateName; what a
// state means for bmas (does the job hold its GPUs? wait? is it over?) is defined here once.

#include <cstdint>
#include <iosfwd>
#include <string_view>

#include <fmt/format.h>

namespace bmas {

enum class JobState : uint8_t {
  kUnknown,  // empty, or a name this version of bmas does not know
  // Waiting for an allocation.
  kPending,
  kRequeued,
  kRequeueHold,
  kRequeueFed,
  // Holding an allocation, or about to.
  kConfiguring,
  kRunning,
  kCompleting,
  kSuspended,
  kStopped,
  kResizing,
  kSignaling,
  kStageOut,
  // Final: a job never leaves these.
  kCompleted,
  kFailed,
  kCancelled,
  kTimeout,
  kNodeFail,
  kPreempted,
  kBootFail,
  kDeadline,
  kOutOfMemory,
  kRevoked,
};

// Slurm's name: "PENDING", "RUNNING", "OUT_OF_MEMORY", ...; "UNKNOWN" for kUnknown.
std::string_view JobStateName(JobState state);

// Whether a job in `state` holds its allocation, GPUs included; the one definition the
// monitor, the dashboard and the controller share. RUNNING; CONFIGURING (its nodes are being
// readied); COMPLETING (until its epilog ends); SUSPENDED and STOPPED (Slurm keeps their GRES).
bool HoldsGpus(JobState state);

// Whether a job in `state` waits for an allocation: PENDING, REQUEUED, REQUEUE_HOLD,
// REQUEUE_FED.
bool IsPending(JobState state);

// True for states a job never leaves: COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL,
// PREEMPTED, BOOT_FAIL, DEADLINE, OUT_OF_MEMORY, REVOKED.
bool IsFinal(JobState state);

// The final states of a job that went wrong rather than was ended: FAILED, NODE_FAIL,
// BOOT_FAIL, OUT_OF_MEMORY, DEADLINE (not CANCELLED, TIMEOUT or PREEMPTED).
bool IsFailure(JobState state);

// For GoogleTest's messages and logs: the name.
std::ostream& operator<<(std::ostream& out, JobState state);

}  // namespace bmas

// fmt prints a state by its name.
template <>
struct fmt::formatter<bmas::JobState> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(bmas::JobState state, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(bmas::JobStateName(state), ctx);
  }
};
