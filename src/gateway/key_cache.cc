#include "gateway/key_cache.h"

#include <algorithm>

namespace bmas::gateway {

namespace {
constexpr std::string_view kPrefix = "sk-bmas-";
constexpr size_t kIdHex = 12;
constexpr size_t kSecretHex = 48;

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}
}  // namespace

bool IsWellFormedKey(std::string_view key) {
  if (key.size() != kPrefix.size() + kIdHex + 1 + kSecretHex) return false;
  if (key.substr(0, kPrefix.size()) != kPrefix) return false;
  key.remove_prefix(kPrefix.size());
  return key[kIdHex] == '-' && IsLowerHex(key.substr(0, kIdHex)) &&
         IsLowerHex(key.substr(kIdHex + 1));
}

KeyCache::KeyCache(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

std::optional<std::optional<std::string>> KeyCache::Get(const std::string& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return std::nullopt;
  order_.splice(order_.begin(), order_, it->second);
  return it->second->user;
}

void KeyCache::Put(const std::string& key, std::optional<std::string> user) {
  if (auto it = map_.find(key); it != map_.end()) {
    it->second->user = std::move(user);
    order_.splice(order_.begin(), order_, it->second);
    return;
  }
  if (map_.size() >= capacity_) {
    map_.erase(order_.back().key);
    order_.pop_back();
  }
  order_.push_front(Entry{key, std::move(user)});
  map_.emplace(order_.front().key, order_.begin());
}

void KeyCache::Update(const std::string& key, std::optional<std::string> user) {
  if (auto it = map_.find(key); it != map_.end()) it->second->user = std::move(user);
}

std::vector<std::string> KeyCache::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(order_.size());
  for (const Entry& e : order_) keys.push_back(e.key);
  return keys;
}

}  // namespace bmas::gateway
