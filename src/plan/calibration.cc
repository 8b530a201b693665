#include "plan/calibration.h"

#include <cstdlib>
#include <sstream>

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

Calibrated LaunchDelayOf(double flag) {
  if (flag >= 0) return {flag, "--launch-delay"};
  return {kMeasuredLaunchDelayS,
          "bmas's default: sbatch to a job's first instruction on its local Slurm, measured "
          "(bench/RESULTS.md, Planner fidelity); --launch-delay for a cluster whose prolog does "
          "more"};
}

}  // namespace bmas::plan
