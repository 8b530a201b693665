#include "plan/workload.h"

#include <algorithm>
#include <cmath>

namespace bmas::plan {
namespace {

// Where each cohort's activity changes: windows start and end on the hour grid at most every
// minute, so one-minute segments are exact for the windows bmas reads (hours with fractions of
// a minute are rounded into the minute they start in).
constexpr double kSegment = 60;

// Seeds for separate streams, so that adding a cohort's jobs does not shift its sessions.
uint64_t StreamSeed(uint64_t seed, uint64_t stream) {
  Rng r(seed ^ (0x9e3779b97f4a7c15ULL * (stream + 1)));
  return r.Next();
}

}  // namespace

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

double Rng::Exponential(double mean) { return -mean * std::log1p(-Uniform()); }

int Rng::Poisson(double mean) {
  if (mean <= 0) return 0;
  if (mean > 50) {  // normal approximation: exact enough for counts this large
    return std::max(0, static_cast<int>(std::lround(mean + std::sqrt(mean) * Normal())));
  }
  const double limit = std::exp(-mean);
  double p = Uniform();
  int k = 0;
  while (p > limit) {
    p *= Uniform();
    ++k;
  }
  return k;
}

double Rng::Normal() {
  // Box-Muller; one of the pair is dropped for simplicity.
  const double u = 1 - Uniform();
  const double v = Uniform();
  return std::sqrt(-2 * std::log(u)) * std::cos(2 * M_PI * v);
}

int Rng::UniformInt(int lo, int hi) {
  return lo + static_cast<int>(Next() % static_cast<uint64_t>(hi - lo + 1));
}

int Rng::AroundMean(int mean, double spread) {
  if (mean <= 1) return 1;
  const int delta = static_cast<int>(mean * spread);
  if (delta == 0) return mean;
  return std::max(1, UniformInt(mean - delta, mean + delta));
}

double ActiveFraction(const Cohort& cohort, double t) {
  double f = 0;
  for (const ActivityWindow& w : cohort.hours) {
    if (w.window.Contains(t)) f = std::max(f, w.active_fraction);
  }
  return f;
}

std::vector<SimJob> GenerateJobs(const Scenario& scenario, std::vector<int>& cohort_of) {
  const double horizon = scenario.simulation.days * 86400;
  struct Drawn {
    SimJob job;
    int cohort;
  };
  std::vector<Drawn> drawn;
  for (size_t c = 0; c < scenario.cohorts.size(); ++c) {
    const Cohort& cohort = scenario.cohorts[c];
    const TrainingBehaviour& tb = cohort.training;
    if (tb.jobs_per_week <= 0) continue;
    // The rate follows the activity; normalise it so that a week brings jobs_per_week per
    // member on average.
    double active_seconds = 0;  // member-seconds at work per week, per member
    for (double t = 0; t < kWeekSeconds; t += kSegment) active_seconds += ActiveFraction(cohort, t) * kSegment;
    if (active_seconds <= 0) continue;
    const double per_active_second = tb.jobs_per_week / active_seconds;  // per member
    const double sigma = std::log(tb.duration_p90_s / tb.duration_median_s) / 1.2815515655446004;
    Rng rng(StreamSeed(scenario.simulation.seed, 2 * c));
    for (double t = 0; t < horizon; t += kSegment) {
      const double f = ActiveFraction(cohort, t);
      if (f <= 0) continue;
      const int n = rng.Poisson(f * cohort.count * per_active_second * kSegment);
      for (int i = 0; i < n; ++i) {
        SimJob job;
        job.submit = TimePoint{t + rng.Uniform() * kSegment};
        job.user = MemberName(cohort.name, rng.UniformInt(1, cohort.count));
        job.partition = tb.partition;
        double pick = rng.Uniform();
        job.gpus = tb.gpus_per_job.back().gpus;
        job.mig_profile = tb.gpus_per_job.back().mig_profile;
        job.slice_duration_factor = tb.gpus_per_job.back().mig_duration_factor;
        for (const GpuShare& s : tb.gpus_per_job) {
          if (pick < s.share) {
            job.gpus = s.gpus;
            job.mig_profile = s.mig_profile;
            job.slice_duration_factor = s.mig_duration_factor;
            break;
          }
          pick -= s.share;
        }
        double d = tb.duration_median_s * std::exp(sigma * rng.Normal());
        if (tb.time_limit_s > 0) d = std::min(d, tb.time_limit_s);  // Slurm ends it there
        job.duration = Duration{std::max(1.0, std::round(d))};
        job.time_limit = Duration{tb.time_limit_s > 0 ? tb.time_limit_s : 0};
        drawn.push_back({std::move(job), static_cast<int>(c)});
      }
    }
  }
  std::stable_sort(drawn.begin(), drawn.end(),
                   [](const Drawn& a, const Drawn& b) { return a.job.submit < b.job.submit; });
  std::vector<SimJob> jobs;
  jobs.reserve(drawn.size());
  cohort_of.clear();
  for (Drawn& d : drawn) {
    d.job.id = static_cast<int64_t>(jobs.size()) + 1;
    cohort_of.push_back(d.cohort);
    jobs.push_back(std::move(d.job));
  }
  return jobs;
}

std::vector<SessionPlan> GenerateSessions(const Scenario& scenario) {
  const double horizon = scenario.simulation.days * 86400;
  std::vector<SessionPlan> sessions;
  for (size_t c = 0; c < scenario.cohorts.size(); ++c) {
    const Cohort& cohort = scenario.cohorts[c];
    const InferenceBehaviour& ib = cohort.inference;
    if (ib.sessions_per_hour <= 0) continue;
    Rng rng(StreamSeed(scenario.simulation.seed, 2 * c + 1));
    for (double t = 0; t < horizon; t += kSegment) {
      const double at_work = std::round(ActiveFraction(cohort, t) * cohort.count);
      if (at_work <= 0) continue;
      const int n = rng.Poisson(at_work * ib.sessions_per_hour / 3600 * kSegment);
      for (int i = 0; i < n; ++i) {
        SessionPlan s;
        s.start = t + rng.Uniform() * kSegment;
        s.cohort = static_cast<int>(c);
        s.member = rng.UniformInt(1, cohort.count);
        s.requests = 1 + rng.Poisson(std::max(0.0, ib.requests_per_session - 1));
        s.seed = rng.Next();
        sessions.push_back(s);
      }
    }
  }
  std::stable_sort(sessions.begin(), sessions.end(),
                   [](const SessionPlan& a, const SessionPlan& b) { return a.start < b.start; });
  return sessions;
}

}  // namespace bmas::plan
