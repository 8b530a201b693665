#include "gateway/prefix_cache_model.h"

#include <algorithm>
#include <cmath>

namespace bmas::gateway {

namespace {
constexpr uint64_t kFnvPrime = 1099511628211ull;
}  // namespace

uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

std::vector<uint64_t> PrefixBlockHashes(std::string_view text, size_t block_bytes,
                                        size_t max_blocks) {
  std::vector<uint64_t> hashes;
  if (block_bytes == 0) return hashes;
  const size_t n = std::min(max_blocks, text.size() / block_bytes);
  hashes.reserve(n);
  uint64_t parent = 14695981039346656037ull;  // FNV-1a's offset basis
  for (size_t i = 0; i < n; ++i) {
    // FNV-1a over the block, started from the previous block's hash: the chain.
    uint64_t h = parent;
    for (unsigned char c : text.substr(i * block_bytes, block_bytes)) {
      h ^= c;
      h *= kFnvPrime;
    }
    parent = h;
    hashes.push_back(Mix64(h));
  }
  return hashes;
}

size_t CacheCapacityBlocks(int64_t num_gpu_blocks, int64_t block_size, double chars_per_token) {
  if (num_gpu_blocks <= 0 || block_size <= 0 || !(chars_per_token > 0)) return 0;
  const double bytes = static_cast<double>(num_gpu_blocks) * static_cast<double>(block_size) *
                       chars_per_token;
  return static_cast<size_t>(std::floor(bytes / static_cast<double>(kCacheBlockBytes)));
}

PrefixCacheModel::PrefixCacheModel(size_t max_total_blocks, size_t default_capacity)
    : max_total_(std::max<size_t>(1, max_total_blocks)),
      default_capacity_(std::max<size_t>(1, default_capacity)) {}

PrefixCacheModel::Cache& PrefixCacheModel::CacheOf(std::string_view backend) {
  auto it = caches_.find(backend);
  if (it != caches_.end()) return it->second;
  Cache& cache = caches_.emplace(std::string(backend), Cache{}).first->second;
  // One more backend lowers every backend's share of the global bound.
  for (auto& [id, c] : caches_) Trim(c);
  return cache;
}

size_t PrefixCacheModel::Limit(const Cache& cache) const {
  const size_t capacity = cache.capacity > 0 ? cache.capacity : default_capacity_;
  return std::max<size_t>(1, std::min(capacity, max_total_ / std::max<size_t>(1, caches_.size())));
}

void PrefixCacheModel::Trim(Cache& cache) {
  const size_t limit = Limit(cache);
  while (cache.lru.size() > limit) {
    cache.where.erase(cache.lru.back());
    cache.lru.pop_back();
    --total_;
  }
}

void PrefixCacheModel::Touch(Cache& cache, uint64_t hash, size_t limit) {
  auto it = cache.where.find(hash);
  if (it != cache.where.end()) {
    cache.lru.splice(cache.lru.begin(), cache.lru, it->second);
    return;
  }
  if (!cache.lru.empty() && cache.lru.size() >= limit) {
    // Full: the least recently used block goes now rather than at the Trim after, and its
    // list and map nodes carry the new block (no allocation). An LRU holds the `limit` most
    // recently touched blocks either way.
    auto node = cache.where.extract(cache.lru.back());
    cache.lru.back() = hash;
    cache.lru.splice(cache.lru.begin(), cache.lru, std::prev(cache.lru.end()));
    node.key() = hash;
    node.mapped() = cache.lru.begin();
    cache.where.insert(std::move(node));
    return;
  }
  cache.lru.push_front(hash);
  cache.where.emplace(hash, cache.lru.begin());
  ++total_;
}

void PrefixCacheModel::SetCapacity(std::string_view backend, size_t blocks) {
  Cache& cache = CacheOf(backend);
  if (cache.capacity == blocks) return;
  cache.capacity = blocks;
  Trim(cache);
}

size_t PrefixCacheModel::CachedPrefix(std::string_view backend,
                                      std::span<const uint64_t> blocks) const {
  if (blocks.empty()) return 0;
  auto it = caches_.find(backend);
  if (it == caches_.end()) return 0;
  const Cache& cache = it->second;
  size_t n = 0;
  while (n < blocks.size() && cache.where.contains(blocks[n])) ++n;
  return n;
}

void PrefixCacheModel::Record(std::string_view backend, std::span<const uint64_t> blocks,
                              size_t unhashed_blocks) {
  Cache& cache = CacheOf(backend);
  // Nothing beyond the limit can stay, and touching it first would only evict the head.
  const size_t limit = Limit(cache);
  const size_t hashed = std::min(blocks.size(), limit);
  const size_t unhashed = std::min(unhashed_blocks, limit - hashed);
  for (size_t i = unhashed; i > 0; --i) {
    Touch(cache, Mix64(++cache.unhashed_seq ^ 0x756e686173686564ull), limit);
  }
  for (size_t i = hashed; i > 0; --i) Touch(cache, blocks[i - 1], limit);
  Trim(cache);
}

void PrefixCacheModel::Forget(std::string_view backend) {
  auto it = caches_.find(backend);
  if (it == caches_.end()) return;
  total_ -= it->second.lru.size();
  caches_.erase(it);
}

size_t PrefixCacheModel::BlocksOf(std::string_view backend) const {
  auto it = caches_.find(backend);
  return it == caches_.end() ? 0 : it->second.lru.size();
}

}  // namespace bmas::gateway
