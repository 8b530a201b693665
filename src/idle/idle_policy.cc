#include "idle/idle_policy.h"

#include <algorithm>

#include <fmt/format.h>

namespace bmas {
namespace {

bool Replica(const IdleSettings& s, const JobGpuSample& job) {
  return s.replica_owners.count(job.user) > 0 && s.replica_partitions.count(job.partition) > 0;
}

bool Policed(const IdleSettings& s, bool research_mode, const JobGpuSample& job) {
  return !research_mode && !Replica(s, job) && !job.gpus.empty() &&
         s.partitions.count(job.partition) > 0;
}

bool Idle(const IdleSettings& s, const GpuUse& gpu) {
  return !gpu.has_process || gpu.util_pct < s.threshold_pct;
}

std::string Minutes(int64_t seconds) { return fmt::format("{} min", seconds / 60); }

}  // namespace

std::vector<IdleAction> DecideIdle(const IdleSettings& settings, bool research_mode,
                                   const std::vector<JobGpuSample>& samples, int64_t now,
                                   IdleState& state) {
  std::vector<IdleAction> actions;
  std::map<int64_t, JobIdleState> kept;
  for (const JobGpuSample& job : samples) {
    JobIdleState s = state.jobs.count(job.job_id) > 0 ? state.jobs[job.job_id] : JobIdleState{};
    if (!Policed(settings, research_mode, job)) {
      kept[job.job_id] = JobIdleState{};  // exempt now: nothing counts towards later
      continue;
    }
    const bool idle = std::all_of(job.gpus.begin(), job.gpus.end(),
                                  [&](const GpuUse& g) { return Idle(settings, g); });
    const bool gap = s.last_sample >= 0 && now - s.last_sample > settings.max_sample_gap_s;
    s.last_sample = now;
    if (!idle) {
      s.idle_since = -1;
      s.warned = false;
    } else if (s.idle_since < 0 || gap) {
      s.idle_since = now;
      s.warned = false;
    }
    if (s.idle_since >= 0 && !s.cancelled) {
      const int64_t idle_for = now - s.idle_since;
      IdleAction a;
      a.job_id = job.job_id;
      a.user = job.user;
      a.idle_since = s.idle_since;
      a.cancel_at = s.idle_since + settings.cancel_after_s;
      a.gpus = static_cast<int>(job.gpus.size());
      a.wasted_gpu_hours = static_cast<double>(job.gpus.size()) * idle_for / 3600.0;
      if (idle_for >= settings.cancel_after_s) {
        a.kind = IdleAction::Kind::kCancel;
        a.reason = fmt::format("cancelled: its {} GPU(s) stayed under {}% utilisation for {} "
                               "(the {} partition's idle limit)",
                               job.gpus.size(), settings.threshold_pct, Minutes(idle_for),
                               job.partition);
        s.cancelled = true;
        actions.push_back(a);
      } else if (idle_for >= settings.warn_after_s && !s.warned) {
        a.kind = IdleAction::Kind::kWarn;
        a.reason = fmt::format("warning: its {} GPU(s) have been under {}% utilisation for {}; "
                               "it will be cancelled after {} idle unless they are used",
                               job.gpus.size(), settings.threshold_pct, Minutes(idle_for),
                               Minutes(settings.cancel_after_s));
        s.warned = true;
        actions.push_back(a);
      }
    }
    kept[job.job_id] = s;
  }
  state.jobs = std::move(kept);
  return actions;
}

}  // namespace bmas
