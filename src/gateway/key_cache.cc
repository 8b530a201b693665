#include "gateway/key_cache.h"

#include <algorithm>
#include <array>

namespace bmas::gateway {

namespace {
constexpr std::string_view kPrefix = "sk-bmas-";
constexpr size_t kIdHex = 12;
constexpr size_t kSecretHex = 48;

constexpr std::array<bool, 256> kLowerHex = [] {
  std::array<bool, 256> table{};
  for (unsigned char c : std::string_view("0123456789abcdef")) table[c] = true;
  return table;
}();

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return kLowerHex[static_cast<unsigned char>(c)]; });
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

std::optional<std::string> KeyCache::Get(std::string_view key) {
  auto it = map_.find(key);
  if (it == map_.end()) return std::nullopt;
  order_.splice(order_.begin(), order_, it->second);
  return it->second->user;
}

void KeyCache::Put(const std::string& key, std::string user) {
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
  auto it = map_.find(key);
  if (it == map_.end()) return;
  if (user) {
    it->second->user = std::move(*user);
    return;
  }
  const auto entry = it->second;
  map_.erase(it);  // the view into the entry's key goes before the entry
  order_.erase(entry);
}

std::vector<std::string> KeyCache::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(order_.size());
  for (const Entry& e : order_) keys.push_back(e.key);
  return keys;
}

FailedKeyLimiter::FailedKeyLimiter(int max_failures, double window_s, size_t max_addresses)
    : max_failures_(std::max(max_failures, 1)),
      window_s_(window_s),
      max_addresses_(std::max<size_t>(max_addresses, 1)) {}

bool FailedKeyLimiter::Allowed(const std::string& address, double now) const {
  return RetryAfter(address, now) <= 0;
}

double FailedKeyLimiter::RetryAfter(const std::string& address, double now) const {
  auto it = windows_.find(address);
  if (it == windows_.end() || now - it->second.start >= window_s_) return 0;
  if (it->second.failures < max_failures_) return 0;
  return it->second.start + window_s_ - now;
}

void FailedKeyLimiter::RecordFailure(const std::string& address, double now) {
  auto it = windows_.find(address);
  if (it != windows_.end()) {
    if (now - it->second.start >= window_s_) it->second = Window{now, 0};
    ++it->second.failures;
    return;
  }
  if (windows_.size() >= max_addresses_) {
    std::erase_if(windows_, [&](const auto& e) { return now - e.second.start >= window_s_; });
  }
  if (windows_.size() >= max_addresses_) {
    windows_.erase(std::min_element(windows_.begin(), windows_.end(), [](const auto& a,
                                                                        const auto& b) {
      return a.second.start < b.second.start;
    }));
  }
  windows_.emplace(address, Window{now, 1});
}

}  // namespace bmas::gateway
