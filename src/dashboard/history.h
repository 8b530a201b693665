#pragma once

// The plots' points: GPUs by path, queue length and the gateway's TTFT p95 at each refresh,
// kept for a bounded window. Pure.

#include <cstddef>
#include <vector>

#include "dashboard/state.h"

namespace bmas::dashboard {

// The q-quantile of what `after` observed since `before` (both cumulative over the gateway's
// life), interpolated within its bucket as Prometheus's histogram_quantile does; -1 when
// nothing was observed in between. A gateway that restarted (counts went down) counts from 0.
double QuantileBetween(const LatencyHistogram& before, const LatencyHistogram& after, double q);

// The point for `s` (taken at s.now); `previous_ttft` is the gateway's TTFT histogram at the
// previous refresh.
HistoryPoint MakeHistoryPoint(const ClusterState& s, const LatencyHistogram& previous_ttft);

// Appends `p`, dropping the oldest points beyond `max_points`.
void AppendHistory(std::vector<HistoryPoint>& history, HistoryPoint p, size_t max_points);

}  // namespace bmas::dashboard
