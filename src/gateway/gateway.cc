#include "gateway/gateway.h"

#include "common/backend_identity.h"
#include "gateway/backend_source.h"
#include "gateway/gateway_internal.h"

#include "gateway/request.h"
#include "gateway/sse.h"
#include "gateway/usage_report.h"
#include "common/operator_auth.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>

namespace bmas::gateway {


namespace {

std::vector<double> LatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

// How long after a user's last request the reserve is kept free for them.
constexpr double kReserveWindowS = 30;

// The users' listener: its handlers read one request field, the API key (HttpServer keeps
// Connection too); the dozen others a client sends are checked and dropped, not stored.
HttpServerOptions UsersListener(HttpServerOptions http) {
  http.request_fields = {http::field::authorization};
  return http;
}

}  // namespace

Gateway::Gateway(net::io_context& io, GatewayOptions options, StorePtr store)
    : Gateway(std::vector<net::io_context*>{&io}, std::move(options), std::move(store)) {}

Gateway::Gateway(std::vector<net::io_context*> workers, GatewayOptions options, StorePtr store)
    : workers_(std::move(workers)),
      io_(*workers_.at(0)),
      options_(std::move(options)),
      store_(std::move(store), options_.store_connections, options_.open_store),
      http_(workers_, UsersListener(options_.http),
            [this](HttpRequest& r, ResponseWriter& w) { return Handle(r, w); }),
      instance_id_(MakeInstanceId(options_.instance_id)),
      env_(*options_.env),
      epoch_(env_.Now()),
      admission_(AdmissionOptions{.fair = options_.fair,
                                  .reserve_fraction = options_.reserve_fraction,
                                  .default_capacity = options_.default_capacity,
                                  .reserve_window_s = kReserveWindowS},
                 options_.routing),
      fair_share_(instance_id_,
                  std::max(1.0, 5 * std::chrono::duration<double>(options_.fair_interval).count())),
      keys_(options_.key_cache_size),
      failed_keys_(options_.max_failed_keys, options_.failed_keys_window_s, kMaxFailedKeyAddresses),
      resumed_streams_(metrics_.AddCounter(
          "bmas_gateway_resumed_streams_total",
          "Streams whose backend went away mid-answer, continued on another backend.", "")),
      queue_wait_(metrics_.AddHistogram("bmas_gateway_queue_wait_seconds",
                                        "Time requests waited in the fair queue.", "",
                                        LatencyBuckets())),
      ttft_(metrics_.AddHistogram("bmas_gateway_time_to_first_token_seconds",
                                  "Time from a request's arrival to its first streamed token.", "",
                                  LatencyBuckets())),
      e2e_(metrics_.AddHistogram("bmas_gateway_request_duration_seconds",
                                 "Time from a request's arrival to the end of its response.", "",
                                 LatencyBuckets())),
      queue_depth_(
          metrics_.AddGauge("bmas_gateway_queue_depth", "Requests waiting in the fair queue.", "")),
      key_cache_entries_(metrics_.AddGauge("bmas_gateway_key_cache_entries",
                                           "API keys the gateway remembers (bounded LRU).", "")),
      key_lookups_(metrics_.AddCounter("bmas_gateway_key_lookups_total",
                                       "Store look-ups of API keys the gateway did not remember.",
                                       "")),
      keys_limited_(metrics_.AddCounter(
          "bmas_gateway_keys_limited_total",
          "Keys refused (429) without a look-up: their address sent too many unknown keys.", "")) {
  if (!options_.metrics_http.host.empty()) {
    metrics_http_ = std::make_unique<HttpServer>(
        workers_, options_.metrics_http,
        [this](HttpRequest& r, ResponseWriter& w) { return HandleMetrics(r, w); });
  }
  relaying_.resize(workers_.size());
  for (size_t i = 0; i < workers_.size(); ++i) {
    json_.push_back(std::make_unique<simdjson::dom::parser>());
  }
  for (const std::string& url : options_.backends) {
    auto parsed = ParseBackendUrl(url);
    if (!parsed || admission_.backend(parsed->url) != nullptr) continue;
    if (auto ok = CheckBackendTransport(*parsed, options_.plain_remote_backends); !ok) {
      spdlog::error("gateway: {}", ok.error().message);
      continue;
    }
    backends_.push_back(std::make_shared<Backend>(workers_, *parsed, IdentityOf(*parsed), false));
    admission_.AddBackend(parsed->url);
  }
  if (options_.usage_journal) {
    // What a gateway killed before its last flush left: in the journal until the first flush.
    int64_t requests = 0;
    for (UsageDelta& d : options_.usage_journal->TakeRecovered()) {
      requests += d.requests;
      MergeUnflushedLocked(std::move(d));
    }
    if (requests > 0) {
      spdlog::info("gateway: {} requests' usage that an earlier gateway had not flushed, from {}",
                   requests, options_.usage_journal->path());
    }
  }
}

Gateway::~Gateway() = default;

BackendIdentity Gateway::IdentityOf(const BackendUrl& url) const {
  BackendIdentity who;
  if (url.tls) who.tls = options_.backend_tls;
  if (options_.backend_api_key.empty()) return who;
  who.key = DeriveBackendKey(options_.backend_api_key, std::atoi(url.port.c_str()));
  who.verify = std::none_of(
      options_.unverified_backends.begin(), options_.unverified_backends.end(),
      [&](const std::string& u) {
        auto parsed = ParseBackendUrl(u);
        return parsed && parsed->url == url.url;
      });
  return who;
}

double Gateway::Now() const { return Since(env_.Now()); }

Result<uint16_t> Gateway::Listen() {
  auto port = http_.Listen();
  if (!port || !metrics_http_) return port;
  auto metrics = metrics_http_->Listen();
  if (!metrics) {
    return Error{metrics.error().code,
                 fmt::format("the metrics listener: {}", metrics.error().message)};
  }
  return port;
}

size_t Gateway::WorkerOf(const Executor& executor) const {
  const net::execution_context* context = &executor.context();
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i] == context) return i;
  }
  return 0;
}

