#pragma once

// `bmas gateway`: the multi-tenant OpenAI-compatible front of a pool of vLLM (or `bmas engine`)
// backends. Request path: authenticate -> limits -> fair queue -> route -> relay -> meter.
//
// Connections run on N worker io_contexts, one thread each (`--threads N`); the first also runs
// the background loops (health checks, store refresh, usage flush). State shared by all
// requests (queues, limits, backends' counts, usage, metrics) is guarded by one mutex held only
// in short sections that never suspend; each worker has its own upstream connection pools and
// JSON parser. SQLite work goes to a StoreWorker thread. Users, keys and backends are re-read from the store every second, so
// changes made with `bmas user`, `bmas key` and `bmas gateway backend` take effect live.

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/asio.h"
#include "common/env.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/read_buffer.h"
#include "gateway/admission.h"
#include "gateway/fair_queue.h"
#include "gateway/key_cache.h"
#include "gateway/rate_limiter.h"
#include "gateway/request.h"
#include "gateway/resume.h"
#include "gateway/router.h"
#include "gateway/store_worker.h"
#include "gateway/upstream.h"
#include "gateway/upstream_parser.h"
#include "gateway/usage_journal.h"
#include "store/store.h"

namespace simdjson::dom {
class parser;
}

namespace bmas::gateway {

// Orders tuple keys of strings against tuples of views (or other strings) element by element,
// so that a map keyed by owned strings is searched with views and allocates nothing. (std::less<>
// does this through tuple's operator<=> with GCC, but not with clang 14.)
struct ViewTupleLess {
  using is_transparent = void;
  template <class A, class B>
  bool operator()(const A& a, const B& b) const {
    return Views(a) < Views(b);
  }

