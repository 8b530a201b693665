#include "daemon/dashboard_main.h"

#include <sys/random.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <ctime>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <spdlog/spdlog.h>

#include "common/http_server.h"
#include "common/json_read.h"
#include "common/operator_auth.h"
#include "common/serve.h"
#include "daemon/services.h"
#include "dashboard/assets.h"
#include "dashboard/history.h"
#include "dashboard/sessions.h"
#include "dashboard/sources.h"
#include "dashboard/views.h"
#include "slurm/rest_client.h"
#include "store/store.h"

namespace bmas {
namespace {

using dashboard::ClusterState;
using dashboard::Viewer;

constexpr std::string_view kCookie = "bmas_session";
constexpr size_t kMaxSessions = 10000;
// A bmas API key: "sk-bmas-" + a 12-hex id + "-" + the secret (store/store.h).
constexpr std::string_view kKeyPrefix = "sk-bmas-";
constexpr size_t kKeyIdLength = 12;

std::string RandomToken() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

// Gathers the state every interval on its own thread; the server reads the latest.
class Refresher {
 public:
  explicit Refresher(const DashboardOptions& o) : o_(o) {}

  std::shared_ptr<const ClusterState> Current() {
    std::lock_guard lock(mu_);
    return current_;
  }

  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // One refresh, on the caller's thread (the first, before the server answers).
  void RefreshOnce() {
    auto next = std::make_shared<ClusterState>(Gather());
    std::lock_guard lock(mu_);
    current_ = std::move(next);
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    while (!wake_.wait_for(lock, o_.interval, [&] { return stopping_; })) {
      lock.unlock();
      RefreshOnce();
      lock.lock();
    }
  }

  // Logs a source's failure when it changes, and its return.
  void Report(const std::string& source, const std::string& error) {
    std::string& last = last_errors_[source];
    if (error == last) return;
    if (error.empty()) spdlog::info("bmas dashboard: {} answers again", source);
    else spdlog::warn("bmas dashboard: {}: {}", source, error);
    last = error;
  }

  ClusterState Gather() {
    ClusterState s;
    s.now = std::time(nullptr);
    if (o_.poll_slurm) {
      auto snapshot = o_.poll_slurm();
      if (snapshot) {
        s.slurm_reachable = true;
        s.jobs = std::move(snapshot->jobs);
        s.nodes = std::move(snapshot->nodes);
        s.mode = std::move(snapshot->mode);
      } else {
        s.slurm_error = snapshot.error().message;
      }
      Report("slurm", s.slurm_error);
    } else {
      s.slurm_error = "no Slurm to watch: bmas up starts one where this machine can run it";
    }
    if (!o_.gateway.empty()) {
      auto body = HttpGet(o_.gateway, "/load", "the gateway",
                          OperatorBearer(o_.operator_secret));
      auto load = body ? dashboard::ParseGatewayLoad(*body) : Result<dashboard::GatewayLoad>(body.error());
      if (load) {
        s.gateway = std::move(*load);
      } else {
        s.gateway.error = load.error().message;
      }
      Report("gateway", s.gateway.error);
    } else {
      s.gateway.error = "no gateway: bmas up starts one with its engines";
    }
    for (const std::string& agent : o_.agents) {
      auto body = HttpGet(agent, "/gpus", "the agent", OperatorBearer(o_.operator_secret),
                          std::chrono::seconds(2), o_.ca_file);
      auto t = body ? dashboard::ParseAgentGpus(*body, agent)
                    : Result<dashboard::NodeTelemetry>(body.error());
      Report("agent " + agent, t ? "" : t.error().message);
      // No answer, or one that is not the agent's: the map shows its node's agent unreachable.
      s.telemetry.push_back(t ? std::move(*t)
                              : dashboard::NodeTelemetry{agent, false, t.error().message, {}, {},
                                                         false});
      s.telemetry.back().agent = agent;
    }
    ReadStore(s);
    // The plots: the previous state's points, and a new one each step.
    auto previous = Current();
    if (previous) s.history = previous->history;
    if (s.history.empty() || s.now - s.history.back().t >= o_.history_step_s) {
      dashboard::AppendHistory(s.history, dashboard::MakeHistoryPoint(s, last_ttft_),
                               o_.history_points);
      last_ttft_ = s.gateway.ttft;
    }
    return s;
  }