void Gateway::ClearPools(const std::shared_ptr<Backend>& backend) {
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i]->get_executor().running_in_this_thread()) {
      backend->pools[i]->Clear();
    } else {
      net::post(*workers_[i], [backend, i] { backend->pools[i]->Clear(); });
    }
  }
}

void Gateway::Start() {
  http_.Start();
  if (metrics_http_) metrics_http_->Start();
  net::co_spawn(io_, HealthLoop(), LogFailure("gateway health checks"));
  net::co_spawn(io_, RefreshLoop(), LogFailure("gateway store refresh"));
  net::co_spawn(io_, FlushLoop(), LogFailure("gateway usage flush"));
  if (options_.shared_limits) {
    net::co_spawn(io_, FairnessLoop(), LogFailure("gateway fairness across gateways"));
  }
}

awaitable<void> Gateway::Stop(Clock::duration deadline) {
  // At the deadline, streams still relaying are cut the way a failed backend cuts them (an
  // SSE error event, then the end of the stream); the server then closes what is left.
  constexpr auto kCutGrace = std::chrono::seconds(2);
  net::steady_timer cut(io_, deadline);
  cut.async_wait([this](const beast::error_code& ec) {
    if (ec) return;
    cutting_ = true;
    for (size_t i = 0; i < workers_.size(); ++i) {
      net::post(*workers_[i], [this, i] {
        for (TcpStream* up : relaying_[i]) {
          beast::error_code ignored;
          up->socket().shutdown(tcp::socket::shutdown_both, ignored);
        }
      });
    }
  });
  co_await http_.Stop(deadline + kCutGrace);
  cut.cancel();
  if (metrics_http_) co_await metrics_http_->Stop(std::chrono::seconds(1));
  stopping_ = true;
  co_await Flush();
}

// ---- Request path -------------------------------------------------------------------------

awaitable<void> Gateway::Handle(HttpRequest& request, ResponseWriter& writer) {
  std::string target(request.target().substr(0, request.target().find('?')));
  if ((target == kCompletionsPath || target == kChatCompletionsPath || target == kResponsesPath) &&
      request.method() == http::verb::post) {
    return HandleCompletion(request, writer, std::move(target));
  }
  return HandleOther(request, writer, std::move(target));
}

