#include "slurm/tls_front.h"

#include <openssl/ssl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#include <map>
#include <mutex>

#include "common/asio.h"
#include "common/listen_socket.h"
#include "slurm/rest_client.h"

namespace bmas {

namespace ssl = net::ssl;

namespace {

// Headers that belong to one hop, not to the request: never relayed either way.
bool HopByHop(http::field f, std::string_view name) {
  switch (f) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_authenticate:
    case http::field::proxy_authorization:
    case http::field::proxy_connection:
    case http::field::te:
    case http::field::trailer:
    case http::field::transfer_encoding:
    case http::field::upgrade:
    case http::field::content_length:  // recomputed for the body relayed
    case http::field::host:            // the backend's own
      return true;
    default:
      return beast::iequals(name, "proxy-connection");
  }
}

// The path without its query, for the log.
std::string_view PathOf(std::string_view target) {
  return target.substr(0, target.find('?'));
}

}  // namespace

struct TlsFront::Impl {
  TlsFrontOptions o;
  net::io_context io{1};
  ssl::context tls{ssl::context::tls_server};
  tcp::acceptor acceptor{io};
  uint16_t port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<size_t> refused{0};
  size_t open = 0;                         // on the io thread only
  std::map<std::string, size_t> per_peer;  // likewise

  awaitable<void> Accept() {
    for (;;) {
      tcp::socket socket(io);
      beast::error_code ec;
      co_await acceptor.async_accept(socket, net::redirect_error(use_awaitable, ec));
      if (stopping || ec == net::error::operation_aborted) co_return;
      if (ec) {
        // EMFILE, ENFILE, ECONNABORTED...: wait a little and go on serving.
        spdlog::warn("{}: accept: {}", o.name, ec.message());
        net::steady_timer pause(io, std::chrono::milliseconds(100));
        co_await pause.async_wait(net::redirect_error(use_awaitable, ec));
        continue;
      }
      beast::error_code peer_ec;
      const std::string peer = socket.remote_endpoint(peer_ec).address().to_string();
      if (open >= o.max_connections || per_peer[peer] >= o.max_connections_per_address) {
        ++refused;
        socket.close(ec);
        continue;
      }
      ++open;
      ++per_peer[peer];
      net::co_spawn(io, Serve(std::move(socket), peer), [this, peer](std::exception_ptr e) {
        LogIfFailed((o.name + ": a connection").c_str(), e);
        --open;
        if (--per_peer[peer] == 0) per_peer.erase(peer);
      });
    }
  }

  // One client: handshake, one request, relayed; then close.
  awaitable<void> Serve(tcp::socket socket, std::string peer) {
    beast::ssl_stream<beast::tcp_stream> stream(beast::tcp_stream(std::move(socket)), tls);
    beast::error_code ec;
    // One deadline for the handshake and the whole request: a slow client holds a slot no
    // longer than this.
    beast::get_lowest_layer(stream).expires_after(o.client_timeout);
    co_await stream.async_handshake(ssl::stream_base::server,
                                    net::redirect_error(use_awaitable, ec));
    if (ec) co_return;
    beast::flat_buffer buffer;
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(o.max_header_bytes));
    parser.body_limit(o.max_body_bytes);
    co_await http::async_read(stream, buffer, parser, net::redirect_error(use_awaitable, ec));
    if (ec) {
      if (ec == http::error::header_limit || ec == http::error::body_limit) {
        co_await Answer(stream, ec == http::error::header_limit
                                    ? http::status::request_header_fields_too_large
                                    : http::status::payload_too_large,
                        "the request is larger than bmas's TLS front relays");
      } else if (ec != beast::error::timeout && ec != http::error::end_of_stream &&
                 ec != net::error::eof && ec != ssl::error::stream_truncated) {
        co_await Answer(stream, http::status::bad_request, "not an HTTP/1.1 request");
      }
      co_return;
    }
    http::request<http::string_body> in = parser.release();
    // Two user or token headers could be read one way here and another by slurmrestd.
    for (const char* name : {"X-SLURM-USER-NAME", "X-SLURM-USER-TOKEN"}) {
      if (in.count(name) > 1) {
        co_await Answer(stream, http::status::bad_request,
                        fmt::format("{} is given more than once", name));
        co_return;
      }
    }
    const std::string method(in.method_string());
    const std::string path(PathOf(in.target()));