 private:
  static std::string_view View(std::string_view s) { return s; }
  static int64_t View(int64_t n) { return n; }
  template <class... T>
  static auto Views(const std::tuple<T...>& t) {
    return std::apply([](const auto&... x) { return std::make_tuple(View(x)...); }, t);
  }
};

struct GatewayOptions {
  HttpServerOptions http;
  std::vector<std::string> backends;  // base URLs given on the command line / config
  RoutingPolicy routing = RoutingPolicy::kCacheAware;
  bool fair = true;                // vtc; false = FCFS
  double reserve_fraction = 0.25;  // of a backend's admission limit, kept for other users
  int default_capacity = 64;       // admission limit when a backend reports no max_num_seqs
  std::chrono::milliseconds queue_timeout{30000};
  std::chrono::milliseconds health_interval{1000};
  std::chrono::milliseconds refresh_interval{1000};  // users, keys, backends from the store
  std::chrono::milliseconds flush_interval{500};     // metered usage to the store
  std::chrono::milliseconds connect_timeout{2000};
  // A backend that sends (or takes) nothing of a request for this long hangs: a stream ends
  // with an SSE error event, a whole response with 504, and the backend is marked down until
  // its health check passes.
  std::chrono::milliseconds upstream_idle_timeout{30000};
  size_t key_cache_size = 10000;  // API keys remembered (LRU)
  // Well-formed keys the store does not know, per client address and window: past this, that
  // address gets 429 and no store look-up until the window ends (FailedKeyLimiter).
  int max_failed_keys = 20;
  double failed_keys_window_s = 60;
  // Operator data (/metrics) is served here only, never on the users' listener.
  // An empty host: no metrics listener.
  HttpServerOptions metrics_http;
  // What the metrics listener asks for (common/operator_auth.h): "Bearer <operator_secret>";
  // "" refuses everyone. A secret: never logged.
  std::string operator_secret;
  // The backend secret: each backend's key (vLLM's --api-key, sent as `Authorization: Bearer`)
  // is DeriveBackendKey(backend_api_key, its port), and a backend proves it holds its key
  // (common/backend_identity.h) on each new connection before the key or a request is sent on
  // it. "" = no keys and no challenge. A secret: never logged.
  std::string backend_api_key;
  // Backends (URLs as given) that are not challenged: real vLLM servers, which do not answer
  // the challenge. Safe only on a port no user can bind (below 1024, or another host).
  std::vector<std::string> unverified_backends;
  // What https:// backends (replicas on other nodes) are checked with: a client context that
  // trusts the cluster CA (BackendTlsContext). Null: https:// backends cannot be reached.
  std::shared_ptr<net::ssl::context> backend_tls;
  // Plain http:// backends off loopback are refused (CheckBackendTransport) unless this is set:
  // only for a network the operator trusts with users' prompts and answers.
  bool plain_remote_backends = false;
  // Limits shared through the store: each request reserves its worst case (prompt estimate +
  // max_tokens, or default_max_tokens) with Store::Reserve, whose answer admits it, and settles
  // to what was metered when it ends. Exact across gateways sharing the store.
  bool shared_limits = false;
  // When the store cannot be reached: false refuses requests (503); true falls back to this
  // gateway's own limits.
  bool open_when_store_down = false;
  int64_t default_max_tokens = 1024;
  // Handles on the store that the gateway's store threads use at once (StoreWorker): with
  // shared limits on PostgreSQL each request makes two round trips to the server. The first is
  // the one the Gateway is given; `open_store` opens the others (unset: a pool of one).
  int store_connections = 1;
  std::function<Result<StorePtr>()> open_store;
  // Prefix of this gateway's reservation ids; random when empty. Unique per gateway.
  std::string instance_id;
  // With shared_limits: how often the gateway publishes its fairness report through the store
  // and reads the others' (fair_share.h). A report unchanged for 5 of these (at least 1 s)
  // drops out.
  std::chrono::milliseconds fair_interval{200};
  // Metered usage not yet in the store is also copied here, so that a gateway killed between
  // flushes loses none of it; what a killed gateway left in it is flushed first. Null: none
  // (the last flush_interval of usage is lost with the process).
  std::shared_ptr<UsageJournal> usage_journal;
  // Where the gateway's time comes from (queue waits, latencies, rate limits, usage minutes).
  // Not owned; outlives the Gateway.
  Env* env = &Env::Default();
};

class Gateway {
 public:
  Gateway(net::io_context& io, GatewayOptions options, StorePtr store);
  // `workers[0]` also runs the background loops. Each must be run by one thread.
  Gateway(std::vector<net::io_context*> workers, GatewayOptions options, StorePtr store);
  ~Gateway();

  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Binds the users' listener (returns its port) and the metrics listener.
  Result<uint16_t> Listen();
  uint16_t metrics_port() const { return metrics_http_ ? metrics_http_->port() : 0; }
  void Start();
  // Stops accepting, lets in-flight requests finish up to `deadline`, flushes usage.
  awaitable<void> Stop(std::chrono::steady_clock::duration deadline);

 private:
  struct Backend;
  struct Waiter;
  struct Request;

  // Not a coroutine: it hands the request to the one that answers it, so that a completion
  // costs no frame of its own here.
  awaitable<void> Handle(HttpRequest& request, ResponseWriter& writer);
  awaitable<void> HandleOther(HttpRequest& request, ResponseWriter& writer, std::string target);
  awaitable<void> HandleMetrics(HttpRequest& request, ResponseWriter& writer);
  awaitable<void> HandleUsage(const std::string& user, ResponseWriter& writer);
  awaitable<void> HandleCompletion(HttpRequest& request, ResponseWriter& writer,
                                   std::string target);
  // The user of the request's key; nullopt with `limited` when its address sent too many unknown
  // keys (no look-up was made).
  struct Authenticated {
    std::optional<std::string> user;
    bool limited = false;
    double retry_after_s = 0;
  };
  awaitable<Authenticated> Authenticate(const HttpRequest& request, const ResponseWriter& writer);
  // The answer when it needs no look-up (a malformed bearer, a cached key), without a
  // coroutine frame; nullopt when Authenticate must ask the store.
  std::optional<Authenticated> AuthenticateAtOnce(const HttpRequest& request);
  // The 401, or the 429 for an address past its failed keys.
  awaitable<void> RefuseKey(const Authenticated& auth, ResponseWriter& writer);

