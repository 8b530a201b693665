#include "idle/idle_record_queue.h"

namespace bmas {

void IdleRecordQueue::Add(IdleRecord record) {
  if (max_ == 0) {
    ++dropped_;
    return;
  }
  while (pending_.size() >= max_) {
    pending_.pop_front();
    ++dropped_;
  }
  pending_.push_back(std::move(record));
}

Result<size_t> IdleRecordQueue::Flush(
    int64_t now, const std::function<Result<void>(const IdleRecord&)>& write) {
  size_t written = 0;
  while (!pending_.empty()) {
    if (auto r = write(pending_.front()); !r) {
      next_try_ = now + kRetryAfterSeconds;
      return r.error();
    }
    pending_.pop_front();
    ++written;
  }
  next_try_ = 0;
  return written;
}

}  // namespace bmas
