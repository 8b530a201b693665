#include "common/clock.h"

#include <cassert>

namespace bmas {

TimePoint RealClock::Now() const {
  return std::chrono::duration_cast<Duration>(
      std::chrono::steady_clock::now().time_since_epoch());
}

void ManualClock::Advance(Duration by) {
  assert(by.count() >= 0);
  double now = now_.load(std::memory_order_relaxed);
  while (!now_.compare_exchange_weak(now, now + by.count(), std::memory_order_acq_rel)) {
  }
}

void ManualClock::Set(TimePoint to) {
  assert(to.count() >= now_.load(std::memory_order_relaxed));
  now_.store(to.count(), std::memory_order_release);
}

}  // namespace bmas
