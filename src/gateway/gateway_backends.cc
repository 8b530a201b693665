// The gateway's backends: their health checks (with the identity challenge), and the list
// followed from the store (added, drained when removed).

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

awaitable<void> Gateway::HealthLoop() {
  net::steady_timer timer(io_);
  while (!stopping_) {
    // Checks run one after another; a dead backend costs at most the connect timeout. A
    // backend removed meanwhile stays alive through its check (shared ownership).
    std::vector<std::shared_ptr<Backend>> all;
    {
      std::lock_guard lock(mu_);
      all.assign(backends_.begin(), backends_.end());
    }
    for (const auto& b : all) co_await CheckBackend(b);
    timer.expires_after(options_.health_interval);
    beast::error_code ec;
    co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

awaitable<void> Gateway::CheckBackend(std::shared_ptr<Backend> backend) {
  Backend& b = *backend;
  // A short-lived connection per check: health must not depend on the request pool.
  auto get = [&](std::string path) -> awaitable<Result<std::string>> {
    ConnectionPool probe(io_, b.url, b.identity);
    bool reused = false;
    auto conn = co_await probe.Acquire(options_.connect_timeout, reused);
    if (!conn) co_return conn.error();
    auto& s = **conn;
    // Acquire had the backend answer its challenge on this connection before the key goes.
    http::request<http::empty_body> req{http::verb::get, b.url.base_path + path, 11};
    req.set(http::field::host, b.url.host);
    if (!b.identity.key.empty()) req.set(http::field::authorization, "Bearer " + b.identity.key);
    req.keep_alive(false);
    beast::error_code ec;
    s.expires_after(options_.connect_timeout);
    co_await http::async_write(s, req, net::redirect_error(use_awaitable, ec));
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    if (!ec) co_await http::async_read(s, buf, res, net::redirect_error(use_awaitable, ec));
    if (ec) co_return Error{ErrorCode::kUnavailable, ec.message()};
    if (res.result() != http::status::ok) {
      co_return Error{ErrorCode::kUnavailable, fmt::format("HTTP {}", res.result_int())};
    }
    co_return std::move(res.body());
  };
  bool need_models;
  {
    std::lock_guard lock(mu_);
    const AdmissionBackend* known = admission_.backend(b.id);
    need_models = known == nullptr || known->models.empty() || b.checks++ % 10 == 0;
  }
  auto health = co_await get("/health");
  bool healthy = health.has_value();
  // A wrong identity, or (https://) a certificate the CA did not issue for it: said once.
  const bool unverified = !health && (health.error().param == kIdentityParam ||
                                       health.error().param == kTlsParam);
  if (unverified && !b.unverified) spdlog::warn("gateway: {}", health.error().message);
  if (health && b.unverified) spdlog::info("gateway: backend {} proved its identity", b.id);
  b.unverified = unverified;
  // Parsed here, stored under the lock below.
  std::optional<std::vector<std::string>> models, cards;
  int capacity = 0;
  if (healthy && need_models) {
    auto listed = co_await get("/v1/models");
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    simdjson::dom::array data;
    if (listed && !parser.parse(*listed).get(doc) && !doc["data"].get_array().get(data)) {
      models.emplace();
      cards.emplace();
      for (simdjson::dom::element m : data) {
        std::string_view id;
        if (m["id"].get_string().get(id)) continue;
        models->emplace_back(id);
        cards->push_back(simdjson::minify(m));
        int64_t seqs;
        if (!m["max_num_seqs"].get_int64().get(seqs) && seqs > 0) capacity = static_cast<int>(seqs);
      }
    }
  }
  std::optional<std::string> engine_metrics;
  if (healthy) {
    // The engine's own view of its load, for least_load routing (vLLM's metric names).
    auto got = co_await get("/metrics");
    if (got) engine_metrics = std::move(*got);
  }
  std::lock_guard lock(mu_);
  if (admission_.backend(b.id) == nullptr) co_return;  // removed meanwhile
  if (models) {
    admission_.SetModels(b.id, std::move(*models), capacity);
    b.model_cards = std::move(*cards);
  }
  healthy = healthy && !admission_.backend(b.id)->models.empty();
  if (engine_metrics) {
    // For cache_aware routing also the size of the engine's prefix cache.
    admission_.SetEngineLoad(
        b.id, static_cast<int>(MetricSum(*engine_metrics, "vllm:num_requests_waiting")),
        static_cast<int>(MetricSum(*engine_metrics, "vllm:num_requests_running")),
        MetricSum(*engine_metrics, "vllm:kv_cache_usage_perc"),
        MetricLabelInt(*engine_metrics, "vllm:cache_config_info", "num_gpu_blocks"),
        MetricLabelInt(*engine_metrics, "vllm:cache_config_info", "block_size"));
  }
  b.checked = true;
  if (admission_.SetHealthy(b.id, healthy)) {
    spdlog::info("gateway: backend {} is {}", b.id, healthy ? "healthy" : "down");
    if (!healthy) {
      ClearPools(backend);
      admission_.ForgetCache(b.id);  // a restarted engine's cache is empty
    }
    DispatchAllLocked();
  }
}

void Gateway::SyncBackends(const std::vector<std::string>& stored) {
  for (const std::string& url : stored) {
    auto parsed = ParseBackendUrl(url);
    if (!parsed) continue;
    const AdmissionBackend* known = admission_.backend(parsed->url);
    if (known == nullptr) {
      if (auto ok = CheckBackendTransport(*parsed, options_.plain_remote_backends); !ok) {
        // Logged once per URL: the store's list is read again every refresh.
        if (refused_urls_.insert(parsed->url).second) {
          spdlog::error("gateway: {}", ok.error().message);
        }
        continue;
      }
      spdlog::info("gateway: backend {} added", parsed->url);
      backends_.push_back(
          std::make_shared<Backend>(workers_, *parsed, IdentityOf(*parsed), true));
      admission_.AddBackend(parsed->url);
      net::co_spawn(io_, CheckBackend(backends_.back()), LogFailure("gateway backend check"));
    } else if (known->state.draining) {
      admission_.SetDraining(parsed->url, false);
    }
  }
  // Backends removed from the store drain: no new requests, in-flight ones finish.
  for (auto it = backends_.begin(); it != backends_.end();) {
    Backend& b = **it;
    bool listed = std::find(stored.begin(), stored.end(), b.id) != stored.end();
    if (b.from_store && !listed) {
      const AdmissionBackend& known = *admission_.backend(b.id);
      if (!known.state.draining) spdlog::info("gateway: backend {} removed; draining", b.id);
      admission_.SetDraining(b.id, true);  // forgets its modelled cache
      if (known.state.in_flight == 0) {
        admission_.RemoveBackend(b.id);
        it = backends_.erase(it);
        continue;
      }
    }
    ++it;
  }
}

awaitable<void> Gateway::RefreshLoop() {
  net::steady_timer timer(io_);
  while (!stopping_) {
    std::vector<std::string> keys;
    {
      std::lock_guard lock(mu_);
      keys = keys_.Keys();
    }
    struct Snapshot {
      std::unordered_map<std::string, std::optional<std::string>> keys;
      std::unordered_map<std::string, UserLimits> users;
      std::vector<std::string> backends;
      std::unordered_set<std::string> deployed;
      bool ok = true;
    };
    auto read = [keys = std::move(keys)](Store& store) {
      Snapshot s;
      for (const std::string& k : keys) {
        auto who = store.Authenticate(k);
        if (!who) {
          s.ok = false;
          return s;
        }
        s.keys[k] = *who;
      }
      auto users = store.ListUsers();
      auto backends = store.ListBackends();
      auto deployments = store.ListDeployments();
      auto replicas = store.ListReplicas();
      if (!users || !backends || !deployments || !replicas) {
        s.ok = false;
        return s;
      }
      for (User& u : *users) s.users[u.name] = u.limits;
      BackendSet set = MergeBackendSources(*backends, *deployments, *replicas);
      s.backends = std::move(set.urls);
      s.deployed = std::move(set.deployed);
      return s;
    };
    Snapshot snapshot = co_await store_.Run(std::move(read));
    if (snapshot.ok) {
      std::lock_guard lock(mu_);
      // Keys presented while the snapshot was read stay; revocations apply from here.
      for (auto& [k, u] : snapshot.keys) keys_.Update(k, std::move(u));
      key_cache_entries_.Set(static_cast<double>(keys_.size()));
      users_ = std::move(snapshot.users);
      SyncBackends(snapshot.backends);
      deployed_ = std::move(snapshot.deployed);
      if (++refreshes_ % 60 == 0) limiter_.Prune(UnixNow());
    } else {
      spdlog::warn("gateway: cannot read the store; keeping the last users and keys");
    }
    timer.expires_after(options_.refresh_interval);
    beast::error_code ec;
    co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

}  // namespace bmas::gateway
