#include "engine/engine_core.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace bmas::engine {

std::vector<double> RequestLatencyBuckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
          240.0, 480.0, 960.0, 1920.0, 7680.0};
}

struct EngineMetrics {
  EngineMetrics(MetricsRegistry& r, const std::string& model) {
    std::string m = fmt::format("model_name=\"{}\"", EscapeLabelValue(model));
    running = &r.AddGauge("vllm:num_requests_running", "Number of requests in model execution batches.", m);
    waiting = &r.AddGauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", m);
    kv_usage = &r.AddGauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", m);
    gpu_cache_usage = &r.AddGauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage (older name of vllm:kv_cache_usage_perc).", m);
    prefix_queries = &r.AddCounter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", m);
    prefix_hits = &r.AddCounter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", m);
    preemptions = &r.AddCounter("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.", m);
    prompt_tokens = &r.AddCounter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", m);
    generation_tokens = &r.AddCounter("vllm:generation_tokens_total", "Number of generation tokens processed.", m);
    for (FinishReason reason : {FinishReason::kStop, FinishReason::kLength, FinishReason::kAbort}) {
      success[static_cast<int>(reason)] = &r.AddCounter(
          "vllm:request_success_total", "Count of successfully processed requests.",
          fmt::format("{},finished_reason=\"{}\"", m, FinishReasonName(reason)));
    }
    iteration_tokens = &r.AddHistogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", m,
                                       {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384});
    ttft = &r.AddHistogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m,
                           {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                            5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0});
    itl = &r.AddHistogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m,
                          {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                           0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0});
    e2e = &r.AddHistogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", m, RequestLatencyBuckets());
    queue = &r.AddHistogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", m, RequestLatencyBuckets());
    prefill = &r.AddHistogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", m, RequestLatencyBuckets());
    decode = &r.AddHistogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", m, RequestLatencyBuckets());
    request_prompt = &r.AddHistogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", m,
                                     {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000});
    // As vLLM's: 1 on the series of the state the engine is in, 0 on the others.
    for (const char* state : {"awake", "weights_offloaded", "discard_all"}) {
      sleep_state.push_back(&r.AddGauge(
          "vllm:engine_sleep_state",
          "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
          "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
          fmt::format("{},sleep_state=\"{}\"", m, state)));
    }
    request_generation = &r.AddHistogram("vllm:request_generation_tokens", "Number of generation tokens processed.", m,
                                         {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000});
  }

  Gauge* running;
  Gauge* waiting;
  Gauge* kv_usage;
  Gauge* gpu_cache_usage;
  Counter* prefix_queries;
  Counter* prefix_hits;
  Counter* preemptions;
  Counter* prompt_tokens;
  Counter* generation_tokens;
  Counter* success[4] = {};
  Histogram* iteration_tokens;
  Histogram* ttft;
  Histogram* itl;
  Histogram* e2e;
  Histogram* queue;
  Histogram* prefill;
  Histogram* decode;
  Histogram* request_prompt;
  Histogram* request_generation;
  std::vector<Gauge*> sleep_state;  // awake, weights_offloaded (level 1), discard_all (level 2)
};

EngineCore::EngineCore(const SchedulerConfig& config, const StepTimeModel& time,
                       const std::string& model_name, MetricsRegistry* metrics)
    : scheduler_(config), time_(time) {
  if (metrics != nullptr) metrics_ = std::make_unique<EngineMetrics>(*metrics, model_name);
}

EngineCore::~EngineCore() = default;

Result<void> EngineCore::AddRequest(std::unique_ptr<Request> request, double now) {
  if (const int level = sleep_level(now); level != 0) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("The engine is sleeping (sleep level {}): it serves again once POST "
                             "/wake_up has woken it",
                             level),
                 {}};
  }
  request->arrival_time = now;
  return scheduler_.Add(std::move(request));
}

void EngineCore::Finish(RequestId id, FinishReason reason, double now) {
  std::unique_ptr<Request> r = scheduler_.Remove(id, reason);
  if (r != nullptr) RecordFinished(*r, now);
}

