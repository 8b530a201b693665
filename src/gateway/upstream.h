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

// Idle keep-alive connections to one backend.
class ConnectionPool {
 public:
  ConnectionPool(net::io_context& io, BackendUrl url);

  // An idle connection, or a new one (connect within `timeout`).
  // `reused` tells which, so a failure on a reused connection can be retried on a new one.
  awaitable<Result<std::unique_ptr<TcpStream>>> Acquire(std::chrono::milliseconds timeout,
                                                                bool& reused);
  // Returns a connection whose response was read completely and that may be kept alive.
  void Release(std::unique_ptr<TcpStream> stream);
  void Clear() { idle_.clear(); }

  const BackendUrl& url() const { return url_; }

 private:
  net::io_context& io_;
  BackendUrl url_;
  std::vector<std::unique_ptr<TcpStream>> idle_;
  static constexpr size_t kMaxIdle = 256;
};


}  // namespace bmas::gateway
