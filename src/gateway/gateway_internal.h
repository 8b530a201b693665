#pragma once

// The gateway's per-backend and per-model state, shared by gateway.cc (the request path) and
// gateway_views.cc (what operators read). Guarded by Gateway::mu_.

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "gateway/fair_queue.h"
#include "gateway/gateway.h"
#include "gateway/router.h"
#include "gateway/upstream.h"

namespace bmas::gateway {

struct Gateway::Backend {
  Backend(const std::vector<net::io_context*>& workers, BackendUrl u, bool from_store)
      : url(std::move(u)), from_store(from_store) {
    for (net::io_context* io : workers) pools.push_back(std::make_unique<ConnectionPool>(*io, url));
    state.id = url.url;  // never changes: read without the lock
    state.healthy = false;  // until the first check passes
  }
  const BackendUrl url;
  std::vector<std::unique_ptr<ConnectionPool>> pools;  // per worker, used on its thread only
  BackendState state;
  bool from_store;
  bool checked = false;
  int checks = 0;
  std::vector<std::string> models;       // ids
  std::vector<std::string> model_cards;  // their /v1/models entries, as JSON
  std::unordered_map<std::string, int> user_in_flight;

  int capacity(int fallback) const { return state.capacity > 0 ? state.capacity : fallback; }
  bool Serves(const std::string& model) const {
    return std::find(models.begin(), models.end(), model) != models.end();
  }
};

struct Gateway::ModelQueue {
  explicit ModelQueue(bool fair) : queue(fair) {}
  FairQueue queue;
  std::unordered_map<Ticket, std::shared_ptr<Waiter>> waiters;
  // When each user last sent a request for this model (seconds on the gateway's clock).
  std::unordered_map<std::string, double> last_request;

  // Forgets users whose last request is older than `window` s.
  void ForgetIdle(double now, double window) {
    std::erase_if(last_request, [&](const auto& e) { return now - e.second > window; });
  }
  // Whether someone other than `user` is waiting, or sent a request within the window (after
  // ForgetIdle): then `user` must leave the reserve free, so that users who come and go (think
  // time between requests) never wait for a whole wave of one user's long requests.
  bool OthersActive(const std::string& user) const {
    return queue.size() > queue.queued(user) ||
           last_request.size() > (last_request.contains(user) ? 1u : 0u);
  }
};

}  // namespace bmas::gateway
