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

using Clock = std::chrono::steady_clock;

namespace {

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double UnixNowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<double> LatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

// The gateway's reused parser; replaced first if an earlier large document grew its buffers
// past 1 MiB, so that one large body does not stay in memory.
simdjson::dom::parser& Reusable(std::unique_ptr<simdjson::dom::parser>& parser) {
  if (parser->capacity() > (size_t{1} << 20)) parser = std::make_unique<simdjson::dom::parser>();
  return *parser;
}

// Parses the body bytes already in `buffer` into `chunk`, reading nothing; returns how many it
// put there. Stops when `chunk` is full, the message is done or more bytes must be read.
size_t ParseBuffered(beast::flat_buffer& buffer, http::response_parser<http::buffer_body>& parser,
                     std::array<char, 16384>& chunk, beast::error_code& ec) {
  parser.get().body().data = chunk.data();
  parser.get().body().size = chunk.size();
  parser.eager(true);
  while (!parser.is_done() && buffer.size() > 0) {
    const size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == http::error::need_more || ec == http::error::need_buffer) {
      ec = {};
      break;
    }
    if (ec || used == 0) break;
  }
  return chunk.size() - parser.get().body().size;
}

// How long after a user's last request the reserve is kept free for them.
constexpr double kReserveWindowS = 30;

}  // namespace

struct Gateway::Request {
  size_t worker = 0;  // the worker the client's connection runs on
  std::string user;
  double weight = 1;
  std::string model;
  std::string target;         // /v1/completions or /v1/chat/completions
  std::string upstream_body;  // the client's body, with include_usage added to streams
  bool stream = false;
  bool client_wants_usage = false;
  int64_t prompt_chars = 0;     // bytes of prompt text
  int64_t prompt_estimate = 0;  // tokens, from prompt_chars, until the backend reports usage
  std::optional<uint64_t> prefix_key;
  std::vector<uint64_t> cache_blocks;  // cache_aware: PrefixBlockHashes of the lead
  size_t unhashed_blocks = 0;          // cache_aware: prompt blocks past the lead's
  Clock::time_point start;
  // A stream that reached the client: what it was sent, to resume it on another backend.
  std::optional<StreamResume> resume;
  std::string cut_reason;  // set by RelayOnce when the stream was cut and may be resumed
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

Gateway::Gateway(net::io_context& io, GatewayOptions options, StorePtr store)
    : Gateway(std::vector<net::io_context*>{&io}, std::move(options), std::move(store)) {}

Gateway::Gateway(std::vector<net::io_context*> workers, GatewayOptions options, StorePtr store)
    : workers_(std::move(workers)),
      io_(*workers_.at(0)),
      options_(std::move(options)),
      store_(std::move(store)),
      http_(workers_, options_.http,
            [this](HttpRequest& r, ResponseWriter& w) { return Handle(r, w); }),
      epoch_(Clock::now()),
      admission_(AdmissionOptions{.fair = options_.fair,
                                  .reserve_fraction = options_.reserve_fraction,
                                  .default_capacity = options_.default_capacity,
                                  .reserve_window_s = kReserveWindowS},
                 options_.routing),
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
      queue_depth_(metrics_.AddGauge("bmas_gateway_queue_depth", "Requests waiting in the fair queue.", "")),
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
    backends_.push_back(std::make_shared<Backend>(workers_, *parsed, IdentityOf(*parsed), false));
    admission_.AddBackend(parsed->url);
  }
}

Gateway::~Gateway() = default;

