#include "core/mig_relayout.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/mig.h"

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

// Serves the waiting requests from `offer`, oldest first: a request of k slices takes k of its
// profile from one GPU, or waits on. Returns the slices served; with `take`, removes the
// requests served from `waiting`.
int Serve(std::map<std::string, int> offer, std::vector<PendingSlices>& waiting, bool take) {
  int served = 0;
  for (auto it = waiting.begin(); it != waiting.end();) {
    auto o = offer.find(it->profile);
    if (o != offer.end() && o->second >= it->count) {
      o->second -= it->count;
      served += it->count;
      if (take) {
        it = waiting.erase(it);
        continue;
      }
    }
    ++it;
  }
  return served;
}

}  // namespace

std::string LayoutText(const std::vector<std::string>& layout) {
  return layout.empty() ? std::string(kWholeGpu) : fmt::format("{}", fmt::join(layout, " + "));
}

Result<std::vector<std::string>> ParseLayoutText(std::string_view text) {
  auto trim = [](std::string_view t) {
    while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
    while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
    return t;
  };
  std::vector<std::string> layout;
  if (trim(text) == kWholeGpu) return layout;
  const auto bad = [&](std::string_view part) {
    return InvalidArgument(fmt::format(
        "'{}' in layout '{}' is not a MIG profile (\"1g.10gb\") or a count of one "
        "(\"7x1g.10gb\"); a layout is \"whole\" or profiles joined by '+'",
        part, text));
  };
  // Split at '+', then give a "me" back to the profile before it ("1g.10gb+me").
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t plus = text.find('+', start);
    const std::string_view part = trim(text.substr(start, plus - start));
    if (part == "me" && !parts.empty()) {
      parts.back() += "+me";
    } else {
      parts.emplace_back(part);
    }
    if (plus == std::string_view::npos) break;
    start = plus + 1;
  }
  for (std::string_view part : parts) {
    int count = 1;
    if (const size_t x = part.find('x'); x != std::string_view::npos) {
      count = 0;
      for (char c : part.substr(0, x)) {
        if (c < '0' || c > '9' || count > 7) return bad(part);
        count = count * 10 + (c - '0');
      }
      if (x == 0 || count == 0 || count > 7) return bad(part);
      part = part.substr(x + 1);
    }
    if (!IsMigProfileName(part)) return bad(part);
    for (int i = 0; i < count; ++i) layout.emplace_back(part);
  }
  return layout;
}

std::vector<RelayoutDecision> DecideRelayouts(const RelayoutSettings& settings,
                                              const RelayoutInput& input, int64_t now) {
  // Requests that waited long enough, oldest first.
  std::vector<PendingSlices> waiting;
  for (const PendingSlices& p : input.pending) {
    if (now - p.since < settings.min_wait_s || p.count <= 0) continue;
    // A re-partitionable GPU is a node of one GPU: a job of several whole GPUs never fits it.
    if (p.profile == kWholeGpu && p.count > 1) continue;
    waiting.push_back(p);
  }
  std::stable_sort(waiting.begin(), waiting.end(),
                   [](const PendingSlices& a, const PendingSlices& b) { return a.since < b.since; });
  // What is free elsewhere serves first; then idle GPUs that may not change yet, as they are.
  Serve(input.free_elsewhere, waiting, /*take=*/true);
  std::vector<const FlexGpu*> movable;
  for (const FlexGpu& g : input.gpus) {
    if (g.busy) continue;
    if (g.changed_at > 0 && now - g.changed_at < settings.hold_s) {
      Serve(Offer(g.layout), waiting, /*take=*/true);
    } else {
      movable.push_back(&g);
    }
  }
  std::stable_sort(movable.begin(), movable.end(), [](const FlexGpu* a, const FlexGpu* b) {
    return std::tie(a->changed_at, a->node, a->gpu) < std::tie(b->changed_at, b->node, b->gpu);
  });

  std::vector<RelayoutDecision> decisions;
  for (const FlexGpu* g : movable) {
    const int present = Serve(Offer(g->layout), waiting, /*take=*/false);
    const std::vector<std::string>* best = &g->layout;
    int best_served = present;
    for (const std::vector<std::string>& candidate : settings.candidates) {
      const int served = Serve(Offer(candidate), waiting, /*take=*/false);
      if (served > best_served ||
          (served == best_served && best != &g->layout && candidate.size() < best->size())) {
        best = &candidate;
        best_served = served;
      }
    }
    std::vector<PendingSlices> before = waiting;
    Serve(Offer(*best), waiting, /*take=*/true);
    if (best == &g->layout || *best == g->layout) continue;
    // What it serves, per profile, for the reason.
    std::map<std::string, std::pair<int, int64_t>> taken;  // profile -> (slices, longest wait)
    for (const PendingSlices& p : before) {
      const bool still = std::any_of(waiting.begin(), waiting.end(), [&](const PendingSlices& w) {
        return w.profile == p.profile && w.count == p.count && w.since == p.since;
      });
      if (still) continue;
      auto& t = taken[p.profile];
      t.first += p.count;
      t.second = std::max(t.second, now - p.since);
    }
    std::vector<std::string> parts;
    for (const auto& [profile, t] : taken) {
      parts.push_back(fmt::format("{} pending {} {} (waiting up to {} s)", t.first,
                                  profile == kWholeGpu ? "whole-GPU" : profile,
                                  t.first == 1 ? "request" : "requests", t.second));
    }
    decisions.push_back(RelayoutDecision{
        g->node, g->gpu, g->layout, *best,
        fmt::format("serves {}, which no free GPU or slice elsewhere does", fmt::join(parts, ", "))});
  }
  return decisions;
}

}  // namespace bmas
