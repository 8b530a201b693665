#include "daemon/gateway_main.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "cluster/cluster_files.h"
#include "common/listen_socket.h"
#include "common/private_files.h"
#include "common/serve.h"
#include "daemon/secret.h"
#include "daemon/services.h"
#include "gateway/gateway.h"
#include "gateway/upstream.h"
#include "store/store.h"

namespace bmas {
namespace {

// Writes `url` whole to GatewayOperatorUrlPath (a temporary file, then renamed). A failure is
// logged: it costs `bmas gateway backend list` only its view of health.
void WriteOperatorUrl(const std::string& state_dir, const std::string& url) {
  const std::filesystem::path path = GatewayOperatorUrlPath(state_dir);
  const std::string dir = path.parent_path().string();
  const std::string name = path.filename().string();
  const std::string temporary = fmt::format("{}.{}", name, getpid());
  auto dir_fd = OpenPrivateDir(dir, 0700);
  if (!dir_fd) {
    spdlog::warn("bmas gateway: not writing {}: {}", path.string(), dir_fd.error().message);
    return;
  }
  auto fd = OpenInPrivateDir(*dir_fd, dir, temporary, O_WRONLY | O_CREAT | O_TRUNC);
  const std::string text = url + "\n";
  std::string failure = fd ? "" : fd.error().message;
  if (fd && write(*fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    failure = std::strerror(errno);
  }
  if (fd) close(*fd);
  if (failure.empty() && renameat(*dir_fd, temporary.c_str(), *dir_fd, name.c_str()) != 0) {
    failure = std::strerror(errno);
  }
  if (!failure.empty()) {
    spdlog::warn("bmas gateway: cannot write {}: {}", path.string(), failure);
    unlinkat(*dir_fd, temporary.c_str(), 0);
  }
  close(*dir_fd);
}

// Removes GatewayOperatorUrlPath when it still names this gateway's `url`.
void RemoveOperatorUrl(const std::string& state_dir, const std::string& url) {
  const std::string path = GatewayOperatorUrlPath(state_dir);
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  std::error_code ec;
  if (line == url) std::filesystem::remove(path, ec);
}

// The client TLS context for https:// backends from the CA files `paths` (PEM; those that do
// not exist are skipped when `skip_missing`).
Result<std::shared_ptr<net::ssl::context>> BackendTls(const std::vector<std::string>& paths,
                                                       bool skip_missing) {
  std::string pem;
  std::error_code ec;
  for (const std::string& path : paths) {
    if (skip_missing && !std::filesystem::exists(path, ec)) continue;
    std::ifstream in(path, std::ios::binary);
    std::string one((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) one.clear();
    pem += one;
    if (!one.empty() && one.back() != '\n') pem += '\n';
  }
  const std::string named = fmt::format("{}", fmt::join(paths, " and "));
  if (pem.empty()) {
    return InvalidArgument(
        fmt::format("https:// backends need the cluster CA or the replica CA, and {} cannot be "
                    "read: put them there (`bmas node join` and `cluster init` do) or name one "
                    "in $BMAS_BACKEND_CA_FILE",
                    named),
        "backend_ca_file");
  }
  return gateway::BackendTlsContext(pem, named);
}

}  // namespace

std::string GatewayOperatorUrlPath(const std::string& state_dir) {
  return (std::filesystem::path(StorePath(state_dir)).parent_path() / "gateway-operator.url")
      .string();
}

int RunGateway(const GatewaySettings& s, const std::string& state_dir) {
  gateway::GatewayOptions o;
  auto routing = gateway::ParseRoutingPolicy(s.routing);
  if (!routing) {
    fmt::print(stderr, "bmas gateway: {}\n", routing.error().message);
    return 2;
  }
  o.routing = *routing;
  if (s.fairness != "vtc" && s.fairness != "none") {
    fmt::print(stderr, "bmas gateway: fairness '{}' is not vtc or none\n", s.fairness);
    return 2;
  }
  o.fair = s.fairness == "vtc";
  bool any_tls = false;
  // Not [gateway] keys yet: from the environment (README, "Replicas on other nodes").
  const char* plain_env = std::getenv("BMAS_PLAIN_REMOTE_BACKENDS");
  const bool plain_remote = plain_env != nullptr && std::string_view(plain_env) == "1";
  // https:// backends are checked against $BMAS_BACKEND_CA_FILE, else the cluster CA and the
  // replica CA (replicas on the nodes, cluster/cluster_files.h), those of the two that exist.
  const char* ca_env = std::getenv("BMAS_BACKEND_CA_FILE");
  const bool ca_given = ca_env != nullptr && *ca_env != 0;
  const std::vector<std::string> ca_files =
      ca_given ? std::vector<std::string>{ca_env}
               : std::vector<std::string>{"/etc/bmas/ca.crt", cluster::ReplicaCaPath(state_dir)};
  o.plain_remote_backends = plain_remote;
  for (const std::string& url : s.backends) {
    auto parsed = gateway::ParseBackendUrl(url);
    if (!parsed) {
      fmt::print(stderr, "bmas gateway: {}\n", parsed.error().message);
      return 2;
    }
    if (auto ok = gateway::CheckBackendTransport(*parsed, plain_remote); !ok) {
      fmt::print(stderr, "bmas gateway: {}\n", ok.error().message);
      return 2;
    }
    any_tls = any_tls || parsed->tls;
    o.backends.push_back(parsed->url);
  }
  if (plain_remote) {
    spdlog::warn("bmas gateway: BMAS_PLAIN_REMOTE_BACKENDS=1: http:// backends on other "
                 "machines get users' prompts and answers in clear text");
  }
  // The cluster CA, for https:// backends: given ones need it now; the store may add more.
  if (auto tls = BackendTls(ca_files, !ca_given); tls) {
    o.backend_tls = std::move(*tls);
  } else if (any_tls) {
    fmt::print(stderr, "bmas gateway: {}\n", tls.error().message);
    return 2;
  }
  for (const std::string& url : s.unverified_backends) {
    auto parsed = gateway::ParseBackendUrl(url);
    if (!parsed) {
      fmt::print(stderr, "bmas gateway: {}\n", parsed.error().message);
      return 2;
    }
    spdlog::warn("bmas gateway: backend {} is not challenged for its identity: safe only where "
                 "no user can bind its port",
                 parsed->url);
    o.unverified_backends.push_back(parsed->url);
  }
  o.http.host = s.host;
  o.http.port = static_cast<uint16_t>(s.port);
  o.http.max_body_bytes = static_cast<size_t>(s.max_body_bytes);
  o.http.server_name = "bmas-gateway";
  o.queue_timeout = std::chrono::milliseconds(static_cast<int64_t>(s.queue_timeout_s * 1000));
  o.reserve_fraction = s.reserve_fraction;
  // Shared limits are on by default where gateways can share the store: on PostgreSQL.
  o.shared_limits = s.shared_limits.value_or(StoreIsOnPostgres());
  o.open_when_store_down = s.limits_when_store_down == "open";
  o.store_connections = s.store_connections.value_or(StoreIsOnPostgres() ? 4 : 1);
  o.open_store = [path = StorePath(state_dir)] { return OpenConfiguredStore(path); };
  o.default_max_tokens = s.default_max_tokens;
  o.key_cache_size = static_cast<size_t>(s.key_cache_size);
  o.upstream_idle_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(s.upstream_idle_timeout_s * 1000));
  o.flush_interval =
      std::chrono::milliseconds(static_cast<int64_t>(s.usage_flush_interval_s * 1000));
  if (!s.metrics_listen.empty()) {
    auto metrics = SplitHostPort(s.metrics_listen);
    if (!metrics) {
      fmt::print(stderr, "bmas gateway: metrics_listen {}\n", metrics.error().message);
      return 2;
    }
    const std::string& host = metrics->first;
    const uint16_t metrics_port = metrics->second;
    o.metrics_http.host = host;
    o.metrics_http.port = metrics_port;
    o.metrics_http.server_name = "bmas-gateway-metrics";
  } else {
    o.metrics_http.host.clear();
  }
  auto backend_key = ReadSecret(s.backend_api_key_file, "BMAS_BACKEND_API_KEY");
  if (!backend_key) {
    fmt::print(stderr, "bmas gateway: backend_api_key_file: {}\n", backend_key.error().message);
    return 2;
  }
  o.backend_api_key = std::move(*backend_key);
  o.default_capacity = s.default_capacity;
  if (!o.metrics_http.host.empty()) {
    auto secret = EnsureOperatorSecret(state_dir);
    if (!secret) {
      fmt::print(stderr, "bmas gateway: {}\n", secret.error().message);
      return 1;
    }
    o.operator_secret = std::move(*secret);
  }

  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  auto store = OpenConfiguredStore(StorePath(state_dir));
  if (!store) {
    fmt::print(stderr, "bmas gateway: {}\n", store.error().message);
    return 1;
  }
  // Usage not yet flushed survives the gateway's death in a journal beside the store, one per
  // listening port (two gateways of one state directory have two ports). An ephemeral port
  // (0, tests) has none: no later gateway would find it.
  // Without one the gateway still serves (a warning says what is lost and why).
  if (s.port != 0) {
    const std::filesystem::path dir = std::filesystem::path(StorePath(state_dir)).parent_path();
    ::mkdir(dir.c_str(), 0700);  // SQLite's is there already; with PostgreSQL it may not be
    auto journal = gateway::UsageJournal::Open(gateway::UsageJournalPath(dir.string(), s.port));
    if (journal) {
      o.usage_journal = std::move(*journal);
    } else {
      spdlog::warn("bmas gateway: no usage journal, so a gateway killed outright loses the usage "
                   "of its last {} s: {}",
                   s.usage_flush_interval_s, journal.error().message);
    }
  }
  std::signal(SIGPIPE, SIG_IGN);
  // One io_context per worker thread; the first runs on this thread and also accepts.
  // With one worker (the default), every socket is registered and used on this thread alone,
  // so the per-descriptor locks of Asio's reactor are dropped; the store threads' posts and
  // the timers keep theirs. With several, the acceptor registers each new socket with another
  // worker's reactor, which may at that moment run a freed descriptor's last event: those
  // locks stay.
  const int hint = s.threads == 1 ? BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO : 1;
  std::vector<std::unique_ptr<net::io_context>> contexts;
  std::vector<net::io_context*> workers;
  for (int i = 0; i < s.threads; ++i) {
    workers.push_back(contexts.emplace_back(std::make_unique<net::io_context>(hint)).get());
  }
  net::io_context& io = *workers[0];
  gateway::Gateway gw(workers, o, std::move(*store));
  auto port = gw.Listen();
  if (!port) {
    fmt::print(stderr, "bmas gateway: {}\n", port.error().message);
    return 1;
  }
  spdlog::info(
      "bmas gateway: routing {}, fairness {}, {} backend(s) given, {} thread(s), store {} "
      "({} connection(s)), limits {}",
      s.routing, s.fairness, o.backends.size(), s.threads,
      DescribeConfiguredStore(StorePath(state_dir)), o.store_connections,
      !o.shared_limits         ? "this gateway's own"
      : o.open_when_store_down ? "shared (open when the store is down)"
                               : "shared (closed when the store is down)");
  gw.Start();
  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards;
  std::vector<std::thread> threads;
  for (size_t i = 1; i < workers.size(); ++i) {
    guards.push_back(net::make_work_guard(*workers[i]));
    threads.emplace_back([w = workers[i]] { w->run(); });
  }
  // Tests and `bmas up` read this line: the URL ends it.
  std::string operator_url;
  if (gw.metrics_port() != 0) {
    const std::string& host = o.metrics_http.host;
    operator_url = host.find(':') != std::string::npos
                       ? fmt::format("http://[{}]:{}", host, gw.metrics_port())
                       : fmt::format("http://{}:{}", host, gw.metrics_port());
    fmt::print("bmas gateway: metrics on {}/metrics\n", operator_url);
    WriteOperatorUrl(state_dir, operator_url);
  }
  fmt::print("bmas gateway: listening on http://{}:{}\n", s.host, *port);
  std::fflush(stdout);

  ServeUntilSignalled(io, gw, std::chrono::seconds(s.shutdown_timeout_s), "bmas gateway",
                      "flushing usage");
  // Stop() closed every connection; the other workers finish what is left and return.
  guards.clear();
  for (std::thread& t : threads) t.join();
  if (!operator_url.empty()) RemoveOperatorUrl(state_dir, operator_url);
  return 0;
}

}  // namespace bmas