  void ReadStore(ClusterState& s) {
    if (!store_) {
      auto opened = OpenConfiguredStore(o_.store_path);
      if (!opened) {
        s.store_error = opened.error().message;
        Report("store", s.store_error);
        return;
      }
      store_ = std::move(*opened);
    }
    const int64_t midnight = s.now - s.now % 86400;
    auto users = store_->ListUsers();
    auto hour = store_->QueryUsage(std::nullopt, s.now - 3600);
    auto day = store_->QueryUsage(std::nullopt, midnight);
    auto jobs = store_->QueryJobUsage(std::nullopt, s.now - 30 * 86400);
    auto idle = store_->QueryIdle(std::nullopt, s.now - 30 * 86400);
    for (const Error* e : {users ? nullptr : &users.error(), hour ? nullptr : &hour.error(),
                           day ? nullptr : &day.error(), jobs ? nullptr : &jobs.error(),
                           idle ? nullptr : &idle.error()}) {
      if (e != nullptr && s.store_error.empty()) s.store_error = e->message;
    }
    s.store_ok = s.store_error.empty();
    Report("store", s.store_error);
    if (!s.store_ok) {
      store_.reset();  // open it again next time
      return;
    }
    s.users = std::move(*users);
    s.tokens_hour = std::move(*hour);
    s.tokens_day = std::move(*day);
    s.gpu_usage = std::move(*jobs);
    s.idle = std::move(*idle);
  }

  const DashboardOptions& o_;
  StorePtr store_;  // the refresh thread's
  dashboard::LatencyHistogram last_ttft_;
  std::map<std::string, std::string> last_errors_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::shared_ptr<const ClusterState> current_ = std::make_shared<ClusterState>();
  std::thread thread_;
};

class Dashboard {
 public:
  Dashboard(const DashboardOptions& o, Refresher& refresher, StorePtr auth_store)
      : o_(o), refresher_(refresher), auth_store_(std::move(auth_store)),
        sessions_(o.session_s, kMaxSessions) {}

  awaitable<void> Handle(HttpRequest& req, ResponseWriter& w) {
    // On every response: scripts, styles and forms from here only; no framing, no sniffing.
    w.AddHeader("Content-Security-Policy",
                "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
                "base-uri 'none'; form-action 'self'");
    w.AddHeader("X-Frame-Options", "DENY");
    w.AddHeader("X-Content-Type-Options", "nosniff");
    w.AddHeader("Referrer-Policy", "no-referrer");
    const std::string target(req.target().substr(0, req.target().find('?')));
    const bool get = req.method() == http::verb::get || req.method() == http::verb::head;
    if (target == "/health" && get) {
      co_await w.Send(http::status::ok, "application/json", R"({"status":"ok"})", Headers());
    } else if (target.starts_with("/assets/") && get) {
      co_await SendAsset(w, target, "public, max-age=300");
    } else if (target == "/login" && get) {
      co_await SendAsset(w, "/login.html", "no-store");
    } else if (target == "/login" && req.method() == http::verb::post) {
      co_await Login(req, w);
    } else if (target == "/logout" && req.method() == http::verb::post) {
      sessions_mu_.lock();
      sessions_.Remove(dashboard::CookieValue(req[http::field::cookie], kCookie));
      sessions_mu_.unlock();
      auto h = Headers();
      h.emplace_back(http::field::set_cookie,
                     fmt::format("{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0", kCookie));
      h.emplace_back(http::field::location, "/login");
      co_await w.Send(http::status::see_other, "text/plain", "signed out\n", std::move(h));
    } else if (target.starts_with("/api/")) {
      co_await Api(req, w, target);
    } else if (get && IsPage(target)) {
      if (SessionCheck check = SessionViewer(req); !check.viewer) {
        auto h = Headers();
        h.emplace_back(http::field::location,
                       "/login?next=" + target + (check.revoked ? "&ended=revoked" : ""));
        co_await w.Send(http::status::see_other, "text/plain", "sign in first\n", std::move(h));
      } else {
        co_await SendAsset(w, "/app.html", "no-store");
      }
    } else {
      co_await w.SendError(http::status::not_found,
                           fmt::format("no such page: {} (try /cluster)", target), "", Headers());
    }
  }

 private:
  static bool IsPage(const std::string& t) {
    return t == "/" || t == "/cluster" || t == "/queue" || t == "/inference" || t == "/users" ||
           t == "/mode" || (t.starts_with("/users/") && t.size() > 7 && t.find('/', 7) == std::string::npos);
  }

  static ResponseWriter::Headers Headers(std::string cache = "no-store") {
    return {{http::field::cache_control, std::move(cache)}};
  }

  awaitable<void> SendAsset(ResponseWriter& w, const std::string& path, std::string cache) {
    const dashboard::Asset* a = dashboard::FindAsset(path);
    if (a == nullptr) {
      co_await w.SendError(http::status::not_found, "no such asset: " + path, "", Headers());
      co_return;
    }
    co_await w.Send(http::status::ok, a->content_type, std::string(a->body), Headers(std::move(cache)));
  }

