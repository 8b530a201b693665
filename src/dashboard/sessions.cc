#include "dashboard/sessions.h"

#include <algorithm>

namespace bmas::dashboard {

void Sessions::Create(const std::string& token, const std::string& user,
                      const std::string& key_id, int64_t now) {
  std::erase_if(by_token_, [&](const auto& e) { return e.second.expires <= now; });
  auto earlier = [](const auto& a, const auto& b) { return a.second.expires < b.second.expires; };
  while (true) {
    size_t theirs = 0;
    auto oldest = by_token_.end();
    for (auto it = by_token_.begin(); it != by_token_.end(); ++it) {
      if (it->second.user != user) continue;
      ++theirs;
      if (oldest == by_token_.end() || earlier(*it, *oldest)) oldest = it;
    }
    if (theirs < per_user_) break;
    by_token_.erase(oldest);
  }
  while (by_token_.size() >= max_sessions_ && !by_token_.empty()) {
    by_token_.erase(std::min_element(by_token_.begin(), by_token_.end(), earlier));
  }
  by_token_[token] = Session{user, key_id, now + lifetime_s_};
}

std::optional<Sessions::Session> Sessions::Find(std::string_view token, int64_t now) {
  auto it = by_token_.find(token);
  if (it == by_token_.end()) return std::nullopt;
  if (it->second.expires <= now) {
    by_token_.erase(it);
    return std::nullopt;
  }
  return it->second;
}

void Sessions::Remove(std::string_view token) {
  auto it = by_token_.find(token);
  if (it != by_token_.end()) by_token_.erase(it);
}

void Sessions::RemoveUser(const std::string& user) {
  std::erase_if(by_token_, [&](const auto& e) { return e.second.user == user; });
}

void Sessions::RemoveKey(const std::string& key_id) {
  std::erase_if(by_token_, [&](const auto& e) { return e.second.key_id == key_id; });
}

std::string CookieValue(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const size_t end = header.find(';');
    std::string_view pair = header.substr(0, end);
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    const size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) {
      return std::string(pair.substr(eq + 1));
    }
    if (end == std::string_view::npos) break;
    header.remove_prefix(end + 1);
  }
  return "";
}

}  // namespace bmas::dashboard
