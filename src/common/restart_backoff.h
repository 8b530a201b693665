#pragma once

// When to start again a supervised process that died: the restart policy of `bmas up`. Pure:
// it takes the times and returns one, so a test (or a simulator) runs it without waiting.
//
// The delay doubles with each death in a row, from `first` up to `max`, as systemd's
// RestartSec with a steps limit or Kubernetes' CrashLoopBackOff do; a process that stayed up
// `healthy_after` or longer starts the count again. It never gives up: a part that cannot start
// (its port taken, say) keeps being tried every `max`, and `bmas up --status` says why.

#include <algorithm>
#include <chrono>

namespace bmas {

struct RestartBackoff {
  std::chrono::milliseconds first{1000};
  std::chrono::milliseconds max{30000};
  std::chrono::milliseconds healthy_after{60000};
};

// One supervised process's deaths.
struct RestartCount {
  int deaths_in_a_row = 0;  // deaths since it last stayed up `healthy_after`
};

// The process started at `started` died at `now`: counts the death and returns when to start it
// again.
template <typename TimePoint>
TimePoint NextRestart(const RestartBackoff& policy, RestartCount& count, TimePoint started,
                      TimePoint now) {
  if (now - started >= policy.healthy_after) count.deaths_in_a_row = 0;
  ++count.deaths_in_a_row;
  auto delay = policy.first;
  for (int i = 1; i < count.deaths_in_a_row && delay < policy.max; ++i) delay *= 2;
  delay = std::min(delay, policy.max);
  return now + std::chrono::duration_cast<typename TimePoint::duration>(delay);
}

}  // namespace bmas