awaitable<void> Gateway::HandleOther(HttpRequest& request, ResponseWriter& writer,
                                     std::string target) {
  const bool get = request.method() == http::verb::get;
  if (target == kCompletionsPath || target == kChatCompletionsPath || target == kResponsesPath) {
    co_await writer.SendError(http::status::method_not_allowed, target + " takes POST");
    co_return;
  }
  if (target == "/health" && get) {
    std::unique_lock lock(mu_);
    bool any = std::any_of(admission_.backends().begin(), admission_.backends().end(),
                           [](const auto& b) { return b->state.healthy; });
    lock.unlock();
    co_await writer.Send(any ? http::status::ok : http::status::service_unavailable,
                         "application/json",
                         any ? R"({"status":"ok"})" : R"({"status":"no healthy backend"})");
  } else if ((target == "/v1/models" || target == "/v1/usage") && get) {
    const Authenticated auth = co_await Authenticate(request, writer);
    const std::optional<std::string>& user = auth.user;
    if (!user) {
      co_await RefuseKey(auth, writer);
      co_return;
    }
    if (target == "/v1/usage") {
      co_await HandleUsage(*user, writer);
      co_return;
    }
    std::string body = ModelsJson();
    co_await writer.Send(http::status::ok, "application/json", std::move(body));
  } else {
    co_await writer.SendError(http::status::not_found, "no such path: " + target);
  }
}

