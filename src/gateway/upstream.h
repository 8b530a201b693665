#pragma once

// Upstream HTTP: backend URLs, a keep-alive connection pool per backend, and incremental
// splitting of an SSE byte stream into events. Runs on the gateway's io_context thread.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/asio.h"
#include "common/result.h"

namespace bmas::gateway {

struct BackendUrl {
  std::string url;  // as given, without a trailing slash
  std::string host;
  std::string port;
  std::string base_path;  // "" or "/prefix"
};

// Parses "http://host:port[/prefix]". Errors name the URL and what is wrong.
Result<BackendUrl> ParseBackendUrl(std::string_view url);

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

// Splits a byte stream of SSE events ("...\n\n") as it arrives.
class SseSplitter {
 public:
  void Append(std::string_view bytes) { buffer_.append(bytes); }
  // The next complete event including its terminating blank line ("\n\n", as vLLM frames
  // events), or an empty view. The view is valid until the next call to Next() or Append().
  std::string_view Next();
  // Bytes received but not yet a complete event.
  std::string_view Rest() const { return std::string_view(buffer_).substr(consumed_); }

 private:
  std::string buffer_;
  size_t consumed_ = 0;
};

}  // namespace bmas::gateway