  std::optional<Viewer> ViewerOf(const std::string& user) {
    auto state = refresher_.Current();
    if (!state->store_ok) return Viewer{user, false};
    for (const User& u : state->users) {
      if (u.name == user) return Viewer{user, u.admin};
    }
    return std::nullopt;  // removed from the store: the session ends with the user
  }

  // The viewer of a request's session; none without a live session, and `revoked` when the
  // key it was signed in with was revoked since (the session ends then, with every other one
  // of that key).
  struct SessionCheck {
    std::optional<Viewer> viewer;
    bool revoked = false;
  };
  SessionCheck SessionViewer(const HttpRequest& req) {
    const std::string token = dashboard::CookieValue(req[http::field::cookie], kCookie);
    if (token.empty()) return {};
    std::optional<dashboard::Sessions::Session> session;
    {
      std::lock_guard lock(sessions_mu_);
      session = sessions_.Find(token, std::time(nullptr));
    }
    if (!session) return {};
    auto live = KeyLive(session->user, session->key_id);
    if (!live) return {};  // the store cannot say: refused this time, the session stays
    if (!*live) {
      std::lock_guard lock(sessions_mu_);
      sessions_.RemoveKey(session->key_id);
      return {std::nullopt, true};
    }
    return {ViewerOf(session->user), false};
  }

  // The store for checking keys, opened again after a failure. REQUIRES: auth_mu_ held.
  Result<Store*> AuthStore() {
    if (!auth_store_) {
      auto opened = OpenConfiguredStore(o_.store_path);
      if (!opened) return opened.error();
      auth_store_ = std::move(*opened);
    }
    return auth_store_.get();
  }

  // The user a key belongs to; nullopt for a bad key, an error when the store fails.
  Result<std::optional<std::string>> KeyUser(const std::string& key) {
    std::lock_guard lock(auth_mu_);
    auto store = AuthStore();
    if (!store) return store.error();
    auto user = (*store)->Authenticate(key);
    if (!user) auth_store_.reset();
    return user;
  }

  // Whether `user`'s key `key_id` is still valid (not revoked, the user not removed); an error
  // when the store fails.
  Result<bool> KeyLive(const std::string& user, const std::string& key_id) {
    std::lock_guard lock(auth_mu_);
    auto store = AuthStore();
    if (!store) return store.error();
    auto keys = (*store)->ListKeys(user);
    if (!keys && keys.error().code == ErrorCode::kNotFound) return false;
    if (!keys) {
      auth_store_.reset();
      return keys.error();
    }
    return std::any_of(keys->begin(), keys->end(), [&](const KeyInfo& k) {
      return k.id == key_id && !k.revoked_at;
    });
  }

  awaitable<void> Login(HttpRequest& req, ResponseWriter& w) {
    // A cross-site page can neither send JSON here without a preflight nor forge Origin.
    const auto origin = req[http::field::origin];
    if (!origin.empty() && origin != "http://" + std::string(req[http::field::host])) {
      co_await w.SendError(http::status::forbidden, "sign-in from another site is refused", "",
                           Headers());
      co_return;
    }
    if (req[http::field::content_type].find("application/json") == std::string::npos) {
      co_await w.SendError(http::status::unsupported_media_type,
                           "send {\"key\": \"sk-bmas-...\"} as application/json", "", Headers());
      co_return;
    }
    rapidjson::Document d;
    d.Parse(req.body().data(), req.body().size());
    const std::string key = d.HasParseError() ? "" : JsonString(d, "key");
    if (key.empty()) {
      co_await w.SendError(http::status::bad_request, "send {\"key\": \"sk-bmas-...\"}", "key",
                           Headers());
      co_return;
    }
    auto user = KeyUser(key);
    if (!user) {
      co_await w.SendError(http::status::service_unavailable,
                           "cannot check the key: " + user.error().message, "", Headers());
      co_return;
    }
    if (!*user) {
      co_await w.SendError(http::status::unauthorized,
                           "that key is not valid (revoked, or not a bmas key): `bmas key create` "
                           "makes one",
                           "key", Headers());
      co_return;
    }
    const std::string token = RandomToken();
    {
      // The key's id: what `bmas key list` shows and `bmas key revoke` takes ("sk-bmas-<id>-").
      std::lock_guard lock(sessions_mu_);
      sessions_.Create(token, **user, key.substr(kKeyPrefix.size(), kKeyIdLength),
                       std::time(nullptr));
    }
    auto h = Headers();
    h.emplace_back(http::field::set_cookie,
                   fmt::format("{}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}", kCookie,
                               token, o_.session_s));
    co_await w.Send(http::status::ok, "application/json",
                    fmt::format(R"({{"user":"{}"}})", **user), std::move(h));
  }

