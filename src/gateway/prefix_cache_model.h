#pragma once

// The gateway's approximate model of each backend's prefix cache, for cache_aware routing.
//
// vLLM caches a prompt's KV in blocks of 16 tokens, each named by a hash chained over all
// blocks before it, and evicts least-recently-used free blocks. The gateway has no tokenizer,
// so it models blocks of kCacheBlockBytes bytes of the prompt text (about 16 tokens of the
// engine's tokenizer) with the same chaining, and remembers, per backend, the blocks of the
// prompts it sent there, least-recently-used first out at the backend's capacity.
//
// Pure: no I/O, no clock. Deterministic. Not thread-safe: the gateway drives it under its lock.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bmas::gateway {

// The splitmix64 finaliser: spreads a hash's weak bits over all 64.
uint64_t Mix64(uint64_t x);

// Bytes of prompt text per modelled block: vLLM's 16 tokens at the ~4 characters per token
// that the engine's tokenizer gives English text.
inline constexpr size_t kCacheBlockBytes = 64;

// Characters per token assumed when converting a backend's KV capacity (tokens) to blocks.
inline constexpr double kDefaultCharsPerToken = 4.0;

// The chained hashes of the full kCacheBlockBytes blocks of `text`, at most max_blocks of
// them: hash i depends on bytes [0, (i + 1) * block_bytes), so two texts share hash i exactly
// when (up to 64-bit collisions) they share those bytes.
std::vector<uint64_t> PrefixBlockHashes(std::string_view text,
                                        size_t block_bytes = kCacheBlockBytes,
                                        size_t max_blocks = 4096);

// The number of modelled blocks a backend's KV cache holds: num_gpu_blocks * block_size tokens
// at chars_per_token characters each, in kCacheBlockBytes blocks (0 when any input is <= 0).
size_t CacheCapacityBlocks(int64_t num_gpu_blocks, int64_t block_size, double chars_per_token);

class PrefixCacheModel {
 public:
  // max_total_blocks bounds the blocks remembered over all backends (each entry costs about
  // 80 bytes); a backend keeps at most its capacity and at most max_total_blocks / backends.
  // default_capacity is used for a backend whose capacity is not known (yet).
  explicit PrefixCacheModel(size_t max_total_blocks = size_t{1} << 20,
                            size_t default_capacity = 4096);

  // Sets how many blocks `backend` holds (0: unknown, the default capacity), evicting down
  // to it.
  void SetCapacity(std::string_view backend, size_t blocks);

  // How many leading blocks of `blocks` (a PrefixBlockHashes chain) `backend` holds.
  size_t CachedPrefix(std::string_view backend, std::span<const uint64_t> blocks) const;

  // Records a request sent to `backend`: its hashed blocks, then `unhashed_blocks` more that
  // no other prompt shares (the prompt past what was hashed, the output). They become the
  // most recently used, the first block most of all (vLLM frees a finished request's blocks
  // tail first, so a shared head outlives the tails); the least recently used go past the
  // capacity.
  void Record(std::string_view backend, std::span<const uint64_t> blocks,
              size_t unhashed_blocks);

  // Forgets `backend` (removed, draining or down: its cache is gone or soon will be). A later
  // backend with the same id starts empty.
  void Forget(std::string_view backend);

  size_t BlocksOf(std::string_view backend) const;
  size_t total_blocks() const { return total_; }
  size_t backends() const { return caches_.size(); }

 private:
  struct Cache {
    size_t capacity = 0;  // 0: default
    std::list<uint64_t> lru;  // most recently used first
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
    uint64_t unhashed_seq = 0;  // names the blocks no prompt shares
  };

  Cache& CacheOf(std::string_view backend);
  size_t Limit(const Cache& cache) const;
  // Makes `hash` the most recently used block; at `limit` blocks, the least recently used
  // one makes room.
  void Touch(Cache& cache, uint64_t hash, size_t limit);
  void Trim(Cache& cache);

  const size_t max_total_;
  const size_t default_capacity_;
  size_t total_ = 0;
  std::map<std::string, Cache, std::less<>> caches_;
};

}  // namespace bmas::gateway
