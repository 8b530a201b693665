#include "dashboard/queue_reason.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

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

std::string Minutes(int64_t seconds) {
  if (seconds < 60) return "less than a minute";
  const int64_t min = (seconds + 59) / 60;
  if (min < 120) return fmt::format("about {} min", min);
  return fmt::format("about {} h {} min", min / 60, min % 60);
}

}  // namespace

QueueOutlook::QueueOutlook(const ClusterState& s) : s_(s) {
  for (const NodeCell& n : BuildClusterMap(s)) {
    for (const GpuCell& g : n.gpus) free_ += g.state == "idle" ? 1 : 0;
  }
  for (const NodeInfo& n : s.nodes) max_gpus_per_node_ = std::max(max_gpus_per_node_, n.gpus);
  for (const JobInfo& j : s.jobs) {
    if (HoldsGpus(j.state) && j.gpus > 0) {
      ends_.emplace_back(j.time_limit_minutes <= 0
                             ? INT64_MAX
                             : j.start_time + int64_t{j.time_limit_minutes} * 60,
                         j.gpus);
    } else if (IsPending(j.state) && WaitsForGpus(j.reason)) {
      pending_[j.partition].push_back({{j.submit_time, j.id}, j.gpus});
    }
  }
  std::sort(ends_.begin(), ends_.end());
  for (auto& [partition, jobs] : pending_) {
    std::sort(jobs.begin(), jobs.end());
    int sum = 0;
    for (auto& [key, gpus] : jobs) gpus = sum += gpus;  // now: GPUs up to and with this job
  }
}

int QueueOutlook::GpusAhead(const JobInfo& job) const {
  auto it = pending_.find(job.partition);
  if (it == pending_.end()) return 0;
  const auto& jobs = it->second;
  // The first entry at or after the job: everything before it was submitted earlier.
  auto at = std::lower_bound(jobs.begin(), jobs.end(), std::pair{job.submit_time, job.id},
                             [](const auto& e, const auto& key) { return e.first < key; });
  return at == jobs.begin() ? 0 : std::prev(at)->second;
}

std::optional<int64_t> QueueOutlook::EstimateStartSeconds(const JobInfo& job, int64_t now) const {
  if (!WaitsForGpus(job.reason)) return std::nullopt;
  const int need = job.gpus + GpusAhead(job);
  int free = free_;
  if (free >= need) return 0;
  for (const auto& [end, gpus] : ends_) {
    if (end == INT64_MAX) return std::nullopt;
    free += gpus;
    if (free >= need) return std::max<int64_t>(0, end - now);
  }
  return std::nullopt;  // more than the cluster frees: waits on research nodes or drains
}

std::string QueueOutlook::Explain(const JobInfo& job, int64_t now) const {
  std::string text = fmt::format("waiting for {} GPU{}", job.gpus, job.gpus == 1 ? "" : "s");
  if (max_gpus_per_node_ > 0 && job.gpus > max_gpus_per_node_) text += " on whole nodes";
  const std::string plain = PlainJobReason(job.reason);
  if (!plain.empty() && plain != "waiting for free GPUs") text += "; " + plain;
  const slurm::Mode& mode = s_.mode;
  if (mode.research && std::find(mode.users.begin(), mode.users.end(), job.user) == mode.users.end()) {
    text += fmt::format("; node{} {} {} reserved for research by {}", mode.nodes.size() == 1 ? "" : "s",
                        CompressHostlist(mode.nodes), mode.nodes.size() == 1 ? "is" : "are",
                        fmt::join(mode.users, ", "));
    if (!mode.start_time.empty()) text += " since " + mode.start_time;
    text += " (until lab mode)";
  }
  if (!WaitsForGpus(job.reason)) return text;
  const auto eta = EstimateStartSeconds(job, now);
  if (!eta) {
    text += "; no estimate: the GPUs it needs are held by jobs without a time limit, or reserved, "
            "drained or down";
  } else if (*eta == 0) {
    text += "; GPUs are free for it: it should start at the scheduler's next pass";
  } else {
    text += fmt::format("; {} (when running jobs reach their time limits)", Minutes(*eta));
  }
  return text;
}

std::optional<int64_t> EstimateStartSeconds(const JobInfo& job, const ClusterState& s,
                                            int64_t now) {
  return QueueOutlook(s).EstimateStartSeconds(job, now);
}

std::string PendingExplanation(const JobInfo& job, const ClusterState& s, int64_t now) {
  return QueueOutlook(s).Explain(job, now);
}

}  // namespace bmas::dashboard