BackendIdentity Gateway::IdentityOf(const BackendUrl& url) const {
  BackendIdentity who;
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

double Gateway::Now() const { return std::chrono::duration<double>(Clock::now() - epoch_).count(); }

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

size_t Gateway::WorkerOf(const net::any_io_executor& executor) const {
  const net::execution_context* context = &net::query(executor, net::execution::context);
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
  const bool get = request.method() == http::verb::get;
  if (target == "/v1/completions" || target == "/v1/chat/completions") {
    if (request.method() != http::verb::post) {
      co_await writer.SendError(http::status::method_not_allowed, target + " takes POST");
      co_return;
    }
    co_await HandleCompletion(request, writer, std::move(target));
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

awaitable<void> Gateway::HandleMetrics(HttpRequest& request, ResponseWriter& writer) {
  if (!co_await RequireOperator(request, writer, options_.operator_secret)) co_return;
  std::string target(request.target().substr(0, request.target().find('?')));
  if (target == "/metrics" && request.method() == http::verb::get) {
    std::string text = RenderMetrics();
    co_await writer.Send(http::status::ok, "text/plain; version=0.0.4; charset=utf-8",
                         std::move(text));
  } else if (target == "/load" && request.method() == http::verb::get) {
    co_await writer.Send(http::status::ok, "application/json", LoadJson());
  } else {
    co_await writer.SendError(http::status::not_found, "no such path: " + target);
  }
}

awaitable<void> Gateway::HandleUsage(const std::string& user, ResponseWriter& writer) {
  // Today (UTC), as tokens_per_day counts, and the caller's own limits.
  const int64_t since = UnixNow() / 86400 * 86400;
  // An optional, not a Result: what the store thread hands back must be default-constructible.
  auto query = [user, since](Store& store) {
    auto found = store.QueryUsage(user, since);
    return found ? std::optional<std::vector<UsageRow>>(std::move(*found)) : std::nullopt;
  };
  std::optional<std::vector<UsageRow>> rows = co_await store_.Run(std::move(query));
  if (!rows) {
    co_await writer.SendError(http::status::service_unavailable,
                              "usage cannot be read right now; try again later");
    co_return;
  }
  UserLimits limits;
  {
    std::lock_guard lock(mu_);
    if (auto it = users_.find(user); it != users_.end()) limits = it->second;
  }
  std::string body = UsageReportJson(user, since, *rows, limits);
  co_await writer.Send(http::status::ok, "application/json", std::move(body));
}

awaitable<Gateway::Authenticated> Gateway::Authenticate(const HttpRequest& request,
                                                        const ResponseWriter& writer) {
  auto header = request[http::field::authorization];
  constexpr std::string_view kBearer = "Bearer ";
  // Before any look-up: only a bearer of a key's form and length is worth one, or a place in
  // the cache.
  if (header.size() <= kBearer.size() || header.size() > kBearer.size() + kMaxKeyLength ||
      header.substr(0, kBearer.size()) != kBearer) {
    co_return Authenticated{};
  }
  std::string key(header.substr(kBearer.size()));
  if (!IsWellFormedKey(key)) co_return Authenticated{};
  const std::string address = writer.remote_address();
  {
    std::lock_guard lock(mu_);
    if (auto cached = keys_.Get(key)) co_return Authenticated{std::move(cached)};
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

awaitable<void> Gateway::HandleCompletion(HttpRequest& request, ResponseWriter& writer,
                                          std::string target) {
  const Clock::time_point start = Clock::now();
  auto fail = [&](http::status status, std::string message, std::string param = {},
                  ResponseWriter::Headers headers = {}) -> awaitable<void> {
    CountStatus(static_cast<int>(status));
    co_await writer.SendError(status, std::move(message), std::move(param), std::move(headers));
  };

  const Authenticated auth = co_await Authenticate(request, writer);
  const std::optional<std::string>& user = auth.user;
  if (!user) {
    CountStatus(auth.limited ? 429 : 401);
    co_await RefuseKey(auth, writer);
    co_return;
  }
  Request r;
  r.worker = WorkerOf(co_await net::this_coro::executor);
  r.user = *user;
  r.target = target;
  r.start = start;
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
    r.prefix_key = PrefixKey(fields->lead);
    if (options_.routing == RoutingPolicy::kCacheAware) {
      r.cache_blocks = PrefixBlockHashes(fields->lead);
      const int64_t rest = r.prompt_chars - static_cast<int64_t>(fields->lead.size());
      r.unhashed_blocks = rest > 0 ? static_cast<size_t>(rest) / kCacheBlockBytes + 1 : 0;
    }
  }
  if (r.stream && !r.client_wants_usage) {
    // Meter streams: ask the backend for the usage chunk; it is dropped on the way back.
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
      decision = limiter_.Check(r.user, limits, UnixNowSeconds());
      if (decision.allowed) limiter_.OnStart(r.user, UnixNowSeconds());
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
  const net::any_io_executor executor = co_await net::this_coro::executor;
  auto waiter = std::make_shared<Waiter>(&r);
  const Clock::time_point queued = Clock::now();
  Ticket ticket;
  bool admitted;
  {
    std::lock_guard lock(mu_);
    ticket = admission_.Enqueue(AdmissionRequest{.model = r.model,
                                                 .user = r.user,
                                                 .weight = r.weight,
                                                 .prompt_estimate = r.prompt_estimate,
                                                 .prefix_key = r.prefix_key,
                                                 .cache_blocks = r.cache_blocks,
                                                 .unhashed_blocks = r.unhashed_blocks,
                                                 .resumed = r.resume.has_value() &&
                                                            r.resume->resumptions() > 0},
                                Now());
    waiters_[ticket] = waiter;
    DispatchLocked(r.model);
    admitted = waiter->backend != nullptr;
    if (!admitted) waiter->wake.emplace(executor);
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
  std::shared_ptr<Backend> backend;
  {
    std::lock_guard lock(mu_);
    backend = waiter->backend;
    if (backend == nullptr) {  // timed out or the client left: not admitted meanwhile
      admission_.Remove(ticket);
      waiters_.erase(ticket);
    } else if (client_gone) {
      ReleaseLocked(*backend, r.user, r.model);
    } else {
      queue_wait_.Observe(std::chrono::duration<double>(Clock::now() - queued).count());
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
    Result<void> relayed = co_await Relay(*backend, r, writer);
    if (!relayed && resuming && r.cut_reason.empty() &&
        relayed.error().code == ErrorCode::kUnavailable) {
      r.cut_reason = relayed.error().message;  // failed before its replica sent anything
    }
    const bool cut = !relayed && !r.cut_reason.empty();
    // A whole response its backend never sent: 504, not tried elsewhere.
    const bool timed_out = !relayed && !writer.sent() && relayed.error().param == kTimeoutParam;
    bool other = false;
    {
      std::lock_guard lock(mu_);
      ReleaseLocked(*backend, r.user, r.model);  // may remove a drained backend
      if (relayed) {
        CountStatusLocked(200);
        e2e_.Observe(std::chrono::duration<double>(Clock::now() - r.start).count());
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

int64_t Gateway::EstimatePromptTokensLocked(const std::string& model, int64_t chars) const {
  auto it = prompt_ratio_.find(model);
  return it != prompt_ratio_.end() ? it->second.Estimate(chars) : CharsPerToken().Estimate(chars);
}

void Gateway::LearnPromptRatio(const std::string& model, int64_t chars, int64_t tokens) {
  std::lock_guard lock(mu_);
  prompt_ratio_[model].Learn(chars, tokens);
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

void Gateway::ReleaseLocked(Backend& b, const std::string& user, const std::string& model) {
  CarryOutLocked(admission_.Release(b.id, user, model, Now()));
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

awaitable<Result<void>> Gateway::Relay(Backend& b, Request& r, ResponseWriter& writer) {
  // A kept-alive connection the backend has closed fails before any response byte: then one
  // more try on a new connection. (No `continue` or early co_return in loops here: GCC 12
  // destroys such coroutine locals twice.)
  bool stale = false;
  Result<void> result = co_await RelayOnce(b, r, writer, stale);
  if (stale) {
    b.pools[r.worker]->Clear();
    bool ignored = false;
    result = co_await RelayOnce(b, r, writer, ignored);
  }
  co_return result;
}

awaitable<Result<void>> Gateway::RelayOnce(Backend& b, Request& r, ResponseWriter& writer,
                                           bool& stale) {
  bool reused = false;
  ConnectionPool& pool = *b.pools[r.worker];
  auto acquired = co_await pool.Acquire(options_.connect_timeout, reused);
  if (!acquired) co_return acquired.error();
  std::unique_ptr<TcpStream> up = std::move(*acquired);

  // The request's head by hand and the body by reference, in one async_write: Beast's
  // serializer would cost several times the syscall, and a copy of the body.
  std::string head;
  head.reserve(128 + b.url.base_path.size() + b.url.host.size());
  head.append("POST ").append(b.url.base_path).append(r.target).append(" HTTP/1.1\r\nHost: ");
  head.append(b.url.host).append(":").append(b.url.port);
  if (!b.identity.key.empty()) {
    head.append("\r\nAuthorization: Bearer ").append(b.identity.key);
  }
  head.append("\r\nContent-Type: application/json\r\nContent-Length: ");
  head.append(std::to_string(r.upstream_body.size())).append("\r\n\r\n");
  const std::array<net::const_buffer, 2> request_buffers{net::buffer(head),
                                                         net::buffer(r.upstream_body)};
  // A backend that takes nothing or sends nothing for longer than the idle timeout hangs; a
  // stream's backend answers at once and then sends a token at a time.
  const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(
      options_.upstream_idle_timeout);
  beast::error_code ec;
  up->expires_after(idle);
  co_await net::async_write(*up, request_buffers, net::redirect_error(use_awaitable, ec));
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (!ec) {
    up->expires_after(idle);
    co_await http::async_read_header(*up, buffer, parser, net::redirect_error(use_awaitable, ec));
  }
  if (ec) {
    const bool hung = ec == beast::error::timeout;
    stale = reused && !hung;
    // A stream is tried on another backend; a whole response is not (it may have been
    // generated, and the client has waited the idle timeout already).
    co_return Error{ErrorCode::kUnavailable,
                    hung ? fmt::format("backend {} sent no response within {} ms", b.id,
                                       idle.count())
                         : fmt::format("{}: {}", b.id, ec.message()),
                    hung && !r.stream ? std::string(kTimeoutParam) : std::string()};
  }

  // While the response is read, a client that goes away cancels the upstream request:
  // closing the connection makes vLLM (and bmas engine) abort it.
  TcpStream* upstream = up.get();
  // Set when the client went away: the upstream was closed for it, which is not a cut to
  // resume.
  auto client_left = std::make_shared<bool>(false);
  auto watch = [&writer, upstream, client_left] {
    writer.WatchForDisconnect([upstream, client_left] {
      *client_left = true;
      beast::error_code ignored;
      upstream->socket().shutdown(tcp::socket::shutdown_both, ignored);
      upstream->socket().close(ignored);
    });
  };
  struct StopWatch {
    ResponseWriter& w;
    ~StopWatch() { w.StopWatching(); }
  } stop_watch{writer};

  const auto status = parser.get().result();
  const std::string content_type(parser.get()[http::field::content_type]);
  const bool sse = status == http::status::ok && content_type.rfind("text/event-stream", 0) == 0;
  std::array<char, 16384> chunk;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  Result<void> result;
  // A resumed stream: the client's stream is open already; this backend continues it.
  const bool resuming = r.resume.has_value() && r.resume->resumptions() > 0;

  if (sse) watch();
  if (!sse) {
    std::string body;
    // What came with the header, often the whole response: then no watch and no more reads.
    while (!parser.is_done() && !ec && buffer.size() > 0) {
      const size_t n = ParseBuffered(buffer, parser, chunk, ec);
      if (n == 0) break;
      body.append(chunk.data(), n);
    }
    if (!parser.is_done() && !ec) watch();
    while (!parser.is_done() && !ec) {
      up->expires_after(idle);
      size_t n = co_await ReadSome(*up, buffer, parser, chunk, ec);
      body.append(chunk.data(), n);
    }
    if (ec == beast::error::timeout) {
      result = Error{ErrorCode::kUnavailable,
                     fmt::format("backend {} sent nothing of its response for {} ms", b.id,
                                 idle.count()),
                     std::string(kTimeoutParam)};
    } else if (ec) {
      result = Error{ErrorCode::kUnavailable,
                     fmt::format("{}: reading the response: {}", b.id, ec.message())};
    } else {
      std::optional<TokenUsage> usage;
      if (status == http::status::ok) usage = ReadUsage(Reusable(json_[r.worker]), body);
      if (usage) {
        prompt_tokens = usage->prompt_tokens;
        completion_tokens = usage->completion_tokens;
        LearnPromptRatio(r.model, r.prompt_chars, prompt_tokens);
        Meter(r, b, prompt_tokens, completion_tokens);
      }
      // The watch's callback closes `up`: it must end before the pool owns `up` (and may
      // lend it to another request or destroy it) while the response is still written.
      writer.StopWatching();
      if (parser.keep_alive()) pool.Release(std::move(up));
      // The view is made outside the co_await: GCC 12 destroys temporaries in it twice.
      const std::string_view type =
          content_type.empty() ? std::string_view("application/json") : content_type;
      if (resuming) {
        std::string message = fmt::format(
            "the stream's backend went away and {} refused to continue it: HTTP {}: {}",
            b.id, static_cast<int>(status), body.substr(0, 512));
        result = Error{ErrorCode::kInternal, message};
        co_await EndStreamWithError(writer, std::move(message));
      } else {
        co_await writer.Send(status, type, std::move(body));
      }
    }
  } else if (resuming ||
             co_await writer.StartStream(http::status::ok, "text/event-stream; charset=utf-8")) {
    if (!r.resume) r.resume.emplace(r.upstream_body, r.target == "/v1/chat/completions");
    SseSplitter events;
    std::string out, token, rewritten;
    bool done = false, usage_seen = false, first = !resuming, client_gone = false;
    int64_t content_events = 0;
    relaying_[r.worker].insert(upstream);
    struct Unlist {
      std::unordered_set<TcpStream*>& set;
      TcpStream* up;
      ~Unlist() { set.erase(up); }
    } unlist{relaying_[r.worker], upstream};
    while (!parser.is_done() && !ec && !client_gone && !cutting_) {
      up->expires_after(idle);
      size_t n = co_await ReadSome(*up, buffer, parser, chunk, ec);
      events.Append(std::string_view(chunk.data(), n));
      if (events.overflowed() && !ec) ec = http::error::body_limit;
      out.clear();
      int64_t streamed = 0;
      for (std::string_view e = events.Next(); !e.empty(); e = events.Next()) {
        bool forward = true;
        token.clear();
        switch (ClassifySseEvent(Reusable(json_[r.worker]), e, &token)) {
          case SseEventKind::kDone:
            done = true;
            break;
          case SseEventKind::kUsage:
            if (auto usage = ReadUsage(Reusable(json_[r.worker]), e.substr(6))) {
              usage_seen = true;
              prompt_tokens = usage->prompt_tokens;
              completion_tokens = usage->completion_tokens;
            }
            forward = r.client_wants_usage;
            break;
          case SseEventKind::kContent:
            ++streamed;
            if (r.resume->tokens() == 0) r.resume->LearnIdentity(e);
            r.resume->OnToken(token);
            break;
          case SseEventKind::kOther:
            break;
        }
        if (forward && resuming) {
          rewritten = r.resume->Rewrite(e);
          out.append(rewritten);
        } else if (forward) {
          out.append(e);
        }
      }
      content_events += streamed;
      if (streamed > 0 || (first && !out.empty())) {
        // Output counts for fairness as it streams, not only when the request ends.
        std::lock_guard lock(mu_);
        if (streamed > 0) admission_.Charge(r.model, r.user, r.weight, streamed);
        if (first && !out.empty()) {
          ttft_.Observe(std::chrono::duration<double>(Clock::now() - r.start).count());
        }
      }
      if (!out.empty()) {
        first = false;
        client_gone = !co_await writer.SendChunk(out);  // then the upstream is dropped
      }
    }
    const bool hung = ec == beast::error::timeout;
    // Cut by the backend (not by the client, the gateway's own stop, or an event too large):
    // resumed on another backend by Attempt's caller.
    const bool cut = !done && !client_gone && !*client_left && !cutting_ && writer.ok() &&
                     !events.overflowed();
    if (usage_seen && !resuming) {
      LearnPromptRatio(r.model, r.prompt_chars, prompt_tokens);
    } else if (usage_seen) {  // the first attempt metered the prompt (estimated)
      prompt_tokens = 0;
    } else {  // cut short: meter what was streamed
      prompt_tokens = resuming ? 0 : r.prompt_estimate;
      completion_tokens = content_events;
    }
    Meter(r, b, prompt_tokens, completion_tokens, /*already_charged=*/content_events);
    if (hung) {
      // The backend is out until its health check passes (a stopped process fails it).
      {
        std::lock_guard lock(mu_);
        admission_.SetHealthy(b.id, false);
      }
      spdlog::warn("gateway: backend {} is down: its stream sent nothing for {} ms", b.id,
                   idle.count());
    }
    std::string reason = cutting_ ? std::string("the gateway is shutting down")
                         : hung          ? fmt::format("no data for {} ms", idle.count())
                         : ec            ? ec.message()
                                         : std::string("no [DONE]");
    if (cut) {
      r.cut_reason = fmt::format("{}: {}", b.id, reason);
      result = Error{ErrorCode::kUnavailable, r.cut_reason};
    } else if (!done && writer.ok()) {
      co_await EndStreamWithError(writer,
                                  fmt::format("the backend's stream ended early: {}", reason));
    } else if (writer.ok()) {
      co_await writer.EndStream();
    }
    if (parser.is_done() && parser.keep_alive() && !ec && !client_gone) {
      writer.StopWatching();  // as above: before the pool owns `up`
      pool.Release(std::move(up));
    }
  }
  co_return result;
}

awaitable<size_t> Gateway::ReadSome(TcpStream& stream, beast::flat_buffer& buffer,
                                    http::response_parser<http::buffer_body>& parser,
                                    std::array<char, 16384>& chunk, beast::error_code& ec) {
  parser.get().body().data = chunk.data();
  parser.get().body().size = chunk.size();
  co_await http::async_read_some(stream, buffer, parser, net::redirect_error(use_awaitable, ec));
  if (ec == http::error::need_buffer) ec = {};
  co_return chunk.size() - parser.get().body().size;
}

void Gateway::Meter(const Request& r, const Backend& b, int64_t prompt, int64_t completion,
                    int64_t already_charged) {
  const int64_t minute = UnixNow() / 60;
  const std::tuple<int64_t, std::string_view, std::string_view, std::string_view> key(
      minute, r.user, r.model, b.id);
  std::lock_guard lock(mu_);
  auto entry = unflushed_.find(key);
  if (entry == unflushed_.end()) {
    entry = unflushed_
                .emplace(std::make_tuple(minute, r.user, r.model, b.id),
                         UsageDelta{minute, r.user, r.model, b.id, 0, 0, 0})
                .first;
  }
  UsageDelta& d = entry->second;
  d.requests += 1;
  d.prompt_tokens += prompt;
  d.completion_tokens += completion;
  limiter_.OnTokens(r.user, prompt + completion, UnixNowSeconds());
  // The fair queue was charged the prompt estimate at admission and streamed tokens as they
  // passed; the rest of the true usage is charged now.
  admission_.Charge(r.model, r.user, r.weight,
                    prompt - r.prompt_estimate + completion - already_charged);
  for (const auto& [kind, n] : {std::pair<const char*, int64_t>{"prompt", prompt}, {"completion", completion}}) {
    auto it = tokens_.find(std::tuple<std::string_view, std::string_view, std::string_view>(
        r.user, r.model, kind));
    if (it == tokens_.end()) {
      it = tokens_
               .emplace(std::make_tuple(r.user, r.model, std::string(kind)),
                        &metrics_.AddCounter(
                               "bmas_gateway_tokens_total", "Tokens metered, by user, model and kind.",
                               fmt::format("user=\"{}\",model=\"{}\",kind=\"{}\"",
                                           EscapeLabelValue(r.user), EscapeLabelValue(r.model), kind)))
               .first;
    }
    it->second->Inc(static_cast<double>(n));
  }
}

// ---- Background work ----------------------------------------------------------------------

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
  const bool unverified = !health && health.error().param == kIdentityParam;
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
      if (++refreshes_ % 60 == 0) limiter_.Prune(UnixNowSeconds());
    } else {
      spdlog::warn("gateway: cannot read the store; keeping the last users and keys");
    }
    timer.expires_after(options_.refresh_interval);
    beast::error_code ec;
    co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

awaitable<void> Gateway::Flush() {
  std::vector<UsageDelta> deltas;
  {
    std::lock_guard lock(mu_);
    for (auto& [key, d] : unflushed_) deltas.push_back(std::move(d));
    unflushed_.clear();
  }
  if (deltas.empty()) co_return;
  auto write = [deltas = std::move(deltas)](Store& store) { return store.RecordUsage(deltas); };
  Result<void> written = co_await store_.Run(std::move(write));
  if (!written) spdlog::error("gateway: usage not recorded: {}", written.error().message);
}

awaitable<void> Gateway::FlushLoop() {
  net::steady_timer timer(io_);
  while (!stopping_) {
    timer.expires_after(options_.flush_interval);
    beast::error_code ec;
    co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
    co_await Flush();
  }
}

}  // namespace bmas::gateway
