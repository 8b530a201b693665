#pragma once

// The gateway's per-backend state, shared by gateway.cc (the request path) and
// gateway_views.cc (what operators read). Guarded by Gateway::mu_.

#include <memory>
#include <string>
#include <vector>

#include "gateway/gateway.h"
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

}  // namespace bmas::gateway
