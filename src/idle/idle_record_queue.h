#pragma once

// Idle-GPU records that the store has not taken yet: on a node, the store is the controller's
// PostgreSQL across the network (cluster/node_store.h), and while it cannot be reached (the
// server is down, the link is cut, the node's certificate is refused) the agent keeps its
// records here and writes them again, oldest first, on its next try. Writing one twice is
// harmless: the store keeps each (job, kind, idle stretch) once. Bounded: past `max` records,
// the oldest are dropped and counted. Not thread-safe: the agent's GPU sampler thread alone
// uses it.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>

#include "common/result.h"
#include "store/store.h"

namespace bmas {

class IdleRecordQueue {
 public:
  static constexpr size_t kDefaultMax = 10000;
  // How long the agent waits after a failed write before it tries again.
  static constexpr int64_t kRetryAfterSeconds = 30;

  explicit IdleRecordQueue(size_t max = kDefaultMax) : max_(max) {}

  void Add(IdleRecord record);

  // Whether a write is due at `now` (unix seconds): records wait, and the last failure was
  // kRetryAfterSeconds or more ago.
  bool Due(int64_t now) const { return !pending_.empty() && now >= next_try_; }

  // Writes the pending records with `write`, oldest first, at `now`; stops at the first that
  // fails, which stays with those after it, and returns its error (the next try is then
  // kRetryAfterSeconds later). Returns how many were written.
  Result<size_t> Flush(int64_t now, const std::function<Result<void>(const IdleRecord&)>& write);

  size_t size() const { return pending_.size(); }
  // Records dropped because the queue was full, since it was made.
  int64_t dropped() const { return dropped_; }

 private:
  const size_t max_;
  std::deque<IdleRecord> pending_;
  int64_t next_try_ = 0;
  int64_t dropped_ = 0;
};

}  // namespace bmas
