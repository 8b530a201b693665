#include "common/env.h"

#include <sys/random.h>

#include <thread>

namespace bmas {
namespace {

class PosixEnv final : public Env {
 public:
  TimePoint Now() const override { return clock_.Now(); }

  double UnixNow() const override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  void SleepFor(Duration d) override {
    if (d.count() > 0) std::this_thread::sleep_for(d);
  }

  void RandomBytes(std::span<uint8_t> out) override {
    size_t got = 0;
    while (got < out.size()) {
      const ssize_t n = getrandom(out.data() + got, out.size() - got, 0);
      if (n > 0) got += static_cast<size_t>(n);
    }
  }

 private:
  RealClock clock_;
};

}  // namespace

Env& Env::Default() {
  static auto* env = new PosixEnv;  // never destroyed: threads may read it during exit
  return *env;
}

void ManualEnv::SleepFor(Duration d) {
  if (d.count() > 0) clock_.Advance(d);
}

void ManualEnv::RandomBytes(std::span<uint8_t> out) {
  // splitmix64: small, and good enough for tests; the state moves atomically so that threads
  // never get the same bytes.
  for (size_t i = 0; i < out.size(); i += 8) {
    uint64_t z =
        random_state_.fetch_add(0x9e3779b97f4a7c15, std::memory_order_relaxed) + 0x9e3779b97f4a7c15;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    z ^= z >> 31;
    for (size_t j = 0; j < 8 && i + j < out.size(); ++j) {
      out[i + j] = static_cast<uint8_t>(z >> (8 * j));
    }
  }
}

}  // namespace bmas
