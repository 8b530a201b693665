#include "engine/calibrate.h"

#include <algorithm>
#include <cmath>
#include <deque>

#include "engine/engine_core.h"

namespace bmas::engine {

ClosedLoopResult RunClosedLoop(const SchedulerConfig& config, const StepTimeModel& time,
                               const ClosedLoopOptions& options) {
  EngineCore core(config, time, "calibration", nullptr);
  RequestId next_id = 1;
  double now = 0;
  double sum_itl = 0, sum_ttft = 0;
  uint64_t finished = 0, output_tokens = 0;
  std::vector<int> remaining(options.concurrency, options.requests_per_client);
  std::vector<int> client_of;  // by request id
  client_of.push_back(-1);

  // Requests on their way to the scheduler (frontend_s after they were sent).
  struct InFlight {
    double enter_time;
    std::unique_ptr<Request> request;
  };
  std::deque<InFlight> entering;
  std::vector<double> arrival(1, 0), first_token(1, -1);
  auto submit = [&](int client) {
    auto r = std::make_unique<Request>();
    r->id = next_id++;
    r->seed = r->id;
    r->tokens.reserve(options.prompt_tokens + options.output_tokens);
    for (int i = 0; i < options.prompt_tokens; ++i) {
      r->tokens.push_back(SampleToken(r->id * 7919, static_cast<uint64_t>(i)));
    }
    r->num_prompt_tokens = options.prompt_tokens;
    r->max_tokens = options.output_tokens;
    client_of.push_back(client);
    arrival.push_back(now);
    first_token.push_back(-1);
    --remaining[client];
    entering.push_back({now + time.frontend_s, std::move(r)});
  };
  for (int c = 0; c < options.concurrency; ++c) submit(c);

  std::vector<int> resubmit;
  while (core.HasWork() || !entering.empty()) {
    if (!core.HasWork() && entering.front().enter_time > now) now = entering.front().enter_time;
    while (!entering.empty() && entering.front().enter_time <= now) {
      (void)core.AddRequest(std::move(entering.front().request), now);
      entering.pop_front();
    }
    double duration = core.BeginStep(now);
    now += duration;
    auto events = core.FinishStep(now);
    resubmit.clear();
    for (const TokenEvent& e : events) {
      ++output_tokens;
      if (e.num_output_tokens == 1) first_token[e.id] = now;
      if (e.finish_reason == FinishReason::kNone) continue;
      double ttft = first_token[e.id] - arrival[e.id];
      double e2e = now - arrival[e.id];
      sum_ttft += ttft;
      if (e.num_output_tokens > 1) sum_itl += (e2e - ttft) / (e.num_output_tokens - 1);
      ++finished;
      int client = client_of[e.id];
      if (remaining[client] > 0) resubmit.push_back(client);
    }
    for (int client : resubmit) submit(client);
  }

  ClosedLoopResult result;
  result.concurrency = options.concurrency;
  result.steps = core.num_steps();
  result.output_tokens = output_tokens;
  result.duration_s = now;
  if (finished > 0) {
    result.mean_itl_s = sum_itl / finished;
    result.mean_ttft_s = sum_ttft / finished;
  }
  result.output_tokens_per_s = now > 0 ? output_tokens / now : 0;
  return result;
}

const std::vector<ReferencePoint>& LlamaH100Reference() {
  static const std::vector<ReferencePoint>* ref = new std::vector<ReferencePoint>{
      {1, 4.63e-3, 10e-3, 215},  {25, 5.19e-3, {}, {}},  {50, 5.91e-3, {}, {}},
      {100, 7.57e-3, {}, {}},    {150, 9.81e-3, {}, {}}, {200, 12.65e-3, {}, 13300},
      {250, 16.14e-3, 606e-3, {}},
  };
  return *ref;
}

std::vector<CalibrationRow> Calibrate(const SchedulerConfig& config, const StepTimeModel& time,
                                      const std::vector<ReferencePoint>& reference,
                                      const ClosedLoopOptions& scenario) {
  std::vector<CalibrationRow> rows;
  for (const ReferencePoint& p : reference) {
    ClosedLoopOptions options = scenario;
    options.concurrency = p.concurrency;
    rows.push_back({p, RunClosedLoop(config, time, options)});
  }
  return rows;
}

double WorstRelativeError(const std::vector<CalibrationRow>& rows) {
  double worst = 0;
  for (const CalibrationRow& row : rows) {
    worst = std::max(worst, std::fabs(row.model.mean_itl_s / row.reference.itl_s - 1));
    if (row.reference.ttft_s) {
      worst = std::max(worst, std::fabs(row.model.mean_ttft_s / *row.reference.ttft_s - 1));
    }
  }
  return worst;
}

StepTimeModel FitStepTimeModel(const SchedulerConfig& config, const StepTimeModel& start,
                               const std::vector<ReferencePoint>& reference,
                               const ClosedLoopOptions& scenario) {
  StepTimeModel best = start;
  auto score = [&](const StepTimeModel& m) {
    return WorstRelativeError(Calibrate(config, m, reference, scenario));
  };
  double best_score = score(best);
  double* params[] = {&best.frontend_s, &best.base_s, &best.per_decode_token_s, &best.per_prefill_token_s,
                      &best.per_context_token_s};
  for (double step = 0.5; step > 0.002; step *= 0.6) {
    bool improved = true;
    while (improved) {
      improved = false;
      for (double* p : params) {
        for (double factor : {1 + step, 1 / (1 + step)}) {
          double saved = *p;
          *p = saved == 0 ? 1e-9 * factor : saved * factor;
          double s = score(best);
          if (s < best_score) {
            best_score = s;
            improved = true;
          } else {
            *p = saved;
          }
        }
      }
    }
  }
  return best;
}

}  // namespace bmas::engine
