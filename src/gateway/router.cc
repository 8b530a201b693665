#include "gateway/router.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

namespace bmas::gateway {

namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t Fnv1a(std::string_view bytes, uint64_t hash = kFnvOffset) {
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= kFnvPrime;
  }
  return hash;
}

bool IsCandidate(const BackendState& b) { return b.healthy && !b.draining; }

auto LoadOrder(const BackendState& b) {
  return std::tie(b.outstanding_tokens, b.in_flight, b.engine_waiting, b.kv_usage);
}

}  // namespace

Result<RoutingPolicy> ParseRoutingPolicy(std::string_view name) {
  if (name == "cache_aware") return RoutingPolicy::kCacheAware;
  if (name == "prefix_affinity") return RoutingPolicy::kPrefixAffinity;
  if (name == "least_load") return RoutingPolicy::kLeastLoad;
  if (name == "round_robin") return RoutingPolicy::kRoundRobin;
  return InvalidArgument(
      fmt::format("unknown routing policy '{}'; expected cache_aware, prefix_affinity, "
                  "least_load or round_robin",
                  name),
      "routing_policy");
}

const char* RoutingPolicyName(RoutingPolicy policy) {
  switch (policy) {
    case RoutingPolicy::kCacheAware:
      return "cache_aware";
    case RoutingPolicy::kPrefixAffinity:
      return "prefix_affinity";
    case RoutingPolicy::kLeastLoad:
      return "least_load";
    case RoutingPolicy::kRoundRobin:
      return "round_robin";
  }
  return "unknown";
}

std::optional<uint64_t> PrefixKey(std::string_view prompt_text, size_t block_bytes,
                                  size_t max_blocks) {
  if (block_bytes == 0) return std::nullopt;
  const size_t blocks = std::min(max_blocks, prompt_text.size() / block_bytes);
  if (blocks == 0) return std::nullopt;
  return Fnv1a(prompt_text.substr(0, blocks * block_bytes));
}

Router::Router(RoutingPolicy policy, std::optional<double> load_bound, int virtual_nodes)
    : policy_(policy),
      load_bound_(std::max(1.0, load_bound.value_or(policy == RoutingPolicy::kCacheAware ? 2.0 : 1.25))),
      virtual_nodes_(std::max(1, virtual_nodes)) {}

std::optional<size_t> Router::Pick(std::span<const BackendState> backends,
                                   std::optional<uint64_t> prefix_key,
                                   std::span<const uint64_t> blocks, size_t unhashed_blocks) {
  switch (policy_) {
    case RoutingPolicy::kCacheAware: {
      auto pick = PickCacheAware(backends, prefix_key, blocks);
      if (pick) cache_.Record(backends[*pick].id, blocks, unhashed_blocks);
      return pick;
    }
    case RoutingPolicy::kRoundRobin:
      return PickRoundRobin(backends);
    case RoutingPolicy::kLeastLoad:
      return PickLeastLoad(backends);
    case RoutingPolicy::kPrefixAffinity:
      if (!prefix_key) return PickRoundRobin(backends);
      return PickPrefix(backends, *prefix_key);
  }
  return std::nullopt;
}

template <typename Pred>
std::optional<size_t> Router::Rotate(std::span<const BackendState> backends, Pred pred) {
  const size_t n = backends.size();
  for (size_t step = 0; step < n; ++step) {
    const size_t i = (cursor_ + step) % n;
    if (pred(backends[i])) {
      cursor_ = i + 1;
      return i;
    }
  }
  return std::nullopt;
}

std::optional<size_t> Router::PickRoundRobin(std::span<const BackendState> backends) {
  return Rotate(backends, IsCandidate);
}

std::optional<size_t> Router::PickLeastLoad(std::span<const BackendState> backends) {
  const BackendState* best = nullptr;
  for (const BackendState& b : backends) {
    if (IsCandidate(b) && (best == nullptr || LoadOrder(b) < LoadOrder(*best))) best = &b;
  }
  if (best == nullptr) return std::nullopt;
  return Rotate(backends, [best](const BackendState& b) {
    return IsCandidate(b) && LoadOrder(b) == LoadOrder(*best);
  });
}

