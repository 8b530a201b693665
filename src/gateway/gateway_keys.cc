// The gateway's check of a request's API key: the key cache, the store behind it, and the
// limit on unknown keys per client address.

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>

#include "common/backend_identity.h"
#include "common/operator_auth.h"
#include "gateway/backend_source.h"
#include "gateway/gateway.h"
#include "gateway/gateway_internal.h"
#include "gateway/request.h"
#include "gateway/sse.h"
#include "gateway/usage_report.h"

namespace bmas::gateway {

namespace {
constexpr std::string_view kBearer = "Bearer ";
}  // namespace

std::optional<Gateway::Authenticated> Gateway::AuthenticateAtOnce(const HttpRequest& request) {
  const std::string_view header = FirstField(request, http::field::authorization);
  // Only a bearer of a key's length is worth a look-up in the cache, and only one of a key's
  // form a look-up in the store, or a place in the cache.
  if (header.size() <= kBearer.size() || header.size() > kBearer.size() + kMaxKeyLength ||
      header.substr(0, kBearer.size()) != kBearer) {
    return Authenticated{};
  }
  const std::string_view key = header.substr(kBearer.size());
  {
    // The cache holds only keys of the right form that the store knew (Authenticate puts
    // nothing else there): a key it has needs no other check.
    std::lock_guard lock(mu_);
    if (auto cached = keys_.Get(key)) return Authenticated{std::move(cached)};
  }
  if (!IsWellFormedKey(key)) return Authenticated{};
  return std::nullopt;
}

awaitable<Gateway::Authenticated> Gateway::Authenticate(const HttpRequest& request,
                                                        const ResponseWriter& writer) {
  if (std::optional<Authenticated> known = AuthenticateAtOnce(request)) co_return *known;
  // A well-formed bearer that the cache lacks.
  const std::string key(FirstField(request, http::field::authorization).substr(kBearer.size()));
  // Only a key the cache lacks needs the client's address (a getpeername(2) per request was
  // 1 of the 5.5 system calls a relayed request cost).
  const std::string address = writer.remote_address();
  {
    std::lock_guard lock(mu_);
    // An address that sent too many unknown keys gets no look-up until its window ends.
    if (const double wait = failed_keys_.RetryAfter(address, Now()); wait > 0) {
      keys_limited_.Inc();
      co_return Authenticated{std::nullopt, true, wait};
    }
    key_lookups_.Inc();
  }
  // A key not seen before: ask the store for its user and that user's limits in one go, so
  // that a user added a moment ago is limited from their first request.
  struct Found {
    std::optional<std::string> user;
    std::optional<UserLimits> limits;
  };
  auto check = [key](Store& store) {
    Found found;
    auto who = store.Authenticate(key);
    if (!who || !*who) return found;
    auto user = store.FindUser(**who);
    if (!user || !*user) return found;  // removed meanwhile: no access
    found.user = **who;
    found.limits = (*user)->limits;
    return found;
  };
  Found found = co_await store_.Run(std::move(check));
  {
    std::lock_guard lock(mu_);
    if (found.user) {
      users_[*found.user] = *found.limits;
      keys_.Put(key, *found.user);  // refreshed every second
      key_cache_entries_.Set(static_cast<double>(keys_.size()));
    } else {
      failed_keys_.RecordFailure(address, Now());  // and nothing kept of the key
    }
  }
  co_return Authenticated{std::move(found.user)};
}

awaitable<void> Gateway::RefuseKey(const Authenticated& auth, ResponseWriter& writer) {
  if (auth.limited) {
    const auto seconds = static_cast<int64_t>(std::ceil(auth.retry_after_s));
    ResponseWriter::Headers headers;
    headers.emplace_back(http::field::retry_after, std::to_string(seconds));
    std::string message = fmt::format(
        "too many unknown API keys from your address: no key is checked for it for {} s; send a "
        "valid key (`bmas key create USER` makes one)",
        seconds);
    co_await writer.SendError(http::status::too_many_requests, std::move(message), std::string(),
                              std::move(headers));
    co_return;
  }
  co_await writer.SendError(http::status::unauthorized,
                            std::string("missing or invalid API key: send Authorization: Bearer "
                                        "<key> (create one with `bmas key create USER`)"));
}

}  // namespace bmas::gateway