    auto relayed = co_await Relay(std::move(in));
    if (!relayed.second.empty()) {
      spdlog::warn("{}: {} {} {} from {}: {}", o.name, method, path, 502, peer, relayed.second);
      co_await Answer(stream, http::status::bad_gateway,
                      fmt::format("{} behind bmas's TLS front did not answer: {}",
                                  o.backend_name, relayed.second));
      co_return;
    }
    http::response<http::string_body>& res = relayed.first;
    spdlog::info("{}: {} {} {} {} B from {}", o.name, method, path, res.result_int(),
                 res.body().size(), peer);
    beast::get_lowest_layer(stream).expires_after(o.backend_timeout);
    co_await http::async_write(stream, res, net::redirect_error(use_awaitable, ec));
    if (ec) co_return;
    co_await stream.async_shutdown(net::redirect_error(use_awaitable, ec));
  }

  // The request to slurmrestd and its whole answer; or why there is none.
  awaitable<std::pair<http::response<http::string_body>, std::string>> Relay(
      http::request<http::string_body> in) {
    std::pair<http::response<http::string_body>, std::string> out;
    http::request<http::string_body> req{in.method(), in.target(), 11};
    for (const auto& field : in) {
      if (HopByHop(field.name(), field.name_string())) continue;
      req.insert(field.name_string(), field.value());
    }
    req.set(http::field::host, JoinHostPort(o.backend_host, o.backend_port));
    req.body() = std::move(in.body());
    req.keep_alive(false);
    req.prepare_payload();

    beast::tcp_stream backend(io);
    backend.expires_after(o.backend_timeout);
    beast::error_code ec;
    const tcp::endpoint to(net::ip::make_address(o.backend_host), o.backend_port);
    co_await backend.async_connect(to, net::redirect_error(use_awaitable, ec));
    if (ec) {
      out.second = "connect: " + ec.message();
      co_return out;
    }
    co_await http::async_write(backend, req, net::redirect_error(use_awaitable, ec));
    if (ec) {
      out.second = "write: " + ec.message();
      co_return out;
    }
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.header_limit(64 << 10);
    parser.body_limit(o.max_response_bytes);
    co_await http::async_read(backend, buffer, parser, net::redirect_error(use_awaitable, ec));
    if (ec) {
      out.second = ec == beast::error::timeout
                       ? fmt::format("no answer within {} ms", o.backend_timeout.count())
                       : "read: " + ec.message();
      co_return out;
    }
    http::response<http::string_body> got = parser.release();
    http::response<http::string_body>& res = out.first;
    res.version(11);
    res.result(got.result_int());
    for (const auto& field : got) {
      if (HopByHop(field.name(), field.name_string())) continue;
      res.insert(field.name_string(), field.value());
    }
    res.body() = std::move(got.body());
    res.keep_alive(false);
    res.prepare_payload();
    co_return out;
  }

  template <class Stream>
  awaitable<void> Answer(Stream& stream, http::status status, std::string text) {
    http::response<http::string_body> res{status, 11};
    res.set(http::field::content_type, "text/plain");
    res.body() = std::move(text) + "\n";
    res.keep_alive(false);
    res.prepare_payload();
    beast::error_code ec;
    co_await http::async_write(stream, res, net::redirect_error(use_awaitable, ec));
    if (!ec) co_await stream.async_shutdown(net::redirect_error(use_awaitable, ec));
  }
};

Result<std::unique_ptr<TlsFront>> TlsFront::Listen(TlsFrontOptions options) {
  // The backend hop is plain HTTP carrying tokens: it must stay on this machine.
  auto backend = ParseRestAddress(JoinHostPort(options.backend_host, options.backend_port));
  if (!backend) {
    return InvalidArgument(fmt::format("the TLS front's backend {}: {}",
                                       JoinHostPort(options.backend_host, options.backend_port),
                                       backend.error().message),
                           "backend");
  }
  beast::error_code ec;
  net::ip::make_address(options.backend_host, ec);
  if (ec) {
    return InvalidArgument(
        fmt::format("give the TLS front's backend as an address (127.0.0.1), not \"{}\"",
                    options.backend_host),
        "backend");
  }
  auto impl = std::make_unique<Impl>();
  impl->o = std::move(options);
  SSL_CTX_set_min_proto_version(impl->tls.native_handle(), TLS1_2_VERSION);
  impl->tls.set_options(ssl::context::default_workarounds | ssl::context::no_compression |
                        ssl::context::single_dh_use);
  impl->tls.use_certificate_chain(net::buffer(impl->o.cert_pem), ec);
  if (ec) return InvalidArgument("the TLS front's certificate does not load: " + ec.message());
  impl->tls.use_private_key(net::buffer(impl->o.key_pem), ssl::context::pem, ec);
  if (ec || SSL_CTX_check_private_key(impl->tls.native_handle()) != 1) {
    return InvalidArgument("the TLS front's key does not load or is not its certificate's");
  }
  auto fd = ListenTcp(impl->o.listen_host, impl->o.listen_port);
  if (!fd) return fd.error();
  auto bound = BoundPort(*fd);
  if (!bound) {
    ::close(*fd);
    return bound.error();
  }
  impl->port = *bound;
  const tcp protocol =
      net::ip::make_address(impl->o.listen_host, ec).is_v6() && !ec ? tcp::v6() : tcp::v4();
  impl->acceptor.assign(protocol, *fd, ec);
  if (ec) {
    ::close(*fd);
    return Internal("cannot serve the TLS front's socket: " + ec.message());
  }
  return std::unique_ptr<TlsFront>(new TlsFront(std::move(impl)));
}

TlsFront::TlsFront(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsFront::~TlsFront() = default;

uint16_t TlsFront::port() const { return impl_->port; }
size_t TlsFront::refused() const { return impl_->refused.load(); }

void TlsFront::Run() {
  net::co_spawn(impl_->io, impl_->Accept(),
                [impl = impl_.get()](std::exception_ptr e) {
                  LogIfFailed((impl->o.name + ": accept").c_str(), e);
                });
  impl_->io.run();
}

void TlsFront::Stop() {
  impl_->stopping = true;
  net::post(impl_->io, [impl = impl_.get()] {
    beast::error_code ec;
    impl->acceptor.close(ec);
  });
}

}  // namespace bmas
