#include "common/http_transport.h"

#include <fmt/format.h>

#include <exception>
#include <optional>

#include "common/asio.h"
#include "common/http_exchange.h"

namespace bmas {
namespace {

using internal::Exchanged;

class TcpHttpTransport final : public HttpTransport {
 public:
  TcpHttpTransport(std::string host, uint16_t port, std::chrono::milliseconds timeout,
                   std::string peer)
      : host_(std::move(host)), port_(port), timeout_(timeout), peer_(std::move(peer)) {}

  Result<ClientResponse> RoundTrip(const ClientRequest& request) override {
    net::io_context io;
    auto result = internal::RunExchange(io, Exchange(request), peer_, Where());
    if (!result) return result.error();
    if (result->ec) return internal::ExchangeFailure(*result, peer_, Where(), timeout_);
    return std::move(result->response);
  }

  std::string Where() const override {
    if (host_.find(':') != std::string::npos) return fmt::format("http://[{}]:{}", host_, port_);
    return fmt::format("http://{}:{}", host_, port_);
  }

 private:
  // One request on a fresh connection. The stream's deadline covers connect, write and read.
  awaitable<Exchanged> Exchange(ClientRequest request) {
    Exchanged out;
    auto executor = co_await net::this_coro::executor;
    tcp::resolver resolver(executor);
    beast::tcp_stream stream(executor);
    const std::string port = std::to_string(port_);
    auto endpoints =
        co_await resolver.async_resolve(host_, port, net::redirect_error(use_awaitable, out.ec));
    if (out.ec) {
      out.step = "resolve";
      co_return out;
    }
    stream.expires_after(timeout_);
    co_await stream.async_connect(endpoints, net::redirect_error(use_awaitable, out.ec));
    if (out.ec) {
      out.step = "connect";
      co_return out;
    }

    co_await internal::WriteAndRead(stream, std::move(request),
                                    fmt::format("{}:{}", host_, port_), out);
    if (out.ec) co_return out;
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    co_return out;
  }

  std::string host_;
  uint16_t port_;
  std::chrono::milliseconds timeout_;
  std::string peer_;
};

}  // namespace

HttpTransportPtr NewTcpHttpTransport(std::string host, uint16_t port,
                                     std::chrono::milliseconds timeout, std::string peer) {
  return std::make_unique<TcpHttpTransport>(std::move(host), port, timeout, std::move(peer));
}

}  // namespace bmas
