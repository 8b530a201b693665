#include "plan/calibration.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <sstream>
#include <utility>

#include <fmt/format.h>

namespace bmas::plan {

Calibrated BackfillIntervalOf(std::string_view slurm_conf, std::string_view where) {
  std::istringstream lines{std::string(slurm_conf)};
  for (std::string line; std::getline(lines, line);) {
    line = line.substr(0, line.find('#'));
    if (!line.starts_with("SchedulerParameters=")) continue;
    std::istringstream params(line.substr(line.find('=') + 1));
    for (std::string p; std::getline(params, p, ',');) {
      if (!p.starts_with("bf_interval=")) continue;
      const double v = std::atof(p.c_str() + 12);
      if (v > 0) return {v, fmt::format("{} SchedulerParameters {}", where, p)};
    }
  }
  return {30, fmt::format("Slurm's default: {} sets no bf_interval", where)};
}

Calibrated LaunchDelayOf(double flag, std::string_view why) {
  if (flag >= 0) return {flag, "--launch-delay"};
  return {kMeasuredLaunchDelayS,
          fmt::format("bmas's default{}: sbatch to a job's first instruction on its local Slurm, "
                      "measured (bench/RESULTS.md, Planner fidelity); --launch-delay for a "
                      "cluster whose prolog does more",
                      why.empty() ? std::string() : fmt::format(" ({})", why))};
}

namespace {

int64_t EligibleOf(const RecordedJob& j) { return j.eligible_s > 0 ? j.eligible_s : j.submit_s; }

// GPUs of the jobs running or pending at unix second `t`, as sums over sorted times.
class GpuDemand {
 public:
  explicit GpuDemand(const std::vector<RecordedJob>& jobs) {
    for (const RecordedJob& j : jobs) {
      if (j.eligible_s == 0 && j.start_s == 0) continue;  // pending, not yet eligible
      eligible_.push_back({EligibleOf(j), j.gpus});
      if (j.end_s > 0) ended_.push_back({std::max(j.end_s, EligibleOf(j)), j.gpus});
    }
    Accumulate(eligible_);
    Accumulate(ended_);
  }

  // Jobs eligible at or before `t` that had not ended before it: ends count as busy for their
  // whole second.
  int64_t At(int64_t t) const { return SumUpTo(eligible_, t) - SumUpTo(ended_, t - 1); }

 private:
  using Steps = std::vector<std::pair<int64_t, int64_t>>;  // time, then running sum of GPUs

  static void Accumulate(Steps& steps) {
    std::sort(steps.begin(), steps.end());
    for (size_t i = 1; i < steps.size(); ++i) steps[i].second += steps[i - 1].second;
  }

  static int64_t SumUpTo(const Steps& steps, int64_t t) {
    auto after = std::upper_bound(steps.begin(), steps.end(), t,
                                  [](int64_t v, const auto& s) { return v < s.first; });
    return after == steps.begin() ? 0 : std::prev(after)->second;
  }

  Steps eligible_, ended_;
};

}  // namespace

Calibrated LaunchDelayFromHistory(const JobHistory& history) {
  const GpuDemand demand(history.jobs);
  const double max_wait_s = history.backfill_interval_s + 2;
  int finished = 0, waited = 0;
  std::vector<int64_t> waits;
  for (const RecordedJob& j : history.jobs) {
    if (!j.allocated || j.start_s <= 0 || j.end_s <= 0 || j.start_s < EligibleOf(j)) continue;
    ++finished;
    const int64_t wait = j.start_s - EligibleOf(j);
    if (wait > max_wait_s || demand.At(EligibleOf(j)) > history.cluster_gpus) {
      ++waited;
      continue;
    }
    waits.push_back(wait);
  }
  const int n = static_cast<int>(waits.size());
  if (n < kMinLaunchJobs) {
    return LaunchDelayOf(
        -1, fmt::format("{}: {} finished job{} started on free GPUs, of {}; {} needed",
                        history.where, n, n == 1 ? "" : "s", finished, kMinLaunchJobs));
  }
  double sum = 0;
  for (int64_t w : waits) sum += static_cast<double>(w);
  const double seen = sum / n;
  return {seen + kUnseenLaunchS,
          fmt::format("{}: {} finished jobs that started on free GPUs ({} more waited for GPUs "
                      "or limits), mean eligible-to-start {:.2f} s, plus {:g} s that Slurm's "
                      "records do not see (allocation to first instruction: prolog, launch; "
                      "measured on bmas's local Slurm)",
                      history.where, n, waited, seen, kUnseenLaunchS)};
}

}  // namespace bmas::plan
