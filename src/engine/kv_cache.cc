#include "engine/kv_cache.h"

#include <cassert>

namespace bmas::engine {

BlockHash HashBlock(BlockHash parent, std::span<const TokenId> tokens) {
  uint64_t h = parent ^ 0x9E3779B97F4A7C15ULL;
  for (TokenId t : tokens) {
    h ^= t + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ULL;
  }
  h ^= h >> 31;
  return h;
}

KvCacheManager::KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching)
    : block_size_(block_size), enable_prefix_caching_(enable_prefix_caching), blocks_(num_blocks) {
  assert(num_blocks > 0 && block_size > 0);
  for (BlockId id = 0; id < num_blocks; ++id) PushFreeTail(id);
}

void KvCacheManager::UpdateHashes(BlockTable& table, std::span<const TokenId> tokens) const {
  if (!enable_prefix_caching_) return;
  const size_t full = tokens.size() / block_size_;
  while (table.hashes.size() < full) {
    size_t i = table.hashes.size();
    BlockHash parent = i == 0 ? 0 : table.hashes[i - 1];
    table.hashes.push_back(HashBlock(parent, tokens.subspan(i * block_size_, block_size_)));
  }
}

std::vector<BlockId> KvCacheManager::FindCachedPrefix(const BlockTable& table,
                                                      size_t max_blocks) const {
  std::vector<BlockId> hit;
  if (!enable_prefix_caching_) return hit;
  for (size_t i = 0; i < table.hashes.size() && i < max_blocks; ++i) {
    auto it = cached_.find(table.hashes[i]);
    if (it == cached_.end()) break;
    hit.push_back(it->second);
  }
  return hit;
}

bool KvCacheManager::Allocate(BlockTable& table, std::span<const BlockId> cached,
                              int64_t total_tokens) {
  assert(cached.empty() || table.blocks.empty());
  const int64_t needed_total = (total_tokens + block_size_ - 1) / block_size_;
  const int64_t have = static_cast<int64_t>(table.blocks.size() + cached.size());
  const int64_t new_blocks = needed_total > have ? needed_total - have : 0;
  // Cached blocks nobody references sit in the free queue; taking them makes them unavailable.
  int64_t cached_free = 0;
  for (BlockId id : cached) cached_free += blocks_[id].ref_count == 0 ? 1 : 0;
  if (new_blocks + cached_free > num_free_) return false;

  for (BlockId id : cached) {
    Block& b = blocks_[id];
    if (b.ref_count++ == 0) RemoveFromFreeQueue(id);
    table.blocks.push_back(id);
  }
  if (!cached.empty()) table.num_cached_blocks = cached.size();
  for (int64_t i = 0; i < new_blocks; ++i) {
    BlockId id = PopFreeHead();
    Block& b = blocks_[id];
    if (b.has_hash) {  // evict: the block's old contents are overwritten
      auto it = cached_.find(b.hash);
      if (it != cached_.end() && it->second == id) cached_.erase(it);
      b.has_hash = false;
    }
    b.ref_count = 1;
    table.blocks.push_back(id);
  }
  return true;
}

void KvCacheManager::CacheComputedBlocks(BlockTable& table, int64_t num_computed_tokens) {
  if (!enable_prefix_caching_) return;
  size_t full = static_cast<size_t>(num_computed_tokens / block_size_);
  if (full > table.hashes.size()) full = table.hashes.size();
  if (full > table.blocks.size()) full = table.blocks.size();
  for (size_t i = table.num_cached_blocks; i < full; ++i) {
    Block& b = blocks_[table.blocks[i]];
    if (b.has_hash) continue;
    // A block with the same contents may already be cached (two requests computed the same
    // prefix at once); the first one stays the cached copy.
    auto [it, inserted] = cached_.try_emplace(table.hashes[i], table.blocks[i]);
    if (inserted) {
      b.has_hash = true;
      b.hash = table.hashes[i];
    }
  }
  if (full > table.num_cached_blocks) table.num_cached_blocks = full;
}

void KvCacheManager::Free(BlockTable& table) {
  // Tail blocks first, so that a request's last blocks are evicted before its prefix.
  for (auto it = table.blocks.rbegin(); it != table.blocks.rend(); ++it) {
    Block& b = blocks_[*it];
    assert(b.ref_count > 0);
    if (--b.ref_count == 0) PushFreeTail(*it);
  }
  table.blocks.clear();
  table.num_cached_blocks = 0;
}

bool KvCacheManager::ResetPrefixCache() {
  if (num_free_ != num_blocks()) return false;
  cached_.clear();
  for (Block& b : blocks_) b.has_hash = false;
  return true;
}

void KvCacheManager::PushFreeTail(BlockId id) {
  Block& b = blocks_[id];
  assert(!b.in_free_queue);
  b.prev = free_tail_;
  b.next = -1;
  if (free_tail_ >= 0) blocks_[free_tail_].next = id; else free_head_ = id;
  free_tail_ = id;
  b.in_free_queue = true;
  ++num_free_;
}

void KvCacheManager::RemoveFromFreeQueue(BlockId id) {
  Block& b = blocks_[id];
  assert(b.in_free_queue);
  if (b.prev >= 0) blocks_[b.prev].next = b.next; else free_head_ = b.next;
  if (b.next >= 0) blocks_[b.next].prev = b.prev; else free_tail_ = b.prev;
  b.prev = b.next = -1;
  b.in_free_queue = false;
  --num_free_;
}

BlockId KvCacheManager::PopFreeHead() {
  BlockId id = free_head_;
  assert(id >= 0);
  RemoveFromFreeQueue(id);
  return id;
}

}  // namespace bmas::engine
