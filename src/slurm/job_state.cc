#include "slurm/job_state.h"

#include <ostream>

namespace bmas {

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kUnknown: return "UNKNOWN";
    case JobState::kPending: return "PENDING";
    case JobState::kRequeued: return "REQUEUED";
    case JobState::kRequeueHold: return "REQUEUE_HOLD";
    case JobState::kRequeueFed: return "REQUEUE_FED";
    case JobState::kConfiguring: return "CONFIGURING";
    case JobState::kRunning: return "RUNNING";
    case JobState::kCompleting: return "COMPLETING";
    case JobState::kSuspended: return "SUSPENDED";
    case JobState::kStopped: return "STOPPED";
    case JobState::kResizing: return "RESIZING";
    case JobState::kSignaling: return "SIGNALING";
    case JobState::kStageOut: return "STAGE_OUT";
    case JobState::kCompleted: return "COMPLETED";
    case JobState::kFailed: return "FAILED";
    case JobState::kCancelled: return "CANCELLED";
    case JobState::kTimeout: return "TIMEOUT";
    case JobState::kNodeFail: return "NODE_FAIL";
    case JobState::kPreempted: return "PREEMPTED";
    case JobState::kBootFail: return "BOOT_FAIL";
    case JobState::kDeadline: return "DEADLINE";
    case JobState::kOutOfMemory: return "OUT_OF_MEMORY";
    case JobState::kRevoked: return "REVOKED";
  }
  return "UNKNOWN";
}

bool HoldsGpus(JobState state) {
  switch (state) {
    case JobState::kRunning:
    case JobState::kConfiguring:
    case JobState::kCompleting:
    case JobState::kSuspended:
    case JobState::kStopped: return true;
    default: return false;
  }
}

bool IsPending(JobState state) {
  switch (state) {
    case JobState::kPending:
    case JobState::kRequeued:
    case JobState::kRequeueHold:
    case JobState::kRequeueFed: return true;
    default: return false;
  }
}

bool IsFinal(JobState state) { return state >= JobState::kCompleted; }

bool IsFailure(JobState state) {
  switch (state) {
    case JobState::kFailed:
    case JobState::kNodeFail:
    case JobState::kBootFail:
    case JobState::kOutOfMemory:
    case JobState::kDeadline: return true;
    default: return false;
  }
}

std::ostream& operator<<(std::ostream& out, JobState state) { return out << JobStateName(state); }

}  // namespace bmas