std::optional<double> Router::LoadBound(std::span<const BackendState> backends) const {
  int64_t candidates = 0;
  int64_t total_in_flight = 0;
  for (const BackendState& b : backends) {
    if (!IsCandidate(b)) continue;
    ++candidates;
    total_in_flight += b.in_flight;
  }
  if (candidates == 0) return std::nullopt;
  return std::ceil(load_bound_ * static_cast<double>(total_in_flight + 1) / candidates);
}

bool Router::Qualifies(const BackendState& b, double bound) const {
  return IsCandidate(b) && b.in_flight + 1 <= bound &&
         (b.capacity <= 0 || b.in_flight < b.capacity);
}

std::optional<size_t> Router::PickCacheAware(std::span<const BackendState> backends,
                                             std::optional<uint64_t> prefix_key,
                                             std::span<const uint64_t> blocks) {
  const std::optional<double> bound = LoadBound(backends);
  if (!bound) return std::nullopt;
  // The longest cached prefix among the candidates within the bound; ties to the less loaded.
  std::optional<size_t> best;
  size_t best_blocks = 0;
  for (size_t i = 0; i < backends.size(); ++i) {
    const BackendState& b = backends[i];
    if (!IsCandidate(b)) continue;
    cache_.SetCapacity(b.id, CacheCapacityBlocks(b.num_gpu_blocks, b.block_size,
                                                 kDefaultCharsPerToken));
    if (!Qualifies(b, *bound)) continue;
    const size_t cached = cache_.CachedPrefix(b.id, blocks);
    if (cached == 0) continue;
    if (!best || cached > best_blocks ||
        (cached == best_blocks && LoadOrder(b) < LoadOrder(backends[*best]))) {
      best = i;
      best_blocks = cached;
    }
  }
  if (best) return best;
  if (prefix_key) return PickPrefix(backends, *prefix_key);
  return PickLeastLoad(backends);
}

std::optional<size_t> Router::PickPrefix(std::span<const BackendState> backends, uint64_t key) {
  const std::optional<double> bound = LoadBound(backends);
  if (!bound) return std::nullopt;
  auto qualifies = [&](const BackendState& b) { return Qualifies(b, *bound); };

  UpdateRing(backends);
  const uint64_t point = Mix64(key);
  auto first = std::lower_bound(ring_.begin(), ring_.end(), point,
                                [](const RingPoint& p, uint64_t h) { return p.hash < h; });
  const size_t start = first == ring_.end() ? 0 : static_cast<size_t>(first - ring_.begin());
  if (qualifies(backends[ring_[start].backend])) return ring_[start].backend;

  // Walk clockwise over the distinct backends that follow.
  seen_.assign(backends.size(), 0);
  size_t distinct = 0;
  for (size_t step = 0; step < ring_.size() && distinct < backends.size(); ++step) {
    const size_t index = ring_[(start + step) % ring_.size()].backend;
    if (seen_[index]) continue;
    seen_[index] = 1;
    ++distinct;
    if (qualifies(backends[index])) return index;
  }
  return PickLeastLoad(backends);
}

void Router::UpdateRing(std::span<const BackendState> backends) {
  const bool same =
      ring_ids_.size() == backends.size() &&
      std::equal(backends.begin(), backends.end(), ring_ids_.begin(),
                 [](const BackendState& b, const std::string& id) { return b.id == id; });
  if (same) return;
  ring_ids_.clear();
  ring_.clear();
  ring_.reserve(backends.size() * static_cast<size_t>(virtual_nodes_));
  for (size_t i = 0; i < backends.size(); ++i) {
    ring_ids_.push_back(backends[i].id);
    const uint64_t base = Fnv1a(backends[i].id);
    for (int v = 0; v < virtual_nodes_; ++v) {
      ring_.push_back(RingPoint{Mix64(base ^ Mix64(static_cast<uint64_t>(v) + 1)), i});
    }
  }
  std::sort(ring_.begin(), ring_.end(), [](const RingPoint& a, const RingPoint& b) {
    return a.hash < b.hash || (a.hash == b.hash && a.backend < b.backend);
  });
}

}  // namespace bmas::gateway
