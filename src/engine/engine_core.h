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

class EngineCore {
 public:
  // `metrics` may be null (no metrics kept, as in fast simulations); else must outlive this.
  EngineCore(const SchedulerConfig& config, const StepTimeModel& time,
             const std::string& model_name, MetricsRegistry* metrics);
  ~EngineCore();

  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // Queues a request arriving at `now`. Fails (400) when it cannot ever fit.
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

  // Brings the gauges (running, waiting, KV usage) up to date, before a scrape.
  void UpdateGauges();

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
};

// Histogram bounds vLLM uses, shared with the server's own histograms.
std::vector<double> RequestLatencyBuckets();

}  // namespace bmas::engine
