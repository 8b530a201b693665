#pragma once

// The time every policy is given, and where it comes from. Policies (autoscaling, idle
// policing, rate limiting, the engine's scheduler) never read a clock: the caller passes them a
// TimePoint, taken from a Clock. The daemons use RealClock; tests and `bmas plan`'s simulator
// use ManualClock and move time themselves.
//
// One type for all: seconds since the clock's epoch as a double. Why not int64 milliseconds:
// the engine core already runs in double seconds of virtual time, and policies divide and
// smooth (rates, moving averages), which wants a real number; a double holds microseconds
// exactly enough for centuries of uptime, far below any decision's resolution. It is a
// duration rather than a std::chrono::time_point so that a simulator can start it at 0 without
// inventing a clock type; TimePoint and Duration are the same type, named for what they hold.

#include <atomic>
#include <chrono>

namespace bmas {

using Duration = std::chrono::duration<double>;  // seconds
using TimePoint = Duration;                        // seconds since the clock's epoch

// Where "now" comes from. Implementations are thread-safe; Now() never goes back.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

// std::chrono::steady_clock: its epoch is the machine's (boot, on Linux), so every RealClock in
// a process agrees. Not wall time: use it for intervals, never for dates.
class RealClock final : public Clock {
 public:
  TimePoint Now() const override;
};

// Time that moves only when told to: for tests and simulation.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(TimePoint start = TimePoint{0}) : now_(start.count()) {}

  TimePoint Now() const override { return TimePoint{now_.load(std::memory_order_acquire)}; }
  // REQUIRES: by >= 0.
  void Advance(Duration by);
  // REQUIRES: to >= Now() (time does not go back).
  void Set(TimePoint to);

 private:
  std::atomic<double> now_;
};

}  // namespace bmas
