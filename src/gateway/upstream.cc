#include "gateway/upstream.h"

#include <fmt/format.h>

#include <charconv>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/backend_identity.h"
#include "common/listen_socket.h"
#include "common/read_buffer.h"

namespace bmas::gateway {

Result<BackendUrl> ParseBackendUrl(std::string_view url) {
  std::string_view rest = url;
  constexpr std::string_view kScheme = "http://";
  constexpr std::string_view kTlsScheme = "https://";
  BackendUrl b;
  if (rest.starts_with(kTlsScheme)) {
    b.tls = true;
    rest.remove_prefix(kTlsScheme.size());
  } else if (rest.starts_with(kScheme)) {
    rest.remove_prefix(kScheme.size());
  } else {
    return InvalidArgument(
        fmt::format("backend '{}' must start with http:// (on loopback) or https://", url),
        "backend");
  }
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  b.base_path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
  size_t colon = authority.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == authority.size()) {
    return InvalidArgument(fmt::format("backend '{}' needs host:port", url), "backend");
  }
  b.host = std::string(authority.substr(0, colon));
  b.port = std::string(authority.substr(colon + 1));
  for (char c : b.port) {
    if (c < '0' || c > '9') {
      return InvalidArgument(fmt::format("backend '{}': port '{}' is not a number", url, b.port),
                             "backend");
    }
  }
  b.url = fmt::format("{}{}{}", b.tls ? kTlsScheme : kScheme, authority, b.base_path);
  return b;
}

