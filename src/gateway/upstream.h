#pragma once

// Upstream HTTP: backend URLs and a keep-alive connection pool per backend. Runs on the
// gateway's io_context thread.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/asio.h"
#include "common/result.h"
#include "gateway/sse.h"

namespace bmas::gateway {

struct BackendUrl {
  std::string url;  // as given, without a trailing slash
  std::string host;
  std::string port;
  std::string base_path;  // "" or "/prefix"
};

// Parses "http://host:port[/prefix]". Errors name the URL and what is wrong.
Result<BackendUrl> ParseBackendUrl(std::string_view url);

// The sum of a metric's samples in Prometheus text, e.g. a backend's /metrics (0 when absent).
double MetricSum(std::string_view text, std::string_view name);

// The integer value of label `label` on the first sample of metric `name` in Prometheus text,
// e.g. num_gpu_blocks of vllm:cache_config_info; 0 when absent or not an integer.
int64_t MetricLabelInt(std::string_view text, std::string_view name, std::string_view label);

// Who a backend must prove to be (common/backend_identity.h).
struct BackendIdentity {
  std::string key;      // its own key, sent as `Authorization: Bearer`; "" = none. A secret.
  bool verify = false;  // challenge each new connection before anything else is sent on it
};

// The param of an Error for a backend that failed its identity challenge.
inline constexpr std::string_view kIdentityParam = "backend_identity";
// The param of an Error for a backend that sent nothing for the idle timeout (HTTP 504).
inline constexpr std::string_view kTimeoutParam = "backend_timeout";

// Idle keep-alive connections to one backend.
class ConnectionPool {
 public:
  ConnectionPool(net::io_context& io, BackendUrl url, BackendIdentity identity = {});

  // An idle connection, or a new one (connect within `timeout`). A new one to a backend with
  // `verify` first answers the identity challenge (within `timeout`), or is closed and the
  // error, with param kIdentityParam, says so: no key or request is ever sent on it.
  // `reused` tells which, so a failure on a reused connection can be retried on a new one.
  awaitable<Result<std::unique_ptr<TcpStream>>> Acquire(std::chrono::milliseconds timeout,
                                                                bool& reused);
  // Returns a connection whose response was read completely and that may be kept alive.
  void Release(std::unique_ptr<TcpStream> stream);
  void Clear() { idle_.clear(); }

  const BackendUrl& url() const { return url_; }
  const BackendIdentity& identity() const { return identity_; }

 private:
  // Sends the challenge on `stream` and checks the answer.
  awaitable<Result<void>> Verify(TcpStream& stream, std::chrono::milliseconds timeout);

  net::io_context& io_;
  BackendUrl url_;
  BackendIdentity identity_;
  std::vector<std::unique_ptr<TcpStream>> idle_;
  static constexpr size_t kMaxIdle = 256;
};


}  // namespace bmas::gateway
