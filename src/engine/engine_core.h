#pragma once

// EngineCore: the simulated vLLM engine in virtual time. A Scheduler plus the step-time model,
// token sampling and vLLM's metrics. It never reads a clock: callers pass the time.
//
// One step is BeginStep(now) -> (the caller lets the returned duration pass, in real or
// virtual time) -> FinishStep(now + duration). Requests may be added or aborted between the
// two; an aborted request frees its KV blocks at once and produces nothing more.
//
// Not thread-safe.

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/result.h"
#include "engine/scheduler.h"
#include "engine/timing.h"

namespace bmas::engine {

struct TokenEvent {
  RequestId id;
  TokenId token;
  int num_prompt_tokens;
  int num_output_tokens;   // including this token
  int num_cached_tokens;   // prefix-cache hit when first scheduled
  FinishReason finish_reason;  // kNone unless this token ends the request
};

// Pointers into a MetricsRegistry for vLLM's metric names.
struct EngineMetrics;

// vLLM's sleep mode (POST /sleep, POST /wake_up). Asleep, the engine holds no KV cache
// (level 1 also moves the weights to CPU memory, level 2 discards them); waking takes the
// wake time the caller passes, then the engine serves again.
enum class SleepState { kAwake, kAsleep, kWaking };

class EngineCore {
 public:
  // `metrics` may be null (no metrics kept, as in fast simulations); else must outlive this.
  EngineCore(const SchedulerConfig& config, const StepTimeModel& time,
             const std::string& model_name, MetricsRegistry* metrics);
  ~EngineCore();

  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // Queues a request arriving at `now`. Fails (400) when it cannot ever fit, and (503) while
  // the engine is not awake at `now`.
  Result<void> AddRequest(std::unique_ptr<Request> request, double now);

  // Ends a request early (client gone, stop string matched); frees its blocks at once.
  // Unknown ids are ignored.
  void Finish(RequestId id, FinishReason reason, double now);

  bool HasWork() const { return scheduler_.HasWork(); }
  bool step_in_flight() const { return step_in_flight_; }

  // Schedules the next step at `now`; returns how long it takes (seconds).
  // REQUIRES: no step in flight.
  double BeginStep(double now);

  // Decides, for each token as it is produced, whether a stop string now ends its request
  // (vLLM's output processor checks stop strings before the length limit is reported).
  using StopCheck = std::function<bool(RequestId id, TokenId token)>;

  // Ends the step in flight at `now`: tokens produced, finished requests removed.
  // The span is valid until the next call.
  std::span<const TokenEvent> FinishStep(double now, const StopCheck& stop_check = nullptr);

  // Puts the engine to sleep at `now` at `level` (1 or 2), as vLLM's default sleep does: every
  // request queued or running is aborted (returned, in id order: their callers end them with
  // finish_reason "abort"), then the KV cache and its cached prefixes are freed. Sleeping
  // again, or while waking, keeps the deeper of the two levels.
  std::vector<RequestId> Sleep(int level, double now);

  // Starts waking at `now`, taking `wake_s` seconds; returns when the engine will be awake.
  // Awake already: `now`. Waking already: the wake in progress goes on.
  double WakeUp(double now, double wake_s);

  SleepState sleep_state(double now) const;
  // The level slept at (1 or 2) while asleep or waking; 0 when awake.
  int sleep_level(double now) const;

  // Brings the gauges (running, waiting, KV usage, sleep state) up to date, before a scrape.
  void UpdateGauges(double now);

  const Scheduler& scheduler() const { return scheduler_; }
  const StepTimeModel& time_model() const { return time_; }
  uint64_t num_steps() const { return num_steps_; }

 private:
  void RecordFinished(const Request& r, double now);

  Scheduler scheduler_;
  StepTimeModel time_;
  std::unique_ptr<EngineMetrics> metrics_;
  std::vector<TokenEvent> events_;
  bool step_in_flight_ = false;
  uint64_t num_steps_ = 0;
  int sleep_level_ = 0;  // 0: awake, or awake from awake_at_ on
  double awake_at_ = 0;  // when a wake in progress ends
};

// Histogram bounds vLLM uses, shared with the server's own histograms.
std::vector<double> RequestLatencyBuckets();

}  // namespace bmas::engine