namespace {

// A URL's host as an address or name: "[::1]" is "::1".
std::string Unbracketed(const std::string& host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

Result<void> CheckBackendTransport(const BackendUrl& url, bool allow_plain_remote) {
  if (url.tls || allow_plain_remote || IsLoopbackHost(Unbracketed(url.host))) return {};
  return InvalidArgument(
      fmt::format("backend {} is plain HTTP off loopback: prompts, answers and its key would "
                  "cross the network in clear text. Serve it with TLS (bmas engine and vLLM: "
                  "--ssl-certfile/--ssl-keyfile, the node's replica certificate) and give it as "
                  "https://{}:{}{}, or, only on a network you trust with users' data, set "
                  "BMAS_PLAIN_REMOTE_BACKENDS=1 in the gateway's environment",
                  url.url, url.host, url.port, url.base_path),
      "backend");
}

Result<std::shared_ptr<net::ssl::context>> BackendTlsContext(const std::string& ca_pem,
                                                             const std::string& ca_file) {
  auto ctx = std::make_shared<net::ssl::context>(net::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  ctx->set_options(net::ssl::context::no_compression);
  beast::error_code ec;
  ctx->add_certificate_authority(net::buffer(ca_pem), ec);
  if (ec || ca_pem.empty()) {
    return InvalidArgument(
        fmt::format("the backends' CA file {} holds no PEM certificate{}{}: set "
                    "BMAS_BACKEND_CA_FILE to the cluster CA (/etc/bmas/ca.crt, written by `bmas "
                    "cluster init` and `bmas node join`)",
                    ca_file, ec ? ": " : "", ec ? ec.message() : ""),
        "backend_ca_file");
  }
  ctx->set_verify_mode(net::ssl::verify_peer);
  return ctx;
}

Result<void> UpstreamStream::StartTls(net::ssl::context& context, const std::string& host) {
  tls_ = std::make_unique<net::ssl::stream<TcpStream&>>(tcp_, context);
  SSL* native = tls_->native_handle();
  // The certificate must name what was dialled: a DNS name, or an IP address SAN.
  const std::string name = Unbracketed(host);
  X509_VERIFY_PARAM* param = SSL_get0_param(native);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  beast::error_code ec;
  net::ip::make_address(name, ec);
  const bool ip = !ec;
  const int named = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
                       : X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size());
  if (named != 1) {
    return InvalidArgument(fmt::format("cannot check a certificate for '{}'", name), "backend");
  }
  if (!ip) SSL_set_tlsext_host_name(native, name.c_str());  // SNI: names only (RFC 6066)
  return {};
}

awaitable<beast::error_code> WriteTls(UpstreamStream& stream,
                                      const std::array<net::const_buffer, 2>& buffers,
                                      std::chrono::steady_clock::duration timeout) {
  beast::error_code ec;
  stream.expires_after(timeout);
  co_await net::async_write(*stream.tls_stream(), buffers, net::redirect_error(use_awaitable, ec));
  stream.tcp().expires_never();  // the answer is read under stream.deadline()
  co_return ec;
}

ConnectionPool::ConnectionPool(net::io_context& io, BackendUrl url, BackendIdentity identity)
    : io_(io), url_(std::move(url)), identity_(std::move(identity)) {}

awaitable<Result<void>> ConnectionPool::Handshake(UpstreamStream& stream,
                                                  std::chrono::milliseconds timeout) {
  if (auto started = stream.StartTls(*identity_.tls, url_.host); !started) {
    co_return started.error();
  }
  beast::error_code ec;
  stream.expires_after(timeout);
  co_await stream.tls_stream()->async_handshake(net::ssl::stream_base::client,
                                                net::redirect_error(use_awaitable, ec));
  if (!ec) co_return Result<void>();
  const long verified = SSL_get_verify_result(stream.tls_stream()->native_handle());
  if (verified != X509_V_OK) {
    co_return Error{ErrorCode::kPermissionDenied,
                    fmt::format("backend {} is not the server the cluster CA vouches for: {}; "
                                "nothing was sent to it",
                                url_.url, X509_verify_cert_error_string(verified)),
                    std::string(kTlsParam)};
  }
  co_return Error{ErrorCode::kUnavailable,
                  fmt::format("backend {}: TLS handshake: {}", url_.url,
                              ec == beast::error::timeout
                                  ? fmt::format("nothing within {} ms", timeout.count())
                                  : ec.message())};
}

awaitable<Result<void>> ConnectionPool::Verify(UpstreamStream& stream,
                                               std::chrono::milliseconds timeout) {
  const std::string nonce = NewChallengeNonce();
  http::request<http::empty_body> req{
      http::verb::get, fmt::format("{}{}?nonce={}", url_.base_path, kChallengePath, nonce), 11};
  req.set(http::field::host, url_.host + ":" + url_.port);
  beast::error_code ec;
  stream.expires_after(timeout);
  co_await http::async_write(stream, req, net::redirect_error(use_awaitable, ec));
  ReadBuffer buffer;
  http::response_parser<http::string_body> parser;
  parser.header_limit(8192);
  parser.body_limit(1024);
  if (!ec) co_await http::async_read(stream, buffer, parser, net::redirect_error(use_awaitable, ec));
  if (ec) {
    // Silence or a closed connection says nothing of who listens: the backend is just down.
    co_return Error{ErrorCode::kUnavailable,
                    fmt::format("backend {}: no answer to the identity challenge: {}", url_.url,
                                ec == beast::error::timeout
                                    ? fmt::format("nothing within {} ms", timeout.count())
                                    : ec.message())};
  }
  std::string why;
  if (parser.get().result() == http::status::not_found) {
    why = "it answered HTTP 404; a real vLLM does not know the challenge: give it to the gateway "
          "with --unverified-backend, and only on a port no user can bind";
  } else if (parser.get().result() != http::status::ok) {
    why = fmt::format("it answered HTTP {}", parser.get().result_int());
  } else if (!SecretsEqual(parser.get().body(), ChallengeAnswer(identity_.key, nonce))) {
    why = "its answer does not match its key";
  } else if (!parser.keep_alive() || buffer.size() > 0) {
    why = "it did not keep the connection open";
  }
  if (why.empty()) co_return Result<void>();
  co_return Error{ErrorCode::kUnavailable,
                  fmt::format("backend {} did not prove its identity ({}): something else may hold "
                              "its port; it is sent no key and no request",
                              url_.url, why),
                  std::string(kIdentityParam)};
}

awaitable<Result<std::unique_ptr<UpstreamStream>>> ConnectionPool::Acquire(
    std::chrono::milliseconds timeout, bool& reused) {
  if (std::unique_ptr<UpstreamStream> s = TakeIdle()) {
    reused = true;
    co_return std::move(s);
  }
  reused = false;
  tcp::resolver resolver(io_);
  beast::error_code ec;
  auto endpoints = co_await resolver.async_resolve(url_.host, url_.port,
                                                   net::redirect_error(use_awaitable, ec));
  if (ec) {
    co_return Error{ErrorCode::kUnavailable,
                    fmt::format("cannot resolve backend {}: {}", url_.url, ec.message())};
  }
  auto stream = std::make_unique<UpstreamStream>(io_);
  stream->expires_after(timeout);
  co_await stream->tcp().async_connect(endpoints, net::redirect_error(use_awaitable, ec));
  if (ec) {
    co_return Error{ErrorCode::kUnavailable,
                    fmt::format("cannot connect to backend {}: {}", url_.url, ec.message())};
  }
  stream->socket().set_option(tcp::no_delay(true), ec);
  if (url_.tls) {
    if (!identity_.tls) {
      co_return Error{ErrorCode::kInvalidArgument,
                      fmt::format("backend {} is https:// but the gateway has no CA to check it "
                                  "with: put the cluster CA in /etc/bmas/ca.crt or $BMAS_BACKEND_CA_FILE",
                                  url_.url),
                      std::string(kTlsParam)};
    }
    auto shaken = co_await Handshake(*stream, timeout);
    if (!shaken) co_return shaken.error();
  }
  if (identity_.verify) {
    auto verified = co_await Verify(*stream, timeout);
    if (!verified) co_return verified.error();
  }
  stream->tcp().expires_never();  // requests are read under stream->deadline()
  co_return std::move(stream);
}

void ConnectionPool::Release(std::unique_ptr<UpstreamStream> stream) {
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(stream));
}

double MetricSum(std::string_view text, std::string_view name) {
  double sum = 0;
  size_t pos = 0;
  while ((pos = text.find(name, pos)) != std::string_view::npos) {
    const bool line_start = pos == 0 || text[pos - 1] == '\n';
    pos += name.size();
    if (!line_start || pos >= text.size() || (text[pos] != '{' && text[pos] != ' ')) continue;
    size_t eol = text.find('\n', pos);
    std::string_view line = text.substr(pos, eol == std::string_view::npos ? text.npos : eol - pos);
    size_t space = line.rfind(' ');
    if (space != std::string_view::npos) sum += std::strtod(std::string(line.substr(space + 1)).c_str(), nullptr);
  }
  return sum;
}

int64_t MetricLabelInt(std::string_view text, std::string_view name, std::string_view label) {
  size_t pos = 0;
  while ((pos = text.find(name, pos)) != std::string_view::npos) {
    const bool line_start = pos == 0 || text[pos - 1] == '\n';
    pos += name.size();
    if (!line_start || pos >= text.size() || text[pos] != '{') continue;
    const size_t close = text.find('}', pos);
    if (close == std::string_view::npos) return 0;
    const std::string_view labels = text.substr(pos + 1, close - pos - 1);
    // Label values here are digits, so a plain search for `label="` is enough.
    for (size_t at = labels.find(label); at != std::string_view::npos;
         at = labels.find(label, at + 1)) {
      const bool starts = at == 0 || labels[at - 1] == ',';
      const std::string_view rest = labels.substr(at + label.size());
      if (!starts || !rest.starts_with("=\"")) continue;
      const std::string_view value = rest.substr(2, rest.find('"', 2) - 2);
      int64_t v = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      return ec == std::errc() && end == value.data() + value.size() ? v : 0;
    }
    return 0;
  }
  return 0;
}

}  // namespace bmas::gateway
