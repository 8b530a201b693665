#pragma once

// A replica's state, as the inference controller decides it and the store keeps it: stored and
// shown by its name ("pending", "starting", "ready", "draining", "sleeping").

#include <optional>
#include <string_view>

namespace bmas {

enum class ReplicaState {
  kPending,   // its Slurm job is submitted and not running yet
  kStarting,  // its job runs; the server does not answer /health yet
  kReady,     // answers /health and takes requests
  kDraining,  // takes no new requests; finishing those it has, then its job ends (or it sleeps)
  kSleeping,  // its job runs and holds its GPU, the engine asleep (vLLM's sleep mode, level 1):
              // takes no requests, wakes in seconds; preemptible as an awake one
};

inline std::string_view ReplicaStateName(ReplicaState s) {
  switch (s) {
    case ReplicaState::kPending: return "pending";
    case ReplicaState::kStarting: return "starting";
    case ReplicaState::kReady: return "ready";
    case ReplicaState::kDraining: return "draining";
    case ReplicaState::kSleeping:
      return "sleeping";
  }
  return "pending";
}

// The state of a stored name; nullopt for any other text.
inline std::optional<ReplicaState> ParseReplicaState(std::string_view name) {
  for (ReplicaState s : {ReplicaState::kPending, ReplicaState::kStarting, ReplicaState::kReady,
                         ReplicaState::kDraining, ReplicaState::kSleeping}) {
    if (ReplicaStateName(s) == name) return s;
  }
  return std::nullopt;
}

// Whether the gateway may send it requests: a starting replica is probed until it answers; a
// draining or sleeping one gets none.
inline bool ReplicaTakesRequests(ReplicaState s) {
  return s == ReplicaState::kStarting || s == ReplicaState::kReady;
}

}  // namespace bmas
