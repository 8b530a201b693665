#include "engine/kv_cache.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace bmas::engine {
namespace {

constexpr int kBlockSize = 16;

// `n` distinct tokens starting at `first`.
std::vector<TokenId> Tokens(int n, TokenId first) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Allocates, computes and registers all of `tokens` in a fresh table, as a finished prefill.
BlockTable Compute(KvCacheManager& kv, const std::vector<TokenId>& tokens) {
  BlockTable table;
  kv.UpdateHashes(table, tokens);
  EXPECT_TRUE(kv.Allocate(table, {}, static_cast<int64_t>(tokens.size())));
  kv.CacheComputedBlocks(table, static_cast<int64_t>(tokens.size()));
  return table;
}

// Number of leading blocks of `tokens` found in the cache.
size_t Hits(const KvCacheManager& kv, const std::vector<TokenId>& tokens) {
  BlockTable table;
  kv.UpdateHashes(table, tokens);
  return kv.FindCachedPrefix(table, 1000).size();
}

struct AllocCase {
  int64_t tokens;
  size_t blocks;
};

class KvAllocateTest : public testing::TestWithParam<AllocCase> {};

TEST_P(KvAllocateTest, TakesEnoughBlocksForTheTokens) {
  KvCacheManager kv(10, kBlockSize, true);
  BlockTable table;
  ASSERT_TRUE(kv.Allocate(table, {}, GetParam().tokens));
  EXPECT_EQ(table.blocks.size(), GetParam().blocks);
  EXPECT_EQ(kv.num_free_blocks(), 10 - static_cast<int>(GetParam().blocks));
}

INSTANTIATE_TEST_SUITE_P(Counts, KvAllocateTest,
                         testing::Values(AllocCase{0, 0}, AllocCase{1, 1}, AllocCase{16, 1},
                                         AllocCase{17, 2}, AllocCase{32, 2}, AllocCase{33, 3},
                                         AllocCase{160, 10}));

TEST(KvCacheTest, AllocateGrowsATableAndNeverShrinksIt) {
  KvCacheManager kv(10, kBlockSize, true);
  BlockTable table;
  ASSERT_TRUE(kv.Allocate(table, {}, 16));
  ASSERT_TRUE(kv.Allocate(table, {}, 17));
  EXPECT_EQ(table.blocks.size(), 2u);
  ASSERT_TRUE(kv.Allocate(table, {}, 5));
  EXPECT_EQ(table.blocks.size(), 2u);
  EXPECT_EQ(kv.num_free_blocks(), 8);
}

TEST(KvCacheTest, FailedAllocateChangesNothing) {
  KvCacheManager kv(4, kBlockSize, true);
  BlockTable a;
  ASSERT_TRUE(kv.Allocate(a, {}, 48));  // 3 of 4 blocks
  const std::vector<BlockId> a_blocks = a.blocks;

  BlockTable b;
  EXPECT_FALSE(kv.Allocate(b, {}, 32));
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_FALSE(kv.Allocate(a, {}, 80));  // growing by 2 when 1 is free
  EXPECT_EQ(a.blocks, a_blocks);
  EXPECT_EQ(kv.num_free_blocks(), 1);
  EXPECT_TRUE(kv.Allocate(b, {}, 16));  // the last block is still there
}

TEST(KvCacheTest, FailedAllocateWithAHitLeavesCachedBlocksFindable) {
  KvCacheManager kv(4, kBlockSize, true);
  const std::vector<TokenId> prompt = Tokens(32, 1);
  BlockTable a = Compute(kv, prompt);
  kv.Free(a);
  ASSERT_EQ(kv.num_free_blocks(), 4);

  BlockTable b;
  kv.UpdateHashes(b, prompt);
  std::vector<BlockId> hit = kv.FindCachedPrefix(b, 10);
  ASSERT_EQ(hit.size(), 2u);
  // 2 cached (free) blocks + 3 new ones > 4: the cached ones count against the free blocks.
  EXPECT_FALSE(kv.Allocate(b, hit, 80));
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(kv.num_free_blocks(), 4);
  EXPECT_EQ(Hits(kv, prompt), 2u);

  EXPECT_TRUE(kv.Allocate(b, hit, 64));
  EXPECT_EQ(kv.num_free_blocks(), 0);
}

TEST(KvCacheTest, FreeReturnsEveryBlock) {
  KvCacheManager kv(8, kBlockSize, true);
  BlockTable a = Compute(kv, Tokens(40, 1));
  EXPECT_EQ(kv.num_free_blocks(), 5);
  kv.Free(a);
  EXPECT_EQ(kv.num_free_blocks(), 8);
  EXPECT_TRUE(a.blocks.empty());
  EXPECT_EQ(a.num_cached_blocks, 0u);
}

TEST(KvCacheTest, UpdateHashesCoversOnlyFullBlocks) {
  KvCacheManager kv(8, kBlockSize, true);
  BlockTable table;
  std::vector<TokenId> tokens = Tokens(40, 1);
  kv.UpdateHashes(table, tokens);
  ASSERT_EQ(table.hashes.size(), 2u);
  EXPECT_EQ(table.hashes[0], HashBlock(0, std::span(tokens).subspan(0, 16)));
  EXPECT_EQ(table.hashes[1], HashBlock(table.hashes[0], std::span(tokens).subspan(16, 16)));
  tokens.resize(48, 5);
  kv.UpdateHashes(table, tokens);
  EXPECT_EQ(table.hashes.size(), 3u);
}

TEST(KvCacheTest, FreedComputedBlocksAreFoundAgain) {
  KvCacheManager kv(8, kBlockSize, true);
  const std::vector<TokenId> prompt = Tokens(40, 1);
  BlockTable a = Compute(kv, prompt);
  const std::vector<BlockId> a_blocks = a.blocks;
  kv.Free(a);

  BlockTable b;
  kv.UpdateHashes(b, prompt);
  std::vector<BlockId> hit = kv.FindCachedPrefix(b, 10);
  // Two full blocks; the partial third one is never cached.
  ASSERT_EQ(hit, (std::vector<BlockId>{a_blocks[0], a_blocks[1]}));
  ASSERT_TRUE(kv.Allocate(b, hit, 40));
  EXPECT_EQ(b.blocks.size(), 3u);
  EXPECT_EQ(b.blocks[0], a_blocks[0]);
  EXPECT_EQ(b.blocks[1], a_blocks[1]);
  EXPECT_EQ(b.num_cached_blocks, 2u);
  EXPECT_EQ(kv.num_free_blocks(), 5);
}

TEST(KvCacheTest, ResetPrefixCacheForgetsFreedPrefixes) {
  KvCacheManager kv(16, kBlockSize, true);
  const std::vector<TokenId> prompt = Tokens(64, 1);
  BlockTable table = Compute(kv, prompt);
  EXPECT_FALSE(kv.ResetPrefixCache()) << "blocks in use";
  EXPECT_EQ(Hits(kv, prompt), 4u) << "a failed reset forgets nothing";
  kv.Free(table);
  EXPECT_TRUE(kv.ResetPrefixCache());
  EXPECT_EQ(Hits(kv, prompt), 0u);
  EXPECT_EQ(kv.num_free_blocks(), 16);
  // The blocks serve as new ones, and cache again.
  BlockTable again = Compute(kv, prompt);
  kv.Free(again);
  EXPECT_EQ(Hits(kv, prompt), 4u);
}

TEST(KvCacheTest, OnlyComputedBlocksAreCached) {
  KvCacheManager kv(8, kBlockSize, true);
  const std::vector<TokenId> prompt = Tokens(48, 1);
  BlockTable a;
  kv.UpdateHashes(a, prompt);
  ASSERT_TRUE(kv.Allocate(a, {}, 48));
  kv.CacheComputedBlocks(a, 20);  // a chunk: one full block computed
  EXPECT_EQ(Hits(kv, prompt), 1u);
}

TEST(KvCacheTest, FindCachedPrefixStopsAtMaxBlocks) {
  KvCacheManager kv(8, kBlockSize, true);
  const std::vector<TokenId> prompt = Tokens(48, 1);
  BlockTable a = Compute(kv, prompt);
  BlockTable b;
  kv.UpdateHashes(b, prompt);
  EXPECT_EQ(kv.FindCachedPrefix(b, 2).size(), 2u);
  EXPECT_EQ(kv.FindCachedPrefix(b, 0).size(), 0u);
}

TEST(KvCacheTest, FindCachedPrefixStopsAtTheFirstMiss) {
  KvCacheManager kv(8, kBlockSize, true);
  BlockTable a = Compute(kv, Tokens(48, 1));
  BlockTable b;
  b.hashes = {a.hashes[0], a.hashes[1] ^ 1, a.hashes[2]};  // block 2 is cached, 1 is not
  EXPECT_EQ(kv.FindCachedPrefix(b, 10), std::vector<BlockId>{a.blocks[0]});
}

TEST(KvCacheTest, SameBlockAfterADifferentPrefixDoesNotHit) {
  KvCacheManager kv(8, kBlockSize, true);
  const std::vector<TokenId> shared = Tokens(16, 500);
  const std::vector<TokenId> p1 = Tokens(16, 1);
  const std::vector<TokenId> p2 = Tokens(16, 100);

  EXPECT_NE(HashBlock(0, shared), HashBlock(HashBlock(0, p1), shared));
  BlockTable a = Compute(kv, Concat(p1, shared));  // caches [p1] and [p1, shared]
  BlockTable b = Compute(kv, p2);                  // caches [p2]
  EXPECT_NE(a.hashes[1], [&] {
    BlockTable t;
    kv.UpdateHashes(t, Concat(p2, shared));
    return t.hashes[1];
  }());
  // [p2, shared]: block 0 hits, block 1 must not, although its tokens are cached after p1.
  EXPECT_EQ(Hits(kv, Concat(p2, shared)), 1u);
  EXPECT_EQ(Hits(kv, Concat(p1, shared)), 2u);
}

struct LruCase {
  std::string name;
  bool free_a_first;
  bool a_survives;
};

class KvLruTest : public testing::TestWithParam<LruCase> {};

TEST_P(KvLruTest, LeastRecentlyFreedCachedBlockIsEvictedFirst) {
  KvCacheManager kv(2, kBlockSize, true);
  const std::vector<TokenId> a_tokens = Tokens(16, 1);
  const std::vector<TokenId> b_tokens = Tokens(16, 100);
  BlockTable a = Compute(kv, a_tokens);
  BlockTable b = Compute(kv, b_tokens);
  if (GetParam().free_a_first) {
    kv.Free(a);
    kv.Free(b);
  } else {
    kv.Free(b);
    kv.Free(a);
  }
  BlockTable c;
  ASSERT_TRUE(kv.Allocate(c, {}, 16));  // evicts one
  EXPECT_EQ(Hits(kv, a_tokens), GetParam().a_survives ? 1u : 0u);
  EXPECT_EQ(Hits(kv, b_tokens), GetParam().a_survives ? 0u : 1u);
}

INSTANTIATE_TEST_SUITE_P(Orders, KvLruTest,
                         testing::Values(LruCase{"AFreedFirst", true, false},
                                         LruCase{"BFreedFirst", false, true}),
                         [](const testing::TestParamInfo<LruCase>& info) {
                           return info.param.name;
                         });

TEST(KvCacheTest, ReusingACachedBlockMakesItMostRecent) {
  KvCacheManager kv(2, kBlockSize, true);
  const std::vector<TokenId> a_tokens = Tokens(16, 1);
  const std::vector<TokenId> b_tokens = Tokens(16, 100);
  BlockTable a = Compute(kv, a_tokens);
  BlockTable b = Compute(kv, b_tokens);
  kv.Free(a);
  kv.Free(b);
  // A hit on a's block takes it out of the free queue; freed again, it goes behind b's.
  BlockTable d;
  kv.UpdateHashes(d, a_tokens);
  std::vector<BlockId> hit = kv.FindCachedPrefix(d, 1);
  ASSERT_EQ(hit.size(), 1u);
  ASSERT_TRUE(kv.Allocate(d, hit, 16));
  kv.Free(d);
  BlockTable c;
  ASSERT_TRUE(kv.Allocate(c, {}, 16));
  EXPECT_EQ(Hits(kv, a_tokens), 1u);
  EXPECT_EQ(Hits(kv, b_tokens), 0u);
}

TEST(KvCacheTest, ARequestsLastBlocksAreEvictedBeforeItsPrefix) {
  KvCacheManager kv(2, kBlockSize, true);
  const std::vector<TokenId> prompt = Tokens(32, 1);
  BlockTable a = Compute(kv, prompt);
  kv.Free(a);
  BlockTable c;
  ASSERT_TRUE(kv.Allocate(c, {}, 16));
  EXPECT_EQ(Hits(kv, prompt), 1u);
}

TEST(KvCacheTest, SharedCachedBlocksAreReferenceCounted) {
  KvCacheManager kv(8, kBlockSize, true);
  const std::vector<TokenId> prompt = Tokens(32, 1);
  BlockTable a = Compute(kv, prompt);  // holds 2 blocks
  ASSERT_EQ(kv.num_free_blocks(), 6);

  BlockTable b;
  kv.UpdateHashes(b, Concat(prompt, Tokens(8, 900)));
  std::vector<BlockId> hit = kv.FindCachedPrefix(b, 10);
  ASSERT_EQ(hit, a.blocks);
  ASSERT_TRUE(kv.Allocate(b, hit, 40));  // shares 2, takes 1 new
  EXPECT_EQ(kv.num_free_blocks(), 5);

  kv.Free(a);  // b still holds the shared blocks
  EXPECT_EQ(kv.num_free_blocks(), 5);
  // The shared blocks cannot be evicted while b holds them.
  BlockTable filler;
  EXPECT_FALSE(kv.Allocate(filler, {}, 16 * 6));
  ASSERT_TRUE(kv.Allocate(filler, {}, 16 * 5));
  kv.Free(filler);
  EXPECT_EQ(Hits(kv, prompt), 2u);

  kv.Free(b);
  EXPECT_EQ(kv.num_free_blocks(), 8);
}

TEST(KvCacheTest, FirstComputedCopyOfABlockStaysTheCachedOne) {
  KvCacheManager kv(8, kBlockSize, true);
  const std::vector<TokenId> prompt = Tokens(16, 1);
  BlockTable a = Compute(kv, prompt);
  BlockTable b = Compute(kv, prompt);  // computed at the same time, without a hit
  ASSERT_NE(a.blocks[0], b.blocks[0]);
  BlockTable c;
  kv.UpdateHashes(c, prompt);
  EXPECT_EQ(kv.FindCachedPrefix(c, 1), std::vector<BlockId>{a.blocks[0]});
  kv.Free(a);
  kv.Free(b);
  EXPECT_EQ(kv.num_free_blocks(), 8);
}

TEST(KvCacheTest, UsageIsTheFractionOfBlocksInUse) {
  KvCacheManager kv(4, kBlockSize, true);
  EXPECT_DOUBLE_EQ(kv.Usage(), 0.0);
  BlockTable a;
  ASSERT_TRUE(kv.Allocate(a, {}, 16));
  EXPECT_DOUBLE_EQ(kv.Usage(), 0.25);
  ASSERT_TRUE(kv.Allocate(a, {}, 64));
  EXPECT_DOUBLE_EQ(kv.Usage(), 1.0);
  kv.Free(a);
  EXPECT_DOUBLE_EQ(kv.Usage(), 0.0);  // cached but unreferenced blocks count as free
}

TEST(KvCacheTest, DisabledPrefixCachingNeverHits) {
  KvCacheManager kv(8, kBlockSize, false);
  EXPECT_FALSE(kv.prefix_caching());
  const std::vector<TokenId> prompt = Tokens(48, 1);
  BlockTable a = Compute(kv, prompt);
  EXPECT_TRUE(a.hashes.empty());
  kv.Free(a);
  EXPECT_EQ(Hits(kv, prompt), 0u);
  // Even a table that carries hashes finds nothing.
  BlockTable b;
  b.hashes = {HashBlock(0, std::span(prompt).subspan(0, 16))};
  EXPECT_TRUE(kv.FindCachedPrefix(b, 10).empty());
}

// A request's blocks are allocated step by step (chunked prefill, then one decode token at a
// time). A block that becomes full in a later step than it was allocated must be cached too,
// as vLLM caches every full computed block, output tokens included.
TEST(KvCacheTest, BlockFilledAfterItsAllocationIsCached) {
  KvCacheManager kv(8, kBlockSize, true);
  const std::vector<TokenId> tokens = Tokens(32, 1);
  BlockTable a;
  kv.UpdateHashes(a, tokens);
  ASSERT_TRUE(kv.Allocate(a, {}, 20));  // blocks 0 and 1
  kv.CacheComputedBlocks(a, 20);        // block 0 is full
  ASSERT_TRUE(kv.Allocate(a, {}, 32));  // no new block needed
  kv.CacheComputedBlocks(a, 32);        // block 1 is now full
  kv.Free(a);
  EXPECT_EQ(Hits(kv, tokens), 2u);
}

}  // namespace
}  // namespace bmas::engine
