#pragma once

// Which user an API key belongs to, as the gateway remembers it between store refreshes.
// Only keys of the form `bmas key create` makes are looked up, and only keys the store knows
// are kept: a client sending random keys neither grows the gateway's memory nor pushes real
// users out, and costs no look-up at each refresh. Failed look-ups are limited per client
// address (FailedKeyLimiter). Not thread-safe: the gateway guards both with its mutex.

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
// Client addresses whose failed key look-ups are counted at once (FailedKeyLimiter).
inline constexpr size_t kMaxFailedKeyAddresses = 4096;

// Whether `key` has the form of a bmas API key: "sk-bmas-" + 12 hex + "-" + 48 hex.
bool IsWellFormedKey(std::string_view key);

// A least-recently-used map key -> user of keys the store knows, holding at most `capacity`
// entries. No negative answer is kept.
class KeyCache {
 public:
  explicit KeyCache(size_t capacity);

  // The user of `key` (and marks it used), or nullopt when not cached.
  std::optional<std::string> Get(std::string_view key);
  // Adds or replaces `key`, evicting the least recently used entry when full.
  void Put(const std::string& key, std::string user);
  // A refresh's answer for `key`, applied only if it is still cached (a refresh must not bring
  // back an evicted key): a new user replaces the old, nullopt (revoked) removes it.
  void Update(const std::string& key, std::optional<std::string> user);
  std::vector<std::string> Keys() const;

  size_t size() const { return map_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    std::string key;
    std::string user;
  };
  size_t capacity_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string_view, std::list<Entry>::iterator> map_;  // views into order_
};

// Failed key look-ups (well-formed keys the store does not know) per client address, counted
// in a fixed window: an address with `max_failures` in its window gets no look-up until the
// window ends (the gateway answers 429 without asking the store). Tracks at most
// `max_addresses`; when full, expired windows go first, then the one that began first. Pure:
// the time (seconds, any monotonic origin) is an argument.
class FailedKeyLimiter {
 public:
  FailedKeyLimiter(int max_failures, double window_s, size_t max_addresses);

  // Whether `address` may have a look-up at `now`.
  bool Allowed(const std::string& address, double now) const;
  // Counts a failed look-up from `address` at `now`.
  void RecordFailure(const std::string& address, double now);
  // Seconds until `address` may have a look-up again (0 when it may now).
  double RetryAfter(const std::string& address, double now) const;

  size_t size() const { return windows_.size(); }
  int max_failures() const { return max_failures_; }

 private:
  struct Window {
    double start = 0;
    int failures = 0;
  };
  const int max_failures_;
  const double window_s_;
  const size_t max_addresses_;
  std::unordered_map<std::string, Window> windows_;
};

}  // namespace bmas::gateway
