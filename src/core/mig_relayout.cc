#include "core/mig_relayout.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace bmas {
namespace {

// What a layout offers: instances per profile; a whole GPU is one kWholeGpu.
std::map<std::string, int> Offer(const std::vector<std::string>& layout) {
  std::map<std::string, int> offer;
  if (layout.empty()) {
    offer[kWholeGpu] = 1;
    return offer;
  }
  for (const std::string& p : layout) ++offer[p];
  return offer;
}

// How much of `unmet` the layout serves.
int Serves(const std::vector<std::string>& layout, const std::map<std::string, int>& unmet) {
  int served = 0;
  for (const auto& [profile, n] : Offer(layout)) {
    const auto it = unmet.find(profile);
    if (it != unmet.end()) served += std::min(n, it->second);
  }
  return served;
}

// Takes what the layout serves out of `unmet`; returns what it served, per profile.
std::map<std::string, int> Take(const std::vector<std::string>& layout,
                                std::map<std::string, int>& unmet) {
  std::map<std::string, int> taken;
  for (const auto& [profile, n] : Offer(layout)) {
    auto it = unmet.find(profile);
    if (it == unmet.end() || it->second == 0) continue;
    const int k = std::min(n, it->second);
    it->second -= k;
    taken[profile] = k;
  }
  return taken;
}

}  // namespace

std::string LayoutText(const std::vector<std::string>& layout) {
  return layout.empty() ? std::string(kWholeGpu) : fmt::format("{}", fmt::join(layout, " + "));
}

std::vector<RelayoutDecision> DecideRelayouts(const RelayoutSettings& settings,
                                              const RelayoutInput& input, int64_t now) {
  // Demand that waited long enough, per profile, and how long its oldest has waited.
  std::map<std::string, int> unmet;
  std::map<std::string, int64_t> waited;
  for (const PendingSlices& p : input.pending) {
    const int64_t wait = now - p.since;
    if (wait < settings.min_wait_s || p.count <= 0) continue;
    // A re-partitionable GPU is a node of one GPU: a job of several whole GPUs never fits it.
    if (p.profile == kWholeGpu && p.count > 1) continue;
    unmet[p.profile] += p.count;
    waited[p.profile] = std::max(waited[p.profile], wait);
  }
  for (const auto& [profile, free] : input.free_elsewhere) {
    if (auto it = unmet.find(profile); it != unmet.end()) it->second = std::max(0, it->second - free);
  }
  // Idle GPUs that may not change yet serve with what they have.
  std::vector<const FlexGpu*> movable;
  for (const FlexGpu& g : input.gpus) {
    if (g.busy) continue;
    const bool held = g.changed_at > 0 && now - g.changed_at < settings.hold_s;
    if (held) {
      Take(g.layout, unmet);
    } else {
      movable.push_back(&g);
    }
  }
  std::stable_sort(movable.begin(), movable.end(), [](const FlexGpu* a, const FlexGpu* b) {
    return std::tie(a->changed_at, a->node, a->gpu) < std::tie(b->changed_at, b->node, b->gpu);
  });

  std::vector<RelayoutDecision> decisions;
  for (const FlexGpu* g : movable) {
    const int present = Serves(g->layout, unmet);
    const std::vector<std::string>* best = &g->layout;
    int best_served = present;
    for (const std::vector<std::string>& candidate : settings.candidates) {
      const int served = Serves(candidate, unmet);
      if (served > best_served ||
          (served == best_served && best != &g->layout && candidate.size() < best->size())) {
        best = &candidate;
        best_served = served;
      }
    }
    const std::map<std::string, int> taken = Take(*best, unmet);
    if (best == &g->layout || *best == g->layout) continue;
    std::vector<std::string> parts;
    for (const auto& [profile, n] : taken) {
      parts.push_back(fmt::format("{} pending {} {} (waiting up to {} s)", n,
                                  profile == kWholeGpu ? "whole-GPU" : profile,
                                  n == 1 ? "request" : "requests", waited[profile]));
    }
    decisions.push_back(RelayoutDecision{
        g->node, g->gpu, g->layout, *best,
        fmt::format("serves {}, which no free GPU or slice elsewhere does", fmt::join(parts, ", "))});
  }
  return decisions;
}

}  // namespace bmas
