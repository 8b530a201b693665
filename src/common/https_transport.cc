#include "common/https_transport.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <fmt/format.h>

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>

#include "common/asio.h"
#include "common/http_exchange.h"

namespace bmas {
namespace {

namespace ssl = net::ssl;

constexpr size_t kMaxCaFileBytes = 1u << 20;

bool IsIpAddress(const std::string& host) {
  beast::error_code ec;
  net::ip::make_address(host, ec);
  return !ec;
}

// The CA file's text; a bounded read of a regular file.
Result<std::string> ReadCaFile(const std::string& path) {
  if (path.empty()) return InvalidArgument("no CA file given to check the server with", "ca_file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return InvalidArgument(
        fmt::format("cannot read the CA file {}: {}", path, std::strerror(errno)), "ca_file");
  }
  std::string text;
  char buf[8192];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < kMaxCaFileBytes) {
    text.append(buf, static_cast<size_t>(n));
  }
  const int err = errno;
  ::close(fd);
  if (n < 0) {
    return InvalidArgument(fmt::format("cannot read the CA file {}: {}", path, std::strerror(err)),
                           "ca_file");
  }
  if (text.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return InvalidArgument(fmt::format("the CA file {} holds no PEM certificate", path),
                           "ca_file");
  }
  return text;
}

using internal::Exchanged;

class HttpsTransport final : public HttpTransport {
 public:
  HttpsTransport(std::string host, uint16_t port, std::string ca_file,
                 std::chrono::milliseconds timeout, std::string peer)
      : host_(std::move(host)),
        port_(port),
        ca_file_(std::move(ca_file)),
        timeout_(timeout),
        peer_(std::move(peer)) {}

  Result<ClientResponse> RoundTrip(const ClientRequest& request) override {
    auto ca = ReadCaFile(ca_file_);
    if (!ca) return ca.error();
    ssl::context ctx(ssl::context::tls_client);
    SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
    ctx.set_options(ssl::context::no_compression);
    beast::error_code ec;
    ctx.add_certificate_authority(net::buffer(*ca), ec);
    if (ec) {
      return InvalidArgument(
          fmt::format("the CA file {} is not a PEM certificate: {}", ca_file_, ec.message()),
          "ca_file");
    }
    ctx.set_verify_mode(ssl::verify_peer);

    net::io_context io;
    auto result = internal::RunExchange(io, Exchange(ctx, request), peer_, Where());
    if (!result) return result.error();
    if (result->verify_result != X509_V_OK) {
      // The handshake stopped at the server's certificate: no request was written.
      return Error{ErrorCode::kPermissionDenied,
                   fmt::format("{} at {} is not the server the CA {} vouches for: {}; nothing "
                               "was sent to it",
                               peer_, Where(), ca_file_,
                               X509_verify_cert_error_string(result->verify_result)),
                   {}};
    }
    if (result->ec) return internal::ExchangeFailure(*result, peer_, Where(), timeout_);
    return std::move(result->response);
  }

  std::string Where() const override {
    if (host_.find(':') != std::string::npos) return fmt::format("https://[{}]:{}", host_, port_);
    return fmt::format("https://{}:{}", host_, port_);
  }

 private:
  awaitable<Exchanged> Exchange(ssl::context& ctx, ClientRequest request) {
    Exchanged out;
    auto executor = co_await net::this_coro::executor;
    tcp::resolver resolver(executor);
    beast::ssl_stream<beast::tcp_stream> stream(executor, ctx);
    SSL* native = stream.native_handle();
    // The certificate must name what was dialled: a DNS name, or an IP address SAN.
    X509_VERIFY_PARAM* param = SSL_get0_param(native);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    const bool ip = IsIpAddress(host_);
    const int named = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, host_.c_str())
                         : X509_VERIFY_PARAM_set1_host(param, host_.c_str(), host_.size());
    if (named != 1) {
      out.ec = beast::error_code(static_cast<int>(ERR_get_error()), net::error::get_ssl_category());
      out.step = "set up TLS";
      co_return out;
    }
    // SNI takes host names only (RFC 6066).
    if (!ip) SSL_set_tlsext_host_name(native, host_.c_str());

    const std::string port = std::to_string(port_);
    auto endpoints =
        co_await resolver.async_resolve(host_, port, net::redirect_error(use_awaitable, out.ec));
    if (out.ec) {
      out.step = "resolve";
      co_return out;
    }
    beast::get_lowest_layer(stream).expires_after(timeout_);
    co_await beast::get_lowest_layer(stream).async_connect(
        endpoints, net::redirect_error(use_awaitable, out.ec));
    if (out.ec) {
      out.step = "connect";
      co_return out;
    }
    co_await stream.async_handshake(ssl::stream_base::client,
                                    net::redirect_error(use_awaitable, out.ec));
    if (out.ec) {
      out.step = "TLS handshake";
      out.verify_result = SSL_get_verify_result(native);
      co_return out;
    }

    const std::string authority = host_.find(':') == std::string::npos
                                      ? fmt::format("{}:{}", host_, port_)
                                      : fmt::format("[{}]:{}", host_, port_);
    co_await internal::WriteAndRead(stream, std::move(request), authority, out);
    if (out.ec) co_return out;
    // The server closes (Connection: close); a missing close_notify is not this client's loss.
    beast::error_code ignored;
    beast::get_lowest_layer(stream).socket().shutdown(tcp::socket::shutdown_both, ignored);
    co_return out;
  }

  std::string host_;
  uint16_t port_;
  std::string ca_file_;
  std::chrono::milliseconds timeout_;
  std::string peer_;
};

}  // namespace

HttpTransportPtr NewHttpsTransport(std::string host, uint16_t port, std::string ca_file,
                                   std::chrono::milliseconds timeout, std::string peer) {
  return std::make_unique<HttpsTransport>(std::move(host), port, std::move(ca_file), timeout,
                                          std::move(peer));
}

}  // namespace bmas
