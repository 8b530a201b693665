#pragma once

// Dashboard sessions: a random token in an HttpOnly, SameSite=Strict cookie names a user (and
// the API key they signed in with) until it expires or that key is revoked. The table is bounded: a user holds at most `per_user` sessions (their oldest
// goes), so one key signing in over and over cannot push other users out; past `max_sessions`
// in all, the session that expires first goes. Pure: the time is an argument and the token
// comes from the caller. Not thread-safe.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace bmas::dashboard {

class Sessions {
 public:
  struct Session {
    std::string user;
    std::string key_id;  // the id of the API key signed in with (KeyInfo::id)
    int64_t expires = 0;
  };

  Sessions(int64_t lifetime_s, size_t max_sessions, size_t per_user = 16)
      : lifetime_s_(lifetime_s), max_sessions_(max_sessions), per_user_(per_user) {}

  // Starts a session for `user`, signed in with key `key_id`, with `token` (random, from the
  // caller) at `now`.
  void Create(const std::string& token, const std::string& user, const std::string& key_id,
              int64_t now);
  // A live session; nullopt for an unknown or expired token (which is forgotten).
  std::optional<Session> Find(std::string_view token, int64_t now);
  void Remove(std::string_view token);
  // Ends every session of `user` (removed from the store, say).
  void RemoveUser(const std::string& user);
  // Ends every session signed in with key `key_id` (revoked).
  void RemoveKey(const std::string& key_id);

  size_t size() const { return by_token_.size(); }
  int64_t lifetime_s() const { return lifetime_s_; }

 private:
  const int64_t lifetime_s_;
  const size_t max_sessions_;
  const size_t per_user_;
  std::map<std::string, Session, std::less<>> by_token_;
};

// The value of cookie `name` in a Cookie header ("a=1; b=2"); "" when absent.
std::string CookieValue(std::string_view header, std::string_view name);

}  // namespace bmas::dashboard
