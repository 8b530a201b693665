#include "dashboard/queue_reason.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "cli/job_reason.h"
#include "core/hostlist.h"
#include "dashboard/cluster_map.h"

namespace bmas::dashboard {
namespace {

// Reasons under which the job waits for GPUs to free up (and nothing else).
bool WaitsForGpus(const std::string& reason) {
  return reason == "Resources" || reason == "Priority" || reason == "None" || reason.empty() ||
         reason == "ReqNodeNotAvail";
}

int MaxGpusPerNode(const ClusterState& s) {
  int most = 0;
  for (const NodeInfo& n : s.nodes) most = std::max(most, n.gpus);
  return most;
}

std::string Minutes(int64_t seconds) {
  if (seconds < 60) return "less than a minute";
  const int64_t min = (seconds + 59) / 60;
  if (min < 120) return fmt::format("about {} min", min);
  return fmt::format("about {} h {} min", min / 60, min % 60);
}

}  // namespace

std::optional<int64_t> EstimateStartSeconds(const JobInfo& job, const ClusterState& s,
                                            int64_t now) {
  if (!WaitsForGpus(job.reason)) return std::nullopt;
  int free = 0;
  for (const NodeCell& n : BuildClusterMap(s)) {
    for (const GpuCell& g : n.gpus) free += g.state == "idle" ? 1 : 0;
  }
  int need = job.gpus;
  for (const JobInfo& other : s.jobs) {
    if (other.id == job.id || other.state != "PENDING" || other.partition != job.partition) {
      continue;
    }
    if (other.submit_time < job.submit_time ||
        (other.submit_time == job.submit_time && other.id < job.id)) {
      if (WaitsForGpus(other.reason)) need += other.gpus;
    }
  }
  if (free >= need) return 0;
  std::vector<std::pair<int64_t, int>> ends;  // (expected end, GPUs freed)
  for (const JobInfo& r : s.jobs) {
    if (r.state != "RUNNING" || r.gpus <= 0) continue;
    if (r.time_limit_minutes <= 0) {
      ends.emplace_back(INT64_MAX, r.gpus);
    } else {
      ends.emplace_back(r.start_time + int64_t{r.time_limit_minutes} * 60, r.gpus);
    }
  }
  std::sort(ends.begin(), ends.end());
  for (const auto& [end, gpus] : ends) {
    if (end == INT64_MAX) return std::nullopt;
    free += gpus;
    if (free >= need) return std::max<int64_t>(0, end - now);
  }
  return std::nullopt;  // more than the cluster frees: waits on research nodes or drains
}

std::string PendingExplanation(const JobInfo& job, const ClusterState& s, int64_t now) {
  std::string text = fmt::format("waiting for {} GPU{}", job.gpus, job.gpus == 1 ? "" : "s");
  const int per_node = MaxGpusPerNode(s);
  if (per_node > 0 && job.gpus > per_node) text += " on whole nodes";
  const std::string plain = PlainJobReason(job.reason);
  if (!plain.empty() && plain != "waiting for free GPUs") text += "; " + plain;
  if (s.mode.research && std::find(s.mode.users.begin(), s.mode.users.end(), job.user) ==
                             s.mode.users.end()) {
    text += fmt::format("; node{} {} {} reserved for research by {}",
                        s.mode.nodes.size() == 1 ? "" : "s", CompressHostlist(s.mode.nodes),
                        s.mode.nodes.size() == 1 ? "is" : "are", fmt::join(s.mode.users, ", "));
    if (!s.mode.start_time.empty()) text += " since " + s.mode.start_time;
    text += " (until lab mode)";
  }
  if (!WaitsForGpus(job.reason)) return text;
  const auto eta = EstimateStartSeconds(job, s, now);
  if (!eta) {
    text += "; no estimate: the GPUs it needs are held by jobs without a time limit, or reserved or drained";
  } else if (*eta == 0) {
    text += "; GPUs are free for it: it should start at the scheduler's next pass";
  } else {
    text += fmt::format("; {} (when running jobs reach their time limits)", Minutes(*eta));
  }
  return text;
}

}  // namespace bmas::dashboard