  awaitable<void> Api(HttpRequest& req, ResponseWriter& w, const std::string& target) {
    std::optional<Viewer> viewer;
    const std::string auth(req[http::field::authorization]);
    if (auth.starts_with("Bearer ")) {
      auto user = KeyUser(auth.substr(7));
      if (!user) {
        co_await w.SendError(http::status::service_unavailable,
                             "cannot check the key: " + user.error().message, "", Headers());
        co_return;
      }
      if (*user) viewer = ViewerOf(**user);
    } else {
      SessionCheck check = SessionViewer(req);
      if (check.revoked) {
        co_await w.SendError(http::status::unauthorized,
                             "your session ended: the API key it was signed in with was revoked "
                             "(`bmas key revoke`); sign in at /login with a valid key",
                             "revoked", Headers());
        co_return;
      }
      viewer = std::move(check.viewer);
    }
    if (!viewer) {
      co_await w.SendError(http::status::unauthorized,
                           "sign in at /login, or send your bmas API key as "
                           "`Authorization: Bearer sk-bmas-...`",
                           "", Headers());
      co_return;
    }
    if (req.method() != http::verb::get) {
      co_await w.SendError(http::status::method_not_allowed, "the API is read-only: use GET", "",
                           Headers());
      co_return;
    }
    auto state = refresher_.Current();
    const std::string_view what = std::string_view(target).substr(5);
    std::string body;
    if (what == "me") body = dashboard::MeJson(*state, *viewer);
    else if (what == "cluster") body = dashboard::ClusterJson(*state, *viewer);
    else if (what == "queue") body = dashboard::QueueJson(*state, *viewer);
    else if (what == "inference") body = dashboard::InferenceJson(*state, *viewer);
    else if (what == "users") body = dashboard::UsersJson(*state, *viewer);
    else if (what == "mode") body = dashboard::ModeJson(*state, *viewer);
    else if (what == "history") body = dashboard::HistoryJson(*state);
    else if (what.starts_with("users/")) {
      auto user = dashboard::UserJson(*state, *viewer, what.substr(6));
      if (!user) {
        co_await w.SendError(HttpStatusFor(user.error().code), user.error().message, "",
                             Headers());
        co_return;
      }
      body = std::move(*user);
    } else {
      co_await w.SendError(http::status::not_found,
                           fmt::format("no such API: {} (try /api/cluster, /api/queue, "
                                       "/api/inference, /api/users, /api/mode, /api/history)",
                                       target),
                           "", Headers());
      co_return;
    }
    co_await w.Send(http::status::ok, "application/json", std::move(body), Headers());
  }

  const DashboardOptions& o_;
  Refresher& refresher_;
  std::mutex auth_mu_;
  StorePtr auth_store_;  // for keys; guarded by auth_mu_
  std::mutex sessions_mu_;
  dashboard::Sessions sessions_;
};

}  // namespace

int RunDashboard(const DashboardOptions& options) {
  std::signal(SIGPIPE, SIG_IGN);
  auto store = OpenConfiguredStore(options.store_path);
  if (!store) {
    fmt::print(stderr, "bmas dashboard: {}\n", store.error().message);
    return 1;
  }
  Refresher refresher(options);
  refresher.RefreshOnce();
  Dashboard dashboard(options, refresher, std::move(*store));

  // Two workers, so that one slow page (a queue of a thousand jobs) does not hold up the others;
  // the first also accepts. The Dashboard's state is shared under its own locks.
  std::vector<std::unique_ptr<net::io_context>> contexts;
  std::vector<net::io_context*> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(contexts.emplace_back(std::make_unique<net::io_context>(1)).get());
  }
  net::io_context& io = *workers[0];
  HttpServerOptions http;
  http.host = options.host;
  http.port = options.port;
  http.server_name = "bmas-dashboard";
  http.max_body_bytes = 16 << 10;
  HttpServer server(workers, http, [&](HttpRequest& req, ResponseWriter& w) {
    return dashboard.Handle(req, w);
  });
  auto port = server.Listen();
  if (!port) {
    fmt::print(stderr, "bmas dashboard: {}\n", port.error().message);
    return 1;
  }
  refresher.Start();
  server.Start();
  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards;
  std::vector<std::thread> threads;
  for (size_t i = 1; i < workers.size(); ++i) {
    guards.push_back(net::make_work_guard(*workers[i]));
    threads.emplace_back([w = workers[i]] { w->run(); });
  }
  fmt::print("bmas dashboard: listening on http://{}:{}\n", options.host, *port);
  std::fflush(stdout);
  ServeUntilSignalled(io, server, std::chrono::seconds(2), "bmas dashboard");
  guards.clear();
  for (std::thread& t : threads) t.join();
  refresher.Stop();
  return 0;
}

}  // namespace bmas
