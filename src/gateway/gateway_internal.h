#pragma once

// What the gateway's files share: a backend's state (guarded by Gateway::mu_), a request as it
// goes through admission and the relay, and small helpers. gateway.cc handles requests and
// their attempts; gateway_keys.cc checks API keys; gateway_relay.cc relays to a backend;
// gateway_metering.cc meters and flushes usage; gateway_backends.cc checks backends' health
// and follows the store's list; gateway_views.cc answers operators and /v1/usage.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <simdjson.h>

#include "gateway/gateway.h"
#include "gateway/resume.h"
#include "gateway/upstream.h"

namespace bmas::gateway {

// A backend's connections and what it lists. What admission knows of it (health, counts,
// models) is in Gateway::admission_, under the same id.
struct Gateway::Backend {
  Backend(const std::vector<net::io_context*>& workers, BackendUrl u, BackendIdentity who,
          bool from_store)
      : url(std::move(u)), id(url.url), identity(std::move(who)), from_store(from_store) {
    for (net::io_context* io : workers) {
      pools.push_back(std::make_unique<ConnectionPool>(*io, url, identity));
    }
  }
  const BackendUrl url;
  const std::string id;  // never changes: read without the lock
  const BackendIdentity identity;  // its key and whether it must prove it holds it
  std::vector<std::unique_ptr<ConnectionPool>> pools;  // per worker, used on its thread only
  bool from_store;
  bool checked = false;
  bool unverified = false;  // its last health check failed the identity challenge (io_ only)
  int checks = 0;
  std::vector<std::string> model_cards;  // /v1/models entries, as JSON, of admission's models
};

using Clock = std::chrono::steady_clock;

// The value of the first field `name` of a request's or response's head, or "": a walk over its
// few fields, where Beast's look-up compares names case-insensitively in a tree.
template <class Fields>
std::string_view FirstField(const Fields& fields, http::field name) {
  for (const auto& field : fields) {
    if (field.name() == name) return field.value();
  }
  return {};
}

struct Gateway::Request {
  size_t worker = 0;  // the worker the client's connection runs on
  std::string user;
  double weight = 1;
  std::string model;
  std::string target;         // kCompletionsPath, kChatCompletionsPath or kResponsesPath
  std::string upstream_body;  // the client's body, with include_usage added to streams
  bool stream = false;
  bool client_wants_usage = false;
  int64_t prompt_chars = 0;     // bytes of prompt text
  int64_t prompt_estimate = 0;  // tokens, from prompt_chars, until the backend reports usage
  std::optional<uint64_t> prefix_key;
  std::vector<uint64_t> cache_blocks;  // cache_aware: PrefixBlockHashes of the lead
  size_t unhashed_blocks = 0;          // cache_aware: prompt blocks past the lead's
  TimePoint start;                     // from the gateway's env
  // When a whole answer was handed to the socket (Server-Timing's end): the request's end
  // for its metrics and its admission's release, one clock read less. Unset for a stream.
  std::optional<TimePoint> answered;
  bool attempted = false;  // Attempt has run: a later one reads the time of its own
  double queue_s = 0;                  // waited for admission, over all attempts
  // A stream that reached the client: what it was sent, to resume it on another backend.
  std::optional<StreamResume> resume;
  std::string cut_reason;  // set by RelayOnce when the stream was cut and may be resumed
  int64_t metered = 0;     // prompt + completion tokens metered, over all attempts
  std::string reservation;  // shared limits: its id in the store, "" when none
};

// A request waiting for admission. Dispatch() (on any worker, under mu_) picks its backend and
// wakes it on its own worker.
struct Gateway::Waiter {
  explicit Waiter(Request* r) : request(r) {}
  // Made (under mu_) only when the request cannot be admitted at once, so before any other
  // worker can admit it; a request admitted while it is queued never needs one.
  std::optional<net::steady_timer> wake;
  Request* request;
  std::shared_ptr<Backend> backend;  // set under mu_
};

// The gateway's reused parser; replaced first if an earlier large document grew its buffers
// past 1 MiB, so that one large body does not stay in memory.
inline simdjson::dom::parser& Reusable(std::unique_ptr<simdjson::dom::parser>& parser) {
  if (parser->capacity() > (size_t{1} << 20)) parser = std::make_unique<simdjson::dom::parser>();
  return *parser;
}

}  // namespace bmas::gateway
