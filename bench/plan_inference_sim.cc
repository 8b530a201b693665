// The inference half of `bmas plan` driven by a benchmark's load instead of cohorts: a closed
// loop (N clients, each sending its next request when the last ends) or an open loop (Poisson
// arrivals), every request with the same prompt and output lengths, one user, on a fixed number
// of replicas of one profile. Prints TTFT and throughput as JSON, for
// bench/plan_inference_fidelity.py to set against the real gateway and engines.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/timing.h"
#include "plan/inference_sim.h"
#include "plan/scenario.h"
#include "plan/workload.h"

namespace {

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(std::max(1.0, std::ceil(q * v.size()))) - 1;
  return v[std::min(k, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bmas plan's inference simulation under a benchmark's load"};
  std::string profile_name = "llama-3.1-8b-h100";
  int replicas = 2, prompt_tokens = 128, output_tokens = 128, concurrency = 0, per_client = 1,
      requests = 0;
  double rate = 0, ramp_up = 0, duration = 0;
  uint64_t seed = 1;
  app.add_option("--profile", profile_name);
  app.add_option("--replicas", replicas);
  app.add_option("--prompt-tokens", prompt_tokens);
  app.add_option("--output-tokens", output_tokens);
  app.add_option("--concurrency", concurrency, "closed loop: clients");
  app.add_option("--requests-per-client", per_client);
  app.add_option("--ramp-up", ramp_up,
                 "closed loop: clients start evenly over this; requests sent in it are not counted "
                 "(as bmas_loadgen's)");
  app.add_option("--duration", duration, "closed loop: send for this long after the ramp-up");
  app.add_option("--rate", rate, "open loop: Poisson arrivals per second");
  app.add_option("--requests", requests, "open loop: how many");
  app.add_option("--seed", seed);
  CLI11_PARSE(app, argc, argv);

  const bmas::engine::Profile& profile = bmas::engine::BuiltinProfiles().at(profile_name);
  bmas::plan::Scenario s;
  s.engine.profile = profile_name;
  bmas::plan::Cohort c;
  c.name = "bench";
  c.count = 1;
  c.inference.prompt_tokens = prompt_tokens;
  c.inference.output_tokens = output_tokens;
  c.inference.length_spread = 0;
  c.inference.system_prompt_tokens = 0;
  c.inference.carry_history = false;
  c.inference.think_time_s = 0;
  s.cohorts.push_back(c);
  s.policies.autoscale.min_replicas = replicas;
  s.policies.autoscale.max_replicas = replicas;
  s.policies.autoscale.max_in_flight_per_replica = profile.max_num_seqs;  // as the gateway learns
  s.policies.queue_timeout_s = 3600;

  // Replicas are up before the load starts, as in the real run.
  const double start = profile.startup_s + 10;
  std::vector<bmas::plan::SessionPlan> sessions;
  bmas::plan::Rng rng(seed);
  if (concurrency > 0) {
    for (int i = 0; i < concurrency; ++i) {
      sessions.push_back({.start = start + ramp_up * i / concurrency, .cohort = 0, .member = 1,
                          .requests = duration > 0 ? 1 << 30 : per_client, .seed = rng.Next()});
    }
  } else {
    double t = start;
    for (int i = 0; i < requests; ++i) {
      sessions.push_back({.start = t, .cohort = 0, .member = 1, .requests = 1, .seed = rng.Next()});
      t += rng.Exponential(1 / rate);
    }
  }
  const bmas::plan::InferenceResult r = bmas::plan::RunInference(
      s, profile, sessions, {{0, 0}},
      {.launch_delay_s = 0,
       .horizon_s = start + 86400,
       .stop_sending_s = duration > 0 ? start + ramp_up + duration
                                      : std::numeric_limits<double>::infinity()});
  // As bmas_loadgen counts: requests sent after the ramp-up; the duration from the first start
  // to the last end.
  std::vector<double> ttft;
  double first = 1e300, last = 0;
  int64_t tokens = 0, failed = 0;
  for (const bmas::plan::RequestRecord& q : r.requests) {
    first = std::min(first, q.sent);
    if (q.failed) {
      ++failed;
      continue;
    }
    last = std::max(last, q.sent + q.e2e);
    if (q.sent < start + ramp_up) continue;
    ttft.push_back(q.ttft);
    tokens += q.output_tokens;
  }
  double mean = 0;
  for (double x : ttft) mean += x;
  mean = ttft.empty() ? 0 : mean / ttft.size();
  fmt::print(
      "{{\"requests\": {}, \"failed\": {}, \"ttft_mean_s\": {:.6f}, \"ttft_p50_s\": {:.6f}, "
      "\"ttft_p95_s\": {:.6f}, \"output_tokens\": {}, \"duration_s\": {:.6f}, "
      "\"output_tokens_per_s\": {:.3f}}}\n",
      ttft.size(), failed, mean, Quantile(ttft, 0.5), Quantile(ttft, 0.95), tokens,
      last - first, last > first ? tokens / (last - first) : 0.0);
  return 0;
}
