#pragma once

// Which user an API key belongs to, as the gateway remembers it between store refreshes.
// Only keys of the form `bmas key create` makes are looked up or kept: anything else is
// refused before any work, so a client without a key cannot grow the gateway's memory.
// Not thread-safe: the gateway guards it with its mutex.

#include <cstddef>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bmas::gateway {

// The longest Authorization header value worth looking at ("Bearer " + a key).
inline constexpr size_t kMaxKeyLength = 128;

// Whether `key` has the form of a bmas API key: "sk-bmas-" + 12 hex + "-" + 48 hex.
bool IsWellFormedKey(std::string_view key);

// A least-recently-used map key -> user (nullopt: the store knows no such key), holding at
// most `capacity` entries.
class KeyCache {
 public:
  explicit KeyCache(size_t capacity);

  // The cached answer for `key` (and marks it used), or nullopt when not cached.
  std::optional<std::optional<std::string>> Get(const std::string& key);
  // Adds or replaces `key`, evicting the least recently used entry when full.
  void Put(const std::string& key, std::optional<std::string> user);
  // Replaces the answer for `key` only if it is still cached (a refresh must not bring back
  // an evicted key).
  void Update(const std::string& key, std::optional<std::string> user);
  std::vector<std::string> Keys() const;

  size_t size() const { return map_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    std::string key;
    std::optional<std::string> user;
  };
  size_t capacity_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string_view, std::list<Entry>::iterator> map_;  // views into order_
};

}  // namespace bmas::gateway
