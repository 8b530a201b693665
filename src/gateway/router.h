#pragma once

// Backend choice for a request among the engines serving its model.
//
// Policies:
//   round_robin      rotate over the candidates.
//   least_load       fewest outstanding tokens, then fewer in flight, then fewer waiting in
//                    the engine, then lower KV usage; exact ties rotate.
//   prefix_affinity  consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam,
//                    "Consistent Hashing with Bounded Loads", SODA 2018): requests that
//                    share a prompt prefix go to the same engine, whose prefix cache then
//                    holds it, unless that engine is over its share of the load.
//   cache_aware      (the default) the engine whose prefix cache, as a PrefixCacheModel of
//                    the prompts sent to each engine predicts it, holds the longest prefix
//                    of the prompt, unless it is over its share of the load (as above); then
//                    the next longest; with no prefix cached anywhere, prefix_affinity's choice.
// Candidates are the healthy, non-draining backends.
//
// Pure and single-threaded: decisions come from the states passed in and what the router
// has recorded; a Router keeps its rotation cursor, a cached hash ring and, under
// cache_aware, the cache model. One instance per gateway, used under its lock.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "gateway/prefix_cache_model.h"

namespace bmas::gateway {

// What the gateway knows of one backend engine.
struct BackendState {
  std::string id;
  bool healthy = true;
  bool draining = false;
  int in_flight = 0;  // requests the gateway has sent and not seen finish
  int capacity = 0;   // admission limit; 0 = unknown
  int64_t outstanding_tokens = 0;
  int engine_waiting = 0;  // from the engine's metrics
  int engine_running = 0;
  double kv_usage = 0;  // 0..1
  // The engine's KV cache, from vllm:cache_config_info; 0 = unknown.
  int64_t num_gpu_blocks = 0;
  int64_t block_size = 0;  // tokens per block
};

enum class RoutingPolicy { kCacheAware, kPrefixAffinity, kLeastLoad, kRoundRobin };

// "cache_aware", "prefix_affinity", "least_load" or "round_robin"; kInvalidArgument names the
// allowed ones.
Result<RoutingPolicy> ParseRoutingPolicy(std::string_view name);
// The name ParseRoutingPolicy accepts for `policy`.
const char* RoutingPolicyName(RoutingPolicy policy);

// The key prefix_affinity routes by, from the leading bytes of the prompt text (the gateway
// cannot use the engine's tokenizer). It hashes (64-bit FNV-1a) the first
// b = min(max_blocks, len / block_bytes) full blocks of block_bytes bytes; nullopt when there
// is not one full block. Two prompts get the same key when they have the same b and the same
// first b * block_bytes bytes: prompts sharing a system prompt of at least
// max_blocks * block_bytes bytes always share keys; shorter shared prefixes are shared only by
// prompts of similar length (the same number of full blocks, up to max_blocks).
std::optional<uint64_t> PrefixKey(std::string_view prompt_text, size_t block_bytes = 256,
                                  size_t max_blocks = 8);

class Router {
 public:
  // load_bound (c >= 1): under prefix_affinity no candidate takes a request that would put
  // it above ceil(c * (total in flight + 1) / candidates). virtual_nodes: ring points per
  // backend; the spread of keys over n backends has a relative standard deviation of about
  // 1 / sqrt(virtual_nodes).
  // Without load_bound: 1.25 under prefix_affinity; 2 under cache_aware, where a request sent
  // past its cached prefix costs a whole prefill and another copy of the prompt in a cache
  // (bench/RESULTS.md G4).
  explicit Router(RoutingPolicy policy, std::optional<double> load_bound = std::nullopt,
                  int virtual_nodes = 64);

  // The index in `backends` of the backend for a request, or nullopt when no backend is a
  // candidate. prefix_key: PrefixKey() of the prompt; nullopt (too short) means round-robin
  // under prefix_affinity. Under prefix_affinity the key goes to the first candidate
  // clockwise from it on a ring of the backends' ids (so adding or removing a backend moves
  // about 1/n of keys) with in_flight + 1 within the bound above and, if capacity > 0,
  // in_flight < capacity; if none qualifies, least_load picks. Cost: O(backends) to sum the
  // loads and compare ids with the cached ring, plus O(log ring) when the first candidate
  // qualifies; the ring is rebuilt only when the list of ids (in order) changes.
  //
  // Under cache_aware, blocks are PrefixBlockHashes() of the prompt and unhashed_blocks the
  // blocks of the prompt past them; the pick is recorded in the cache model as sent there.
  // Cost: O(candidates * matched blocks) hash lookups, plus O(blocks) to record.
  std::optional<size_t> Pick(std::span<const BackendState> backends,
                             std::optional<uint64_t> prefix_key,
                             std::span<const uint64_t> blocks = {}, size_t unhashed_blocks = 0);

  // Forgets what the cache model holds for `backend_id` (removed, draining or down).
  void Forget(std::string_view backend_id) { cache_.Forget(backend_id); }

  RoutingPolicy policy() const { return policy_; }
  const PrefixCacheModel& cache_model() const { return cache_; }

 private:
  struct RingPoint {
    uint64_t hash;
    size_t backend;  // index into the backends the ring was built for
  };

  std::optional<size_t> PickRoundRobin(std::span<const BackendState> backends);
  std::optional<size_t> PickLeastLoad(std::span<const BackendState> backends);
  std::optional<size_t> PickPrefix(std::span<const BackendState> backends, uint64_t key);
  std::optional<size_t> PickCacheAware(std::span<const BackendState> backends,
                                       std::optional<uint64_t> prefix_key,
                                       std::span<const uint64_t> blocks);
  // ceil(c * (total in flight + 1) / candidates), or nullopt with no candidate.
  std::optional<double> LoadBound(std::span<const BackendState> backends) const;
  bool Qualifies(const BackendState& b, double bound) const;
  // The first index at or after cursor_ (cyclically) for which pred holds; advances cursor_
  // past it.
  template <typename Pred>
  std::optional<size_t> Rotate(std::span<const BackendState> backends, Pred pred);
  void UpdateRing(std::span<const BackendState> backends);

  const RoutingPolicy policy_;
  const double load_bound_;
  const int virtual_nodes_;
  size_t cursor_ = 0;
  std::vector<std::string> ring_ids_;  // the ids the ring was built for, in order
  std::vector<RingPoint> ring_;        // sorted by hash
  std::vector<uint8_t> seen_;          // scratch for PickPrefix, one per backend
  PrefixCacheModel cache_;             // cache_aware only
};

}  // namespace bmas::gateway
