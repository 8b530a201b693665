#pragma once

// Upstream HTTP: backend URLs and a keep-alive connection pool per backend. Runs on the
// gateway's io_context thread. A backend on loopback is dialled in plain HTTP; one on another
// machine (a replica on a node) over TLS, its certificate checked against the cluster CA and
// the name dialled before anything is sent (prompts, answers and the backend's key are users'
// data and secrets).

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/ssl.hpp>

#include "common/asio.h"
#include "common/coarse_deadline.h"
#include "common/result.h"
#include "gateway/sse.h"

namespace bmas::gateway {

struct BackendUrl {
  std::string url;  // as given, without a trailing slash
  std::string host;
  std::string port;
  std::string base_path;  // "" or "/prefix"
  bool tls = false;       // https://
};

// Parses "http://host:port[/prefix]" or "https://host:port[/prefix]". Errors name the URL and
// what is wrong.
Result<BackendUrl> ParseBackendUrl(std::string_view url);

// A plain http:// backend off loopback would carry prompts, answers and its key in clear
// text: InvalidArgument naming the fix (https://, or the opt-out) unless `allow_plain_remote`
// (BMAS_PLAIN_REMOTE_BACKENDS=1, for a network the operator vouches for).
Result<void> CheckBackendTransport(const BackendUrl& url, bool allow_plain_remote);

// A TLS client context that trusts only `ca_pem` (the cluster CA, /etc/bmas/ca.crt), TLS 1.2
// or later. InvalidArgument naming `ca_file` when it holds no certificate.
Result<std::shared_ptr<net::ssl::context>> BackendTlsContext(const std::string& ca_pem,
                                                             const std::string& ca_file);

// The sum of a metric's samples in Prometheus text, e.g. a backend's /metrics (0 when absent).
double MetricSum(std::string_view text, std::string_view name);

// The integer value of label `label` on the first sample of metric `name` in Prometheus text,
// e.g. num_gpu_blocks of vllm:cache_config_info; 0 when absent or not an integer.
int64_t MetricLabelInt(std::string_view text, std::string_view name, std::string_view label);

// Who a backend must prove to be (common/backend_identity.h).
struct BackendIdentity {
  std::string key;      // its own key, sent as `Authorization: Bearer`; "" = none. A secret.
  bool verify = false;  // challenge each new connection before anything else is sent on it
  // For an https:// backend: the CA its certificate must chain to (which must also name the
  // host dialled), checked in the handshake, before the challenge or anything else is sent.
  std::shared_ptr<net::ssl::context> tls;
};

// One connection to a backend: plain TCP, or TLS over it. An AsyncStream for Beast's reads
// and writes; deadlines and the socket are the TCP stream's (tcp()).
class UpstreamStream {
 public:
  using executor_type = TcpStream::executor_type;
  explicit UpstreamStream(net::io_context& io) : tcp_(io) {}

  executor_type get_executor() noexcept { return tcp_.get_executor(); }
  TcpStream& tcp() { return tcp_; }
  bool tls() const { return tls_ != nullptr; }
  // basic_stream's deadline, for connecting and the handshakes: a new connection is handed
  // out with it at never, and the requests on it are read under deadline().
  void expires_after(std::chrono::steady_clock::duration d) { tcp_.expires_after(d); }
  CoarseDeadline& deadline() { return deadline_; }
  TcpStream::socket_type& socket() { return tcp_.socket(); }

  // Wraps the connected stream in TLS under `context`, checking that the certificate names
  // `host`: call before the handshake.
  Result<void> StartTls(net::ssl::context& context, const std::string& host);
  net::ssl::stream<TcpStream&>* tls_stream() { return tls_.get(); }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    if (tls_) return tls_->async_read_some(buffers, std::forward<Token>(token));
    return tcp_.async_read_some(buffers, std::forward<Token>(token));
  }
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    if (tls_) return tls_->async_write_some(buffers, std::forward<Token>(token));
    return tcp_.async_write_some(buffers, std::forward<Token>(token));
  }

 private:
  TcpStream tcp_;
  CoarseDeadline deadline_{tcp_.socket()};
  std::unique_ptr<net::ssl::stream<TcpStream&>> tls_;
};

// Writes all of `buffers` to a TLS connection, under `timeout` (a plain one is written with
// common/write_now.h's WriteAll, at once when the socket takes it all).
awaitable<beast::error_code> WriteTls(UpstreamStream& stream,
                                      const std::array<net::const_buffer, 2>& buffers,
                                      std::chrono::steady_clock::duration timeout);

// The param of an Error for a backend that failed its identity challenge.
inline constexpr std::string_view kIdentityParam = "backend_identity";
// The param of an Error for an https:// backend whose certificate was refused.
inline constexpr std::string_view kTlsParam = "backend_tls";
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
  // An https:// backend first completes the TLS handshake (within `timeout`): a certificate
  // that does not chain to the CA or names another host closes the connection and the error,
  // kPermissionDenied with param kTlsParam, says so; nothing is sent on it.
  awaitable<Result<std::unique_ptr<UpstreamStream>>> Acquire(std::chrono::milliseconds timeout,
                                                             bool& reused);
  // An idle connection, or null when there is none (Acquire then makes one).
  std::unique_ptr<UpstreamStream> TakeIdle() {
    if (idle_.empty()) return nullptr;
    std::unique_ptr<UpstreamStream> s = std::move(idle_.back());
    idle_.pop_back();
    return s;
  }
  // Returns a connection whose response was read completely and that may be kept alive.
  void Release(std::unique_ptr<UpstreamStream> stream);
  void Clear() { idle_.clear(); }

  const BackendUrl& url() const { return url_; }
  const BackendIdentity& identity() const { return identity_; }

 private:
  // Sends the challenge on `stream` and checks the answer.
  awaitable<Result<void>> Verify(UpstreamStream& stream, std::chrono::milliseconds timeout);
  // The TLS handshake on a new connection to an https:// backend.
  awaitable<Result<void>> Handshake(UpstreamStream& stream, std::chrono::milliseconds timeout);

  net::io_context& io_;
  BackendUrl url_;
  BackendIdentity identity_;
  std::vector<std::unique_ptr<UpstreamStream>> idle_;
  static constexpr size_t kMaxIdle = 256;
};


}  // namespace bmas::gateway
