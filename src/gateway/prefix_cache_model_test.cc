#include "gateway/prefix_cache_model.h"

#include <gtest/gtest.h>

#include <list>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gateway/router.h"

namespace bmas::gateway {
namespace {

// A text of `blocks` full blocks whose bytes depend on `seed`.
std::string Text(int seed, size_t blocks) {
  std::string s;
  for (size_t i = 0; s.size() < blocks * kCacheBlockBytes; ++i) {
    s += "prompt " + std::to_string(seed) + " part " + std::to_string(i) + ". ";
  }
  s.resize(blocks * kCacheBlockBytes);
  return s;
}

TEST(PrefixBlockHashesTest, ChainsFullBlocks) {
  const std::string a = Text(1, 4);
  const auto h = PrefixBlockHashes(a);
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(PrefixBlockHashes(a + "short tail"), h);  // a partial block is not hashed
  EXPECT_EQ(PrefixBlockHashes(a, kCacheBlockBytes, 2), std::vector<uint64_t>(h.begin(), h.begin() + 2));
  // Same block 2 bytes after a different block 0: the chain makes hash 2 differ.
  std::string b = a;
  b[0] = b[0] == 'x' ? 'y' : 'x';
  const auto hb = PrefixBlockHashes(b);
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(hb[i], h[i]) << i;
  // A later change keeps the blocks before it.
  std::string c = a;
  c[2 * kCacheBlockBytes] ^= 1;
  const auto hc = PrefixBlockHashes(c);
  EXPECT_EQ(hc[0], h[0]);
  EXPECT_EQ(hc[1], h[1]);
  EXPECT_NE(hc[2], h[2]);
  EXPECT_TRUE(PrefixBlockHashes("").empty());
  EXPECT_TRUE(PrefixBlockHashes(a, 0).empty());
}

TEST(CacheCapacityBlocksTest, ConvertsTokensToByteBlocks) {
  // 640 blocks of 16 tokens at 4 characters a token, in 64-byte blocks.
  EXPECT_EQ(CacheCapacityBlocks(640, 16, 4.0), 640u);
  EXPECT_EQ(CacheCapacityBlocks(640, 16, 3.0), 480u);
  EXPECT_EQ(CacheCapacityBlocks(0, 16, 4.0), 0u);
  EXPECT_EQ(CacheCapacityBlocks(640, 0, 4.0), 0u);
  EXPECT_EQ(CacheCapacityBlocks(640, 16, 0.0), 0u);
}

TEST(PrefixCacheModelTest, CachedPrefixCountsLeadingBlocksOnly) {
  PrefixCacheModel model;
  const auto sent = PrefixBlockHashes(Text(1, 6));
  model.Record("a", sent, 0);
  EXPECT_EQ(model.CachedPrefix("a", sent), 6u);
  EXPECT_EQ(model.CachedPrefix("b", sent), 0u);  // a cold backend holds nothing
  // A prompt sharing the first three blocks, then going elsewhere.
  const auto other = PrefixBlockHashes(Text(1, 3) + Text(2, 5));
  EXPECT_EQ(model.CachedPrefix("a", other), 3u);
  EXPECT_EQ(model.CachedPrefix("a", PrefixBlockHashes(Text(3, 6))), 0u);
}

TEST(PrefixCacheModelTest, EvictsLeastRecentlyUsedAtCapacity) {
  PrefixCacheModel model;
  model.SetCapacity("a", 10);
  const auto p1 = PrefixBlockHashes(Text(1, 4));
  const auto p2 = PrefixBlockHashes(Text(2, 4));
  const auto p3 = PrefixBlockHashes(Text(3, 4));
  model.Record("a", p1, 0);
  model.Record("a", p2, 0);
  model.Record("a", p1, 0);  // p1 is used again: p2 is now the oldest
  model.Record("a", p3, 0);  // 12 blocks > 10: two of p2's go, tail first
  EXPECT_EQ(model.BlocksOf("a"), 10u);
  EXPECT_EQ(model.CachedPrefix("a", p1), 4u);
  EXPECT_EQ(model.CachedPrefix("a", p3), 4u);
  EXPECT_EQ(model.CachedPrefix("a", p2), 2u);
  // Blocks no prompt shares take room too.
  model.Record("a", p3, 6);
  EXPECT_EQ(model.CachedPrefix("a", p3), 4u);
  EXPECT_EQ(model.CachedPrefix("a", p2), 0u);
  EXPECT_EQ(model.BlocksOf("a"), 10u);
  // A smaller capacity evicts at once.
  model.SetCapacity("a", 3);
  EXPECT_EQ(model.BlocksOf("a"), 3u);
  EXPECT_EQ(model.CachedPrefix("a", p3), 3u);
  EXPECT_EQ(model.total_blocks(), 3u);
}

// A full cache makes room as it records, block by block: what it holds must still be the
// capacity's most recently recorded blocks of a plain LRU, whatever order the records came in.
TEST(PrefixCacheModelTest, AFullCacheHoldsTheMostRecentlyRecordedBlocks) {
  std::mt19937_64 rng(7);
  for (const size_t capacity : {1u, 2u, 5u, 16u}) {
    PrefixCacheModel model;
    model.SetCapacity("a", capacity);
    std::list<uint64_t> reference;  // most recently used first, unbounded
    for (int step = 0; step < 400; ++step) {
      // Blocks from a small pool, so that many are recorded again while held.
      std::vector<uint64_t> blocks(rng() % (capacity + 3));
      for (uint64_t& b : blocks) b = rng() % (3 * capacity + 2);
      model.Record("a", blocks, 0);
      const size_t kept = std::min(blocks.size(), capacity);  // what Record may keep
      for (size_t i = kept; i > 0; --i) {
        reference.remove(blocks[i - 1]);
        reference.push_front(blocks[i - 1]);
      }
      while (reference.size() > capacity) reference.pop_back();
      ASSERT_EQ(model.BlocksOf("a"), reference.size()) << capacity << " " << step;
      ASSERT_EQ(model.total_blocks(), reference.size());
      for (uint64_t b : reference) {
        ASSERT_EQ(model.CachedPrefix("a", std::span<const uint64_t>(&b, 1)), 1u)
            << capacity << " " << step << " " << b;
      }
    }
  }
}

TEST(PrefixCacheModelTest, ForgottenBackendComesBackCold) {
  PrefixCacheModel model;
  const auto p = PrefixBlockHashes(Text(1, 4));
  model.Record("a", p, 2);
  model.Record("b", p, 0);
  EXPECT_EQ(model.total_blocks(), 10u);
  model.Forget("a");
  EXPECT_EQ(model.CachedPrefix("a", p), 0u);
  EXPECT_EQ(model.BlocksOf("a"), 0u);
  EXPECT_EQ(model.total_blocks(), 4u);
  EXPECT_EQ(model.CachedPrefix("b", p), 4u);
  model.Forget("never-seen");
  EXPECT_EQ(model.backends(), 1u);
}

TEST(PrefixCacheModelTest, GlobalBoundSharesTheBlocksOut) {
  PrefixCacheModel model(/*max_total_blocks=*/12, /*default_capacity=*/100);
  model.Record("a", PrefixBlockHashes(Text(1, 10)), 0);
  EXPECT_EQ(model.BlocksOf("a"), 10u);
  model.Record("b", PrefixBlockHashes(Text(2, 10)), 0);  // two backends: six each
  EXPECT_EQ(model.BlocksOf("a"), 6u);
  EXPECT_EQ(model.BlocksOf("b"), 6u);
  model.Record("c", PrefixBlockHashes(Text(3, 10)), 5);
  EXPECT_LE(model.total_blocks(), 12u);
}

// The router over the model.

std::vector<BackendState> Engines(int n) {
  std::vector<BackendState> backends(n);
  for (int i = 0; i < n; ++i) {
    backends[i].id = "engine-" + std::to_string(i);
    backends[i].num_gpu_blocks = 640;  // 640 modelled blocks each
    backends[i].block_size = 16;
  }
  return backends;
}

TEST(CacheAwareRouterTest, LongestCachedPrefixWins) {
  Router router(RoutingPolicy::kCacheAware, /*load_bound=*/4.0);  // loads here stay within it
  auto backends = Engines(3);
  const std::string system = Text(7, 20);
  // Place a 10-block prefix on one engine and the full 20 blocks on another by hand.
  const auto full = PrefixBlockHashes(system + Text(8, 2));
  auto first = router.Pick(backends, std::nullopt, std::span(full).first(10), 0);
  ASSERT_TRUE(first);
  backends[*first].in_flight = 1;
  // The same 10 blocks again: the engine that has them, though it is busier.
  EXPECT_EQ(router.Pick(backends, std::nullopt, std::span(full).first(10), 0), first);
  // Record the whole prompt on another engine.
  const size_t other = (*first + 1) % 3;
  backends[*first].healthy = false;
  EXPECT_EQ(router.Pick(backends, std::nullopt, full, 0), other);
  backends[*first].healthy = true;
  backends[other].in_flight = 1;
  // 22 blocks cached beat 10.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(router.Pick(backends, std::nullopt, full, 0), other);
  EXPECT_EQ(router.cache_model().CachedPrefix(backends[other].id, full), 22u);
}

TEST(CacheAwareRouterTest, LoadBoundOverridesTheCache) {
  Router router(RoutingPolicy::kCacheAware, 1.25);
  auto backends = Engines(4);
  const auto p = PrefixBlockHashes(Text(1, 10));
  const size_t home = *router.Pick(backends, 5, p, 0);
  // home at 3 in flight, others 0: bound ceil(1.25 * 4 / 4) = 2, so home is over it.
  backends[home].in_flight = 3;
  const auto moved = router.Pick(backends, 5, p, 0);
  ASSERT_TRUE(moved);
  EXPECT_NE(*moved, home);
  // Now two engines hold it. Home at 1 in flight is still over the bound (now 1): the copy.
  backends[home].in_flight = 1;
  backends[*moved].in_flight = 0;
  EXPECT_EQ(router.Pick(backends, 5, p, 0), moved);
  // The copy over the bound (2), home within it.
  backends[*moved].in_flight = 2;
  EXPECT_EQ(router.Pick(backends, 5, p, 0), home);
  // A backend at its own capacity takes nothing.
  for (auto& b : backends) b.in_flight = 0;
  backends[home].capacity = 1;
  backends[home].in_flight = 1;
  backends[*moved].healthy = false;
  const auto third = router.Pick(backends, 5, p, 0);
  ASSERT_TRUE(third);
  EXPECT_NE(*third, home);
}

TEST(CacheAwareRouterTest, NothingCachedFallsBackToTheHashRing) {
  Router cache(RoutingPolicy::kCacheAware);
  Router ring(RoutingPolicy::kPrefixAffinity);
  auto backends = Engines(4);
  for (uint64_t key = 0; key < 16; ++key) {
    const auto p = PrefixBlockHashes(Text(static_cast<int>(key), 3));
    EXPECT_EQ(cache.Pick(backends, key, p, 0), ring.Pick(backends, key)) << key;
  }
}

TEST(CacheAwareRouterTest, NewReplicaStartsColdAndForgottenOneComesBackCold) {
  Router router(RoutingPolicy::kCacheAware);
  auto backends = Engines(2);
  const auto p = PrefixBlockHashes(Text(1, 8));
  const size_t home = *router.Pick(backends, 1, p, 0);
  // A third engine joins: the prompt stays where it is cached.
  backends.push_back(Engines(3)[2]);
  EXPECT_EQ(router.cache_model().CachedPrefix(backends[2].id, p), 0u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(router.Pick(backends, 1, p, 0), home);
  // Its engine drains and comes back: the model forgot it, so the ring decides again.
  router.Forget(backends[home].id);
  EXPECT_EQ(router.cache_model().CachedPrefix(backends[home].id, p), 0u);
  Router fresh(RoutingPolicy::kPrefixAffinity);
  EXPECT_EQ(router.Pick(backends, 1, p, 0), fresh.Pick(backends, 1));
}

TEST(CacheAwareRouterTest, IsDeterministic) {
  auto run = [] {
    Router router(RoutingPolicy::kCacheAware);
    auto backends = Engines(4);
    std::vector<size_t> picks;
    for (int i = 0; i < 400; ++i) {
      const int prompt = (i * 7) % 16;
      const auto p = PrefixBlockHashes(Text(prompt, 90) + Text(1000 + i, 2));
      for (size_t b = 0; b < backends.size(); ++b) backends[b].in_flight = (i + b) % 3;
      picks.push_back(*router.Pick(backends, static_cast<uint64_t>(prompt), p, 2));
    }
    return picks;
  };
  EXPECT_EQ(run(), run());
}

}  // namespace
}  // namespace bmas::gateway