awaitable<void> Gateway::HandleCompletion(HttpRequest& request, ResponseWriter& writer,
                                          std::string target) {
  const TimePoint start = env_.Now();
  auto fail = [&](http::status status, std::string message, std::string param = {},
                  ResponseWriter::Headers headers = {}) -> awaitable<void> {
    CountStatus(static_cast<int>(status));
    co_await writer.SendError(status, std::move(message), std::move(param), std::move(headers));
  };

  // A cached key needs no coroutine frame of Authenticate's.
  std::optional<Authenticated> at_once = AuthenticateAtOnce(request);
  if (!at_once) at_once = co_await Authenticate(request, writer);
  const Authenticated& auth = *at_once;
  const std::optional<std::string>& user = auth.user;
  if (!user) {
    CountStatus(auth.limited ? 429 : 401);
    co_await RefuseKey(auth, writer);
    co_return;
  }
  Request r;
  r.worker = WorkerOf(co_await net::this_coro::executor);
  r.user = *user;
  r.target = std::move(target);
  r.start = start;
  std::optional<int64_t> max_tokens;
  {
    // Only what routing, queuing and metering need; the backend validates the rest.
    auto fields = ParseCompletionBody(Reusable(json_[r.worker]), request.body());
    if (!fields) {
      co_await fail(http::status::bad_request, fields.error().message, fields.error().param);
      co_return;
    }
    r.model = std::move(fields->model);
    r.stream = fields->stream;
    r.client_wants_usage = fields->client_wants_usage;
    r.prompt_chars = fields->prompt_chars;
    max_tokens = fields->max_tokens;
    r.prefix_key = PrefixKey(fields->lead);
    if (options_.routing == RoutingPolicy::kCacheAware) {
      r.cache_blocks = PrefixBlockHashes(fields->lead);
      const int64_t rest = r.prompt_chars - static_cast<int64_t>(fields->lead.size());
      r.unhashed_blocks = rest > 0 ? static_cast<size_t>(rest) / kCacheBlockBytes + 1 : 0;
    }
  }
  if (r.stream && !r.client_wants_usage && r.target != kResponsesPath) {
    // Meter streams: ask the backend for the usage chunk; it is dropped on the way back. (A
    // Responses stream's last event carries the usage anyway.)
    r.upstream_body = WithIncludeUsage(request.body());
  } else {
    r.upstream_body = std::move(request.body());
  }

  bool known = false, healthy = false;
  LimitDecision decision;
  {
    std::lock_guard lock(mu_);
    auto limits_it = users_.find(r.user);
    const UserLimits limits = limits_it != users_.end() ? limits_it->second : UserLimits{};
    r.weight = limits.weight;
    r.prompt_estimate = EstimatePromptTokensLocked(r.model, r.prompt_chars);
    for (const auto& b : admission_.backends()) {
      if (b->Serves(r.model)) {
        known = true;
        healthy = healthy || b->Open();
      }
    }
    // A deployed model queues while its replicas start (scale from zero): the controller
    // sees the queue in /load and starts one.
    const bool deployed = deployed_.contains(r.model);
    known = known || deployed;
    healthy = healthy || deployed;
    if (known && healthy) {
      const double now = UnixNow();
      decision = limiter_.Start(r.user, limits, now);
    }
  }
  if (!known) {
    co_await fail(http::status::not_found, fmt::format("The model `{}` does not exist.", r.model),
                  "model");
    co_return;
  }
  if (!healthy) {
    co_await fail(http::status::service_unavailable,
                  fmt::format("no healthy backend serves model `{}` right now", r.model));
    co_return;
  }
  if (!decision.allowed) {
    ResponseWriter::Headers headers;
    headers.emplace_back(http::field::retry_after,
                         std::to_string(static_cast<int64_t>(std::ceil(decision.retry_after_s))));
    co_await fail(http::status::too_many_requests, decision.message, decision.limit,
                  std::move(headers));
    co_return;
  }
  struct EndGuard {
    std::mutex& mu;
    RateLimiter& limiter;
    const std::string& user;
    ~EndGuard() {
      std::lock_guard lock(mu);
      limiter.OnEnd(user);
    }
  } end_guard{mu_, limiter_, r.user};
  if (options_.shared_limits) {
    // The local check above is a fast pre-check; the store's answer decides.
    std::optional<Refusal> refused =
        co_await ReserveShared(r, max_tokens.value_or(options_.default_max_tokens));
    if (refused) {
      ResponseWriter::Headers headers;
      if (refused->status == http::status::too_many_requests) {
        headers.emplace_back(http::field::retry_after,
                             std::to_string(static_cast<int64_t>(
                                 std::max(1.0, std::ceil(refused->decision.retry_after_s)))));
      }
      co_await fail(refused->status, refused->decision.message, refused->decision.limit,
                    std::move(headers));
      co_return;
    }
  }
  // Settles the reservation to what was metered, however the request ends (a cut or failed
  // stream included).
  struct SettleGuard {
    Gateway& gw;
    const Request& r;
    ~SettleGuard() {
      if (r.reservation.empty()) return;
      gw.store_.Post([&gw = gw, id = r.reservation, used = r.metered](Store& store) {
        gw.SettleShared(store, id, used, 0);
      });
    }
  } settle_guard{*this, r};

  // A first attempt that fails before anything reached the client is retried once elsewhere.
  // A stream cut by its backend (preempted, dead) is resumed on another, a few times at most.
  Outcome outcome = co_await Attempt(r, writer, /*may_retry=*/true);
  if (outcome == Outcome::kRetry) outcome = co_await Attempt(r, writer, /*may_retry=*/false);
  while (outcome == Outcome::kResume) {
    // Another backend must be up, or coming (a deployment's replicas): a lone backend that died
    // ends its streams at once.
    bool other;
    {
      std::lock_guard lock(mu_);
      other = admission_.AnyOpen(r.model) || deployed_.contains(r.model);
    }
    Result<std::string> body =
        !other ? Result<std::string>(InvalidArgument(
                     fmt::format("no other backend serves model `{}`", r.model)))
        : r.resume->resumptions() < kMaxResumptions
            ? r.resume->NextBody()
            : Result<std::string>(
                  InvalidArgument(fmt::format("resumed {} times already", kMaxResumptions)));
    if (!body) {
      co_await EndStreamWithError(writer, fmt::format("the backend's stream ended early ({}); it "
                                                      "cannot be resumed: {}",
                                                      r.cut_reason, body.error().message));
      break;
    }
    spdlog::info("gateway: resuming a stream of {} for {} after {} tokens ({})", r.model, r.user,
                 r.resume->tokens(), r.cut_reason);
    resumed_streams_.Inc();
    r.upstream_body = std::move(*body);
    r.cut_reason.clear();
    outcome = co_await Attempt(r, writer, /*may_retry=*/false);
  }
}

awaitable<void> Gateway::EndStreamWithError(ResponseWriter& writer, std::string message) {
  if (!writer.ok()) co_return;
  std::string event =
      "data: " + ErrorJson(http::status::bad_gateway, std::move(message), "") + "\n\n";
  co_await writer.SendChunk(event);
  co_await writer.EndStream();
}

