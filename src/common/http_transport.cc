#include "common/http_transport.h"

#include <fmt/format.h>

#include <exception>
#include <optional>

#include "common/asio.h"

namespace bmas {
namespace {

constexpr size_t kMaxResponseBytes = 256u << 20;  // a /jobs listing of a busy cluster

// The outcome of one exchange; default-constructible so that it can leave a coroutine.
struct Exchanged {
  beast::error_code ec;
  const char* step = "";
  ClientResponse response;
};

class TcpHttpTransport final : public HttpTransport {
 public:
  TcpHttpTransport(std::string host, uint16_t port, std::chrono::milliseconds timeout,
                   std::string peer)
      : host_(std::move(host)), port_(port), timeout_(timeout), peer_(std::move(peer)) {}

  Result<ClientResponse> RoundTrip(const ClientRequest& request) override {
    net::io_context io;
    std::optional<Exchanged> result;
    std::exception_ptr failure;
    net::co_spawn(io, Exchange(request), [&result, &failure](std::exception_ptr e, Exchanged x) {
      failure = e;
      if (!e) result = std::move(x);
    });
    io.run();
    if (failure) {
      try {
        std::rethrow_exception(failure);
      } catch (const std::exception& e) {
        return Error{ErrorCode::kUnavailable,
                     fmt::format("request to {} at {} failed: {}", peer_, Where(), e.what()),
                     {}};
      }
    }
    if (!result.has_value()) return Internal(peer_ + " exchange ended without a result");
    if (result->ec) {
      const bool timed_out = result->ec == beast::error::timeout;
      return Error{ErrorCode::kUnavailable,
                   fmt::format("{} to {} at {} failed: {}", result->step, peer_, Where(),
                               timed_out ? fmt::format("no answer within {} ms", timeout_.count())
                                         : result->ec.message()),
                   {}};
    }
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

    const http::verb verb = http::string_to_verb(request.method);
    http::request<http::string_body> req{verb, request.target, 11};
    req.set(http::field::host, fmt::format("{}:{}", host_, port_));
    req.set(http::field::user_agent, "bmas");
    req.set(http::field::accept, "application/json");
    for (const auto& [name, value] : request.headers) req.set(name, value);
    if (!request.body.empty()) {
      // Without it slurmrestd reads the body as a URL query: "Unable to parse query."
      req.set(http::field::content_type, request.content_type);
      req.body() = std::move(request.body);
    }
    req.keep_alive(false);
    req.prepare_payload();
    co_await http::async_write(stream, req, net::redirect_error(use_awaitable, out.ec));
    if (out.ec) {
      out.step = "write";
      co_return out;
    }

    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxResponseBytes);
    co_await http::async_read(stream, buffer, parser, net::redirect_error(use_awaitable, out.ec));
    if (out.ec) {
      out.step = "read";
      co_return out;
    }
    out.response.status = static_cast<int>(parser.get().result_int());
    if (auto etag = parser.get().find(http::field::etag); etag != parser.get().end()) {
      out.response.etag = std::string(etag->value());
    }
    out.response.body = std::move(parser.get().body());
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