  // How one attempt ended: answered (or failed for good); failed before anything reached the
  // client while another backend could take the request; or a stream its backend cut, to
  // resume on another (Request::resume, Request::cut_reason).
  enum class Outcome { kDone, kRetry, kResume };
  static constexpr int kMaxResumptions = 3;
  // Queues, relays and answers once.
  awaitable<Outcome> Attempt(Request& r, ResponseWriter& writer, bool may_retry);
  // Sends an SSE error event with `message` and ends the stream.
  static awaitable<void> EndStreamWithError(ResponseWriter& writer, std::string message);
  void CountStatus(int status);
  void CountStatusLocked(int status);  // REQUIRES: mu_ held
  size_t WorkerOf(const Executor& executor) const;

  // Queueing and admission: admission_ decides, these carry its decisions out (wake each
  // admitted waiter with its backend; drop a drained backend). REQUIRES: mu_ held.
  void DispatchLocked(const std::string& model);
  void DispatchAllLocked();
  void ReleaseLocked(Backend& backend, const std::string& user, const std::string& model,
                     TimePoint now);
  void CarryOutLocked(const std::vector<Admit>& admitted);
  // Who the backend at `url` must prove to be.
  BackendIdentity IdentityOf(const BackendUrl& url) const;
  // The backend with `id`, or null.
  std::shared_ptr<Backend> FindBackendLocked(const std::string& id) const;
  // Drops the idle upstream connections of `backend` on every worker.
  void ClearPools(const std::shared_ptr<Backend>& backend);

  // One try at relaying to `backend` over one connection. Returns kUnavailable when it failed
  // before anything reached the client (the caller may retry elsewhere); sets `stale` when a
  // kept-alive connection the backend had closed failed it (the caller tries a new one).
  awaitable<Result<void>> RelayOnce(Backend& backend, Request& request, ResponseWriter& writer,
                                    bool& stale);
  // The Server-Timing header of `r`'s response, whose backend was asked for at `asked`.
  // Returns the time it read: the answer's end.
  TimePoint AddServerTiming(const Request& r, TimePoint asked, ResponseWriter& writer) const;
  // One read of the response body into `chunk`, under the deadline `idle`; returns the bytes
  // read.
  static awaitable<size_t> ReadSome(UpstreamStream& stream, ReadBuffer& buffer,
                                    UpstreamParser& parser, std::array<char, 16384>& chunk,
                                    std::chrono::milliseconds idle, beast::error_code& ec);

  // Background loops.
  awaitable<void> HealthLoop();
  awaitable<void> RefreshLoop();
  awaitable<void> FlushLoop();
  // With shared_limits: token fairness across the gateways sharing the store (fair_share.h).
  awaitable<void> FairnessLoop();
  awaitable<void> CheckBackend(std::shared_ptr<Backend> backend);
  void SyncBackends(const std::vector<std::string>& stored);
  awaitable<void> Flush();
  // Adds `d` to unflushed_ (mu_ held).
  void MergeUnflushedLocked(UsageDelta d);
  // Says once that the usage journal has no room (mu_ held).
  void JournalFullLocked();

  // Shared limits. Reserves `r`'s worst case in the store; returns the answer to send when
  // the request may not go on (429, or 503 when the store is down and limits fail closed).
  struct Refusal {
    http::status status;
    LimitDecision decision;
  };
  awaitable<std::optional<Refusal>> ReserveShared(Request& r, int64_t max_tokens);
  // Settles reservation `id` to `used` tokens on the store thread, retrying a failure a few
  // times (Settle is idempotent).
  void SettleShared(Store& store, const std::string& id, int64_t used, int attempt);
  // `given` (or "gw") and 64 random bits: ids stay unique across restarts and gateways.
  static std::string MakeInstanceId(const std::string& given);