awaitable<Gateway::Outcome> Gateway::Attempt(Request& r, ResponseWriter& writer,
                                             bool may_retry) {
  const Executor executor = co_await net::this_coro::executor;
  std::shared_ptr<Backend> backend;
  std::shared_ptr<Waiter> waiter;  // only for a request that cannot be admitted at once
  TimePoint queued{};  // read only for a request that has to wait: one admitted at once waited 0
  Ticket ticket = 0;
  bool admitted;
  {
    std::lock_guard lock(mu_);
    const bool resumed = r.resume.has_value() && r.resume->resumptions() > 0;
    // A first attempt is admitted at the request's start, a clock read less; a later one now.
    const double now = r.attempted ? Now() : Since(r.start);
    r.attempted = true;
    const AdmissionView request{.model = r.model,
                                .user = r.user,
                                .weight = r.weight,
                                .prompt_estimate = r.prompt_estimate,
                                .prefix_key = r.prefix_key,
                                .cache_blocks = r.cache_blocks,
                                .unhashed_blocks = r.unhashed_blocks};
    // A resumed stream goes through the queue, before new requests.
    const std::string* id = resumed ? nullptr : admission_.AdmitAtOnce(request, now);
    if (id != nullptr) {
      backend = FindBackendLocked(*id);  // nothing waits for the model: no ticket, no waiter
      admitted = true;
      if (backend != nullptr) queue_wait_.Observe(0.0);  // so no second section below
    } else {
      waiter = std::make_shared<Waiter>(&r);
      ticket = admission_.Enqueue(AdmissionRequest::Of(request, resumed), now);
      waiters_[ticket] = waiter;
      DispatchLocked(r.model);
      admitted = waiter->backend != nullptr;
      if (!admitted) {
        waiter->wake.emplace(executor);
        queued = env_.Now();
      }
    }
  }
  bool client_gone = false;
  if (!admitted) {
    // Dispatch() on another worker wakes the timer through this worker, so no wake-up can
    // come between here and the wait. A client that leaves while queued gives its place up.
    writer.WatchForDisconnect([&client_gone, w = waiter.get()] {
      client_gone = true;
      w->wake->cancel();
    });
    waiter->wake->expires_after(options_.queue_timeout);
    beast::error_code ec;
    co_await waiter->wake->async_wait(net::redirect_error(use_awaitable, ec));
    writer.StopWatching();
  }
  if (waiter != nullptr || backend == nullptr) {
    std::lock_guard lock(mu_);
    if (waiter != nullptr) backend = waiter->backend;
    if (backend == nullptr) {  // timed out or the client left: not admitted meanwhile
      admission_.Remove(ticket);
      waiters_.erase(ticket);
    } else if (client_gone) {
      ReleaseLocked(*backend, r.user, r.model, env_.Now());
    } else {
      const double waited = admitted ? 0.0 : (env_.Now() - queued).count();
      queue_wait_.Observe(waited);
      r.queue_s += waited;
    }
  }
  bool retry = false;
  const bool resuming = r.resume.has_value() && r.resume->resumptions() > 0;
  if (client_gone) {
    CountStatus(499);  // nginx's "client closed request"
  } else if (backend == nullptr) {
    CountStatus(503);
    std::string message = fmt::format(
        "no backend for model `{}` became free within {} s; try again later", r.model,
        options_.queue_timeout.count() / 1000.0);
    if (resuming) {
      co_await EndStreamWithError(writer, "the stream's backend went away and " + message);
    } else {
      co_await writer.SendError(http::status::service_unavailable, std::move(message));
    }
  } else {
    // A kept-alive connection the backend has closed fails before any response byte: then one
    // more try on a new connection. (Here rather than in a coroutine of its own: one frame
    // less a request.)
    bool stale = false;
    Result<void> relayed = co_await RelayOnce(*backend, r, writer, stale);
    if (stale) {
      backend->pools[r.worker]->Clear();
      bool ignored = false;
      relayed = co_await RelayOnce(*backend, r, writer, ignored);
    }
    if (!relayed && resuming && r.cut_reason.empty() &&
        relayed.error().code == ErrorCode::kUnavailable) {
      r.cut_reason = relayed.error().message;  // failed before its replica sent anything
    }
    const bool cut = !relayed && !r.cut_reason.empty();
    // A whole response its backend never sent: 504, not tried elsewhere.
    const bool timed_out = !relayed && !writer.sent() && relayed.error().param == kTimeoutParam;
    bool other = false;
    {
      const TimePoint end = r.answered ? *r.answered : env_.Now();
      std::lock_guard lock(mu_);
      ReleaseLocked(*backend, r.user, r.model, end);  // may remove a drained backend
      if (relayed) {
        CountStatusLocked(200);
        e2e_.Observe((end - r.start).count());
      } else if (cut || timed_out) {
        admission_.SetHealthy(backend->id, false);  // until its health check passes
      } else if (relayed.error().code == ErrorCode::kUnavailable && !writer.sent()) {
        admission_.SetHealthy(backend->id, false);  // until its health check passes
        other = admission_.AnyOpen(r.model);
      }
    }
    if (relayed) {
      // Counted above, under the lock.
    } else if (cut) {
      ClearPools(backend);
      co_return Outcome::kResume;
    } else if (timed_out) {
      spdlog::warn("gateway: backend {} is down: {}", backend->id, relayed.error().message);
      ClearPools(backend);
      CountStatus(504);
      std::string message = relayed.error().message;
      co_await writer.SendError(http::status::gateway_timeout, std::move(message));
    } else if (relayed.error().code == ErrorCode::kUnavailable && !writer.sent()) {
      // Nothing reached the client: the backend is out until its health check passes.
      spdlog::warn("gateway: backend {} is down: {}", backend->id, relayed.error().message);
      ClearPools(backend);
      retry = may_retry && other;
      if (!retry) {
        CountStatus(503);
        std::string message = fmt::format("backends for model `{}` failed: {}", r.model,
                                          relayed.error().message);
        co_await writer.SendError(http::status::service_unavailable, std::move(message));
      }
    } else {
      CountStatus(writer.sent() ? 200 : 502);
      if (!writer.sent()) {
        std::string message = relayed.error().message;
        co_await writer.SendError(http::status::bad_gateway, std::move(message));
      }
    }
  }
  co_return retry ? Outcome::kRetry : Outcome::kDone;
}

