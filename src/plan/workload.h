#pragma once

// What the scenario's cohorts do in a simulated week, drawn from a seed: the training jobs they
// submit and the chat sessions they open. Pure and deterministic: the same scenario and seed
// give the same workload on every machine (the draws use bmas's own generator and inverse
// transforms, not <random>'s distributions, whose algorithms the standard leaves open).
//
// How members are modelled:
//  - At time t, a cohort has round(active_fraction(t) x count) members at work, where
//    active_fraction is the largest share of its `hours` windows that contain t (0 outside).
//  - Sessions start as a Poisson process of rate (members at work) x sessions_per_hour, each
//    for a member drawn uniformly from the cohort; a session has 1 + Poisson(requests - 1)
//    requests, each sent an exponential think time (mean think_time_s) after the previous
//    answer ended.
//  - Jobs: each member submits jobs_per_week x days / 7 on average; the cohort's jobs arrive as
//    a Poisson process whose rate follows active_fraction(t); sizes by the GPU shares;
//    durations log-normal (median, p90).
// Prompt and output lengths are drawn uniformly within +-length_spread (50%) of their means.

#include <cstdint>
#include <string>
#include <vector>

#include "plan/scenario.h"
#include "plan/slurm_model.h"

namespace bmas::plan {

// splitmix64: small, fast, and the same sequence everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  double Uniform();                    // [0, 1)
  double Exponential(double mean);     // mean > 0
  int Poisson(double mean);            // mean >= 0
  double Normal();                     // standard
  int UniformInt(int lo, int hi);      // [lo, hi]
  // Uniform in [mean (1 - spread), mean (1 + spread)], at least 1; spread in [0, 1].
  int AroundMean(int mean, double spread = 0.5);

 private:
  uint64_t state_;
};

// The share of `cohort` at work at `t` (simulated seconds).
double ActiveFraction(const Cohort& cohort, double t);

// The cohorts' training jobs over `days`, in submission order, with ids from 1. `cohort_of`
// gets each job's cohort index.
std::vector<SimJob> GenerateJobs(const Scenario& scenario, std::vector<int>& cohort_of);

// One chat session.
struct SessionPlan {
  double start = 0;
  int cohort = 0;   // index in scenario.cohorts
  int member = 1;   // 1 .. count
  int requests = 1;
  uint64_t seed = 0;  // the session's own draws (think times, lengths)
};

// Every cohort's sessions over `days`, by start time.
std::vector<SessionPlan> GenerateSessions(const Scenario& scenario);

}  // namespace bmas::plan