  // How Meter's prompt tokens were counted: by the backend (its usage reply, which the
  // gateway's chars-per-token estimate learns from), or not.
  enum class PromptCount { kBackends, kOther };
  // Records usage, and charges the fair queue what it was not charged yet. Takes mu_.
  void Meter(Request& request, const Backend& backend, PromptCount count, int64_t prompt_tokens,
             int64_t completion_tokens, int64_t already_charged = 0);
  std::string ModelsJson() const;      // takes mu_
  std::string RenderMetrics();         // takes mu_
  std::string LoadJson();              // takes mu_
  double Now() const;
  // `t` as Now() would have given it then.
  double Since(TimePoint t) const { return (t - epoch_).count(); }
  // Seconds since 1970: rate limits and metered usage are kept in wall time.
  double UnixNow() const { return env_.UnixNow(); }

  std::vector<net::io_context*> workers_;
  net::io_context& io_;  // workers_[0]
  GatewayOptions options_;
  StoreWorker store_;
  HttpServer http_;
  std::unique_ptr<HttpServer> metrics_http_;  // null when metrics_http.host is empty
  uint64_t refreshes_ = 0;  // io_ only
  std::string instance_id_;                 // of reservation ids
  std::atomic<uint64_t> reservations_ = 0;  // reservation ids made
  bool stopping_ = false;   // io_ only
  // Set when Stop()'s deadline has passed: streams still relaying end with an error event.
  std::atomic<bool> cutting_ = false;
  Env& env_;
  const TimePoint epoch_;

  // Guards every member below but json_, and each backend's state, models and counts.
  mutable std::mutex mu_;
  RateLimiter limiter_;
  // Fair queues, the reserve, backends' counts and health, routing: every admission decision.
  Admission admission_;
  // Counters and slot shares across gateways (shared_limits only).
  FairShare fair_share_;
  // The same backends as admission_'s, in the same order; shared with health checks in flight.
  std::vector<std::shared_ptr<Backend>> backends_;
  // Store backends refused by CheckBackendTransport, logged once each (io_ only).
  std::unordered_set<std::string> refused_urls_;
  std::unordered_map<Ticket, std::shared_ptr<Waiter>> waiters_;  // queued requests

  // Store snapshots, refreshed every second.
  KeyCache keys_;  // key -> user; keys the store knows only
  FailedKeyLimiter failed_keys_;  // unknown keys per client address
  std::unordered_map<std::string, UserLimits> users_;
  // Models with an inference deployment in the store: their requests queue even while no
  // replica is up.
  std::unordered_set<std::string> deployed_;

  // Metered usage not yet in the store: (minute, user, model, backend) -> delta. Transparent
  // comparison: a request finds its entry with a tuple of views, allocating nothing.
  std::map<std::tuple<int64_t, std::string, std::string, std::string>, UsageDelta, ViewTupleLess>
      unflushed_;
  bool journal_full_ = false;  // warned that the usage journal is full, since the last flush

  // Per worker (not guarded): parses request bodies and usage chunks, keeping its buffers from
  // one document to the next (a parse then allocates nothing). Each use finishes with the
  // document before its next co_await.
  std::vector<std::unique_ptr<simdjson::dom::parser>> json_;
  // Per worker (not guarded): the upstream connections relaying a stream, closed when Stop()'s
  // deadline passes so that each stream ends with an error event.
  std::vector<std::unordered_set<TcpStream*>> relaying_;

  // Per model: characters per prompt token, from the backends' usage replies.
  std::unordered_map<std::string, CharsPerToken> prompt_ratio_;
  int64_t EstimatePromptTokensLocked(const std::string& model, int64_t chars) const;

  MetricsRegistry metrics_;
  std::map<int, Counter*> requests_by_status_;
  // Per user and model, bmas_gateway_tokens_total of each kind: one look-up a request.
  struct TokenCounters {
    Counter* prompt;
    Counter* completion;
  };
  std::map<std::tuple<std::string, std::string>, TokenCounters, ViewTupleLess> tokens_;
  Counter& resumed_streams_;
  Histogram& queue_wait_;
  Histogram& ttft_;
  Histogram& e2e_;
  Gauge& queue_depth_;
  Gauge& key_cache_entries_;
  Counter& key_lookups_;   // store look-ups of keys not cached
  Counter& keys_limited_;  // keys refused with 429, unlooked-up, for their address's failures
};

}  // namespace bmas::gateway
