#pragma once

// Paged KV cache with prefix caching, after vLLM V1's BlockPool and KVCacheManager.
//
// The cache is a fixed number of blocks of `block_size` tokens. A full block of known tokens
// is identified by a hash of its tokens chained to the previous block's hash, so equal
// prefixes give equal hashes. Blocks are reference-counted; a block whose count drops to zero
// goes to the tail of a free queue but keeps its hash, so a later request with the same
// prefix can take it back (a hit). Allocation takes from the head of the free queue, which
// evicts the least recently freed cached block. Hash collisions (64-bit) are not detected.
//
// Not thread-safe; owned by one Scheduler.

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer.h"

namespace bmas::engine {

using BlockId = int32_t;
using BlockHash = uint64_t;

// Hash of one full block, chained to the previous block's hash (0 for the first block).
BlockHash HashBlock(BlockHash parent, std::span<const TokenId> tokens);

// The blocks one request holds, and the hashes of its full blocks of known tokens.
struct BlockTable {
  std::vector<BlockId> blocks;
  std::vector<BlockHash> hashes;  // hashes[i] covers tokens [i*bs, (i+1)*bs)
  size_t num_cached_blocks = 0;   // blocks[0..num_cached_blocks) are registered in the cache
};

class KvCacheManager {
 public:
  KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching);

  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  // Extends table.hashes to cover every full block of `tokens`.
  void UpdateHashes(BlockTable& table, std::span<const TokenId> tokens) const;

  // The longest run of cached blocks matching table.hashes from the start, at most
  // `max_blocks` long. The blocks are not referenced until Allocate() takes them.
  std::vector<BlockId> FindCachedPrefix(const BlockTable& table, size_t max_blocks) const;

  // Makes `table` hold enough blocks for `total_tokens` tokens: first the `cached` blocks
  // (a prefix hit, REQUIRES: table.blocks is empty when cached is not), then new blocks.
  // Returns false and changes nothing when the free blocks do not suffice.
  bool Allocate(BlockTable& table, std::span<const BlockId> cached, int64_t total_tokens);

  // Registers in the cache the full blocks among the first `num_computed_tokens` tokens.
  void CacheComputedBlocks(BlockTable& table, int64_t num_computed_tokens);

  // Releases every block of `table`; cached ones stay findable until evicted.
  void Free(BlockTable& table);

  // Forgets every cached prefix (vLLM's reset_prefix_cache). Fails, changing nothing, while
  // any block is still in use.
  bool ResetPrefixCache();

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int block_size() const { return block_size_; }
  int num_free_blocks() const { return num_free_; }
  // Fraction of blocks in use by requests, 0..1 (vllm:kv_cache_usage_perc).
  double Usage() const { return 1.0 - static_cast<double>(num_free_) / blocks_.size(); }
  bool prefix_caching() const { return enable_prefix_caching_; }

 private:
  struct Block {
    int32_t ref_count = 0;
    bool has_hash = false;
    BlockHash hash = 0;
    BlockId prev = -1;  // free-queue links; -1 = none
    BlockId next = -1;
    bool in_free_queue = false;
  };

  void PushFreeTail(BlockId id);
  void RemoveFromFreeQueue(BlockId id);
  BlockId PopFreeHead();

  const int block_size_;
  const bool enable_prefix_caching_;
  std::vector<Block> blocks_;
  BlockId free_head_ = -1;
  BlockId free_tail_ = -1;
  int num_free_ = 0;
  std::unordered_map<BlockHash, BlockId> cached_;
};

}  // namespace bmas::engine
