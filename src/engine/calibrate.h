#pragma once

// Calibration of a profile's step-time model against reference figures, in virtual time.
//
// The scenario (the reference table does not give its sequence lengths, so this is what bmas
// assumes): `concurrency` clients start together and each sends its next request the moment
// the previous one ends, `requests_per_client` times (default 1: one burst of `concurrency`
// requests, as `vllm bench serve --max-concurrency N` sends N prompts at an infinite rate);
// every prompt is `prompt_tokens` distinct random tokens and every request asks for
// `output_tokens` tokens. ITL is per request (e2e - TTFT) / (output_tokens - 1), then
// averaged; TTFT is averaged; throughput is all output tokens over the run's length.

#include <optional>
#include <vector>

#include "engine/scheduler.h"
#include "engine/timing.h"

namespace bmas::engine {

struct ClosedLoopOptions {
  int concurrency = 1;
  int prompt_tokens = 128;
  int output_tokens = 128;
  int requests_per_client = 1;
};

struct ClosedLoopResult {
  int concurrency = 0;
  double mean_itl_s = 0;
  double mean_ttft_s = 0;
  double output_tokens_per_s = 0;
  uint64_t output_tokens = 0;
  uint64_t steps = 0;
  double duration_s = 0;  // virtual
};

ClosedLoopResult RunClosedLoop(const SchedulerConfig& config, const StepTimeModel& time,
                               const ClosedLoopOptions& options);

struct ReferencePoint {
  int concurrency;
  double itl_s;
  std::optional<double> ttft_s;
  std::optional<double> output_tokens_per_s;
};

// Llama-3.1-8B on one H100 (NVIDIA NIM tables; shared/reference/vllm-behaviour.md).
const std::vector<ReferencePoint>& LlamaH100Reference();

struct CalibrationRow {
  ReferencePoint reference;
  ClosedLoopResult model;
};

std::vector<CalibrationRow> Calibrate(const SchedulerConfig& config, const StepTimeModel& time,
                                      const std::vector<ReferencePoint>& reference,
                                      const ClosedLoopOptions& scenario = {});

// Largest relative error of ITL and TTFT (where the reference has it) over the rows.
double WorstRelativeError(const std::vector<CalibrationRow>& rows);

// Searches the step-time model's four coefficients, starting from `start`, for the smallest
// worst relative error against `reference`. Takes a few seconds of CPU.
StepTimeModel FitStepTimeModel(const SchedulerConfig& config, const StepTimeModel& start,
                               const std::vector<ReferencePoint>& reference,
                               const ClosedLoopOptions& scenario = {});

}  // namespace bmas::engine
