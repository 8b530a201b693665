#include "dashboard/history.h"

#include <algorithm>

#include "dashboard/cluster_map.h"

namespace bmas::dashboard {

double QuantileBetween(const LatencyHistogram& before, const LatencyHistogram& after, double q) {
  if (after.counts.empty() || after.counts.size() != after.bounds.size() + 1) return -1;
  const bool same = before.bounds == after.bounds && before.count <= after.count;
  std::vector<uint64_t> delta(after.counts.size());
  uint64_t total = 0;
  for (size_t i = 0; i < delta.size(); ++i) {
    const uint64_t was = same && i < before.counts.size() ? before.counts[i] : 0;
    delta[i] = after.counts[i] >= was ? after.counts[i] - was : 0;
    total += delta[i];
  }
  if (total == 0) return -1;
  const double rank = q * static_cast<double>(total);
  uint64_t seen = 0;
  for (size_t i = 0; i < delta.size(); ++i) {
    if (delta[i] == 0 || static_cast<double>(seen + delta[i]) < rank) {
      seen += delta[i];
      continue;
    }
    // The +Inf bucket answers with the highest finite bound, as Prometheus does.
    if (i == after.bounds.size()) return after.bounds.empty() ? -1 : after.bounds.back();
    const double low = i == 0 ? 0 : after.bounds[i - 1];
    const double high = after.bounds[i];
    return low + (high - low) * (rank - static_cast<double>(seen)) / static_cast<double>(delta[i]);
  }
  return after.bounds.empty() ? -1 : after.bounds.back();
}

HistoryPoint MakeHistoryPoint(const ClusterState& s, const LatencyHistogram& previous_ttft) {
  HistoryPoint p;
  p.t = s.now;
  for (const NodeCell& n : BuildClusterMap(s)) {
    for (const GpuCell& g : n.gpus) {
      if (g.state == "training") ++p.gpus_training;
      else if (g.state == "inference") ++p.gpus_inference;
      else if (g.state == "idle") ++p.gpus_idle;
    }
  }
  for (const JobInfo& j : s.jobs) p.queue += j.state == JobState::kPending ? 1 : 0;
  for (const auto& [model, queued] : s.gateway.queued) p.queue += queued;
  p.ttft_p95_s = QuantileBetween(previous_ttft, s.gateway.ttft, 0.95);
  return p;
}

void AppendHistory(std::vector<HistoryPoint>& history, HistoryPoint p, size_t max_points) {
  history.push_back(p);
  if (history.size() > max_points) {
    history.erase(history.begin(), history.begin() + static_cast<ptrdiff_t>(history.size() - max_points));
  }
}

}  // namespace bmas::dashboard