void Gateway::CountStatus(int status) {
  std::lock_guard lock(mu_);
  CountStatusLocked(status);
}

void Gateway::CountStatusLocked(int status) {
  auto it = requests_by_status_.find(status);
  if (it == requests_by_status_.end()) {
    it = requests_by_status_
             .emplace(status, &metrics_.AddCounter("bmas_gateway_requests_total",
                                                   "Requests by HTTP status.",
                                                   fmt::format("status=\"{}\"", status)))
             .first;
  }
  it->second->Inc();
}

void Gateway::DispatchLocked(const std::string& model) {
  CarryOutLocked(admission_.Dispatch(model, Now()));
}

void Gateway::DispatchAllLocked() { CarryOutLocked(admission_.DispatchAll(Now())); }

void Gateway::ReleaseLocked(Backend& b, const std::string& user, const std::string& model,
                            TimePoint now) {
  CarryOutLocked(admission_.Release(b.id, user, model, Since(now)));
  if (admission_.backend(b.id) == nullptr) {  // drained
    std::erase_if(backends_, [&](const auto& p) { return p.get() == &b; });
  }
}

std::shared_ptr<Gateway::Backend> Gateway::FindBackendLocked(const std::string& id) const {
  for (const auto& b : backends_) {
    if (b->id == id) return b;
  }
  return nullptr;
}

void Gateway::CarryOutLocked(const std::vector<Admit>& admitted) {
  for (const Admit& a : admitted) {
    auto w = waiters_.find(a.ticket);
    if (w == waiters_.end()) continue;  // never: every queued ticket has its waiter
    std::shared_ptr<Waiter> waiter = std::move(w->second);
    waiters_.erase(w);
    waiter->backend = FindBackendLocked(a.backend);
    // The timer belongs to the waiter's worker: cancel it there. No timer: admitted by its
    // own Attempt, which is not waiting.
    if (!waiter->wake) {
    } else if (workers_[waiter->request->worker]->get_executor().running_in_this_thread()) {
      waiter->wake->cancel();
    } else {
      net::post(waiter->wake->get_executor(), [waiter] { waiter->wake->cancel(); });
    }
  }
  queue_depth_.Set(static_cast<double>(admission_.queued()));
}

}  // namespace bmas::gateway
