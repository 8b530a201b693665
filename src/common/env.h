#pragma once

// What bmas takes from the operating system's clocks and entropy, behind one interface (as
// leveldb's Env): the monotonic clock (Clock::Now), wall time, sleeping and random bytes.
// Code outside src/common and src/daemon never reads a clock itself: it is given an Env (or a
// Clock) by whoever builds it, so that a test can hand it a ManualEnv and run in virtual time.
// The daemons' mains and `bmas` commands pass Env::Default() (through Services).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/clock.h"

namespace bmas {

class Env : public Clock {
 public:
  // The real one (PosixEnv): steady_clock, system_clock, nanosleep, getrandom. One per process,
  // never destroyed; thread-safe.
  static Env& Default();

  // Seconds since 1970-01-01 UTC. May jump (NTP, the operator): use it for dates, stamps and
  // what is stored, never to measure an interval (that is Now()).
  virtual double UnixNow() const = 0;

  // Blocks the calling thread for `d` (at least; a ManualEnv moves its time instead).
  virtual void SleepFor(Duration d) = 0;

  // Fills `out` with random bytes fit for secrets and nonces.
  virtual void RandomBytes(std::span<uint8_t> out) = 0;
};

// Time that moves only when told to, or when someone sleeps: SleepFor(d) advances it by d and
// returns at once, so a deadline loop runs its course without waiting. Wall time is the
// monotonic time plus a fixed `unix_start`. Random bytes come from a seeded generator, so a
// test is repeatable. Kept here beside the real one rather than in a test-only library
// because `bmas plan`'s simulator, which ships, runs on virtual time too (as with ManualClock).
// Thread-safe.
class ManualEnv final : public Env {
 public:
  explicit ManualEnv(TimePoint start = TimePoint{0}, double unix_start = 1.7e9, uint64_t seed = 1)
      : clock_(start), unix_offset_(unix_start - start.count()), random_state_(seed) {}

  TimePoint Now() const override { return clock_.Now(); }
  double UnixNow() const override { return unix_offset_ + clock_.Now().count(); }
  void SleepFor(Duration d) override;
  void RandomBytes(std::span<uint8_t> out) override;

  // REQUIRES: by >= 0.
  void Advance(Duration by) { clock_.Advance(by); }

 private:
  ManualClock clock_;
  const double unix_offset_;
  std::atomic<uint64_t> random_state_;
};

}  // namespace bmas