double EngineCore::BeginStep(double now) {
  assert(!step_in_flight_);
  const StepBatch& batch = scheduler_.Schedule(now);
  step_in_flight_ = true;
  ++num_steps_;
  if (metrics_ != nullptr) {
    metrics_->preemptions->Inc(batch.num_preemptions);
    metrics_->prefix_queries->Inc(static_cast<double>(batch.prefix_queries));
    metrics_->prefix_hits->Inc(static_cast<double>(batch.prefix_hits));
    metrics_->iteration_tokens->Observe(batch.num_decode_tokens + batch.num_prefill_tokens);
  }
  return time_.StepSeconds(batch.num_decode_tokens, batch.num_prefill_tokens,
                           batch.num_context_tokens);
}

std::span<const TokenEvent> EngineCore::FinishStep(double now, const StopCheck& stop_check) {
  assert(step_in_flight_);
  step_in_flight_ = false;
  events_.clear();
  const std::vector<Request*>& produced = scheduler_.Complete(now);
  for (Request* r : produced) {
    if (stop_check && stop_check(r->id, r->tokens.back())) r->finish_reason = FinishReason::kStop;
    events_.push_back(TokenEvent{r->id, r->tokens.back(), r->num_prompt_tokens,
                                 r->num_output_tokens(), r->num_cached_tokens, r->finish_reason});
    if (metrics_ == nullptr) continue;
    metrics_->generation_tokens->Inc();
    if (r->num_output_tokens() == 1) {
      metrics_->prompt_tokens->Inc(r->num_prompt_tokens);
      metrics_->ttft->Observe(now - r->arrival_time);
      metrics_->queue->Observe(r->scheduled_time - r->arrival_time);
    } else {
      metrics_->itl->Observe(now - r->prev_token_time);
    }
  }
  for (const TokenEvent& e : events_) {
    if (e.finish_reason != FinishReason::kNone) Finish(e.id, e.finish_reason, now);
  }
  return events_;
}

void EngineCore::RecordFinished(const Request& r, double now) {
  if (metrics_ == nullptr) return;
  metrics_->success[static_cast<int>(r.finish_reason)]->Inc();
  metrics_->e2e->Observe(now - r.arrival_time);
  metrics_->request_prompt->Observe(r.num_prompt_tokens);
  metrics_->request_generation->Observe(r.num_output_tokens());
  if (r.scheduled_time >= 0) {
    double first = r.first_token_time >= 0 ? r.first_token_time : now;
    metrics_->prefill->Observe(first - r.scheduled_time);
    metrics_->decode->Observe(r.first_token_time >= 0 ? now - r.first_token_time : 0);
  } else {
    metrics_->queue->Observe(now - r.arrival_time);
  }
}

std::vector<RequestId> EngineCore::Sleep(int level, double now) {
  assert(level == 1 || level == 2);
  std::vector<RequestId> aborted = scheduler_.RequestIds();
  for (RequestId id : aborted) Finish(id, FinishReason::kAbort, now);
  const bool freed = scheduler_.ResetPrefixCache();
  assert(freed);
  (void)freed;
  sleep_level_ = std::max(sleep_level(now), level);
  awake_at_ = std::numeric_limits<double>::infinity();
  return aborted;
}

double EngineCore::WakeUp(double now, double wake_s) {
  switch (sleep_state(now)) {
    case SleepState::kAwake:
      sleep_level_ = 0;
      return now;
    case SleepState::kWaking:
      return awake_at_;
    case SleepState::kAsleep:
      awake_at_ = now + wake_s;
      return awake_at_;
  }
  return now;
}

SleepState EngineCore::sleep_state(double now) const {
  if (sleep_level_ == 0 || now >= awake_at_) return SleepState::kAwake;
  return std::isinf(awake_at_) ? SleepState::kAsleep : SleepState::kWaking;
}

int EngineCore::sleep_level(double now) const {
  return sleep_state(now) == SleepState::kAwake ? 0 : sleep_level_;
}

void EngineCore::UpdateGauges(double now) {
  if (metrics_ == nullptr) return;
  const int level = sleep_level(now);
  for (int i = 0; i < 3; ++i) metrics_->sleep_state[i]->Set(level == i ? 1 : 0);
  metrics_->running->Set(scheduler_.num_running());
  metrics_->waiting->Set(scheduler_.num_waiting());
  metrics_->kv_usage->Set(scheduler_.kv().Usage());
  metrics_->gpu_cache_usage->Set(scheduler_.kv().Usage());
}

}  // namespace bmas::engine
