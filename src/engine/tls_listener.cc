#include "engine/tls_listener.h"

#include <unistd.h>

#include <array>

#include <boost/asio/ssl.hpp>
#include <fmt/format.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include "common/listen_socket.h"
#include "common/openssl_ptr.h"

namespace bmas::engine {

namespace ssl = net::ssl;

struct TlsListener::Impl : std::enable_shared_from_this<TlsListener::Impl> {
  Impl(net::io_context& io, TlsListenerOptions o)
      : io(io), options(std::move(o)), context(ssl::context::tls_server), acceptor(io) {}

  // One client's connection and the engine's, relayed until either closes.
  struct Pair {
    Pair(net::io_context& io, TcpStream::socket_type socket, ssl::context& context)
        : client(std::move(socket), context), engine(io) {}
    ssl::stream<TcpStream> client;
    TcpStream engine;
    bool closed = false;

    void Close() {
      if (closed) return;
      closed = true;
      beast::error_code ignored;
      beast::get_lowest_layer(client).socket().shutdown(tcp::socket::shutdown_both, ignored);
      beast::get_lowest_layer(client).socket().close(ignored);
      engine.socket().shutdown(tcp::socket::shutdown_both, ignored);
      engine.socket().close(ignored);
    }
  };

  awaitable<void> Accept() {
    auto self = shared_from_this();
    while (!stopped) {
      beast::error_code ec;
      TcpStream::socket_type socket =
          co_await acceptor.async_accept(io, net::redirect_error(use_awaitable, ec));
      if (stopped) co_return;
      if (ec) {
        // EMFILE and the like: wait a little instead of spinning.
        net::steady_timer pause(io, std::chrono::milliseconds(50));
        co_await pause.async_wait(net::redirect_error(use_awaitable, ec));
        continue;
      }
      if (active >= options.max_connections) {
        beast::error_code ignored;
        socket.close(ignored);
        continue;
      }
      ++active;
      net::co_spawn(io, Session(std::move(socket)), LogFailure("engine TLS connection"));
    }
  }

  awaitable<void> Session(TcpStream::socket_type socket) {
    auto self = shared_from_this();
    struct Count {
      size_t& n;
      ~Count() { --n; }
    } count{active};
    auto pair = std::make_shared<Pair>(io, std::move(socket), context);
    beast::error_code ec;
    auto& lowest = beast::get_lowest_layer(pair->client);
    lowest.expires_after(options.handshake_timeout);
    co_await pair->client.async_handshake(ssl::stream_base::server,
                                          net::redirect_error(use_awaitable, ec));
    if (!ec) {
      lowest.expires_never();
      lowest.socket().set_option(tcp::no_delay(true), ec);
      pair->engine.expires_after(options.handshake_timeout);
      co_await pair->engine.async_connect(
          tcp::endpoint(net::ip::make_address_v4("127.0.0.1"), backend_port),
          net::redirect_error(use_awaitable, ec));
      if (ec) spdlog::warn("bmas engine: TLS: cannot reach the engine's port: {}", ec.message());
    }
    if (ec) {
      pair->Close();
      co_return;
    }
    pair->engine.expires_never();
    pair->engine.socket().set_option(tcp::no_delay(true), ec);
    // Each direction in a coroutine of its own; whichever ends first closes both.
    net::co_spawn(io, Relay(pair, pair->client, pair->engine), LogFailure("engine TLS relay"));
    co_await Relay(pair, pair->engine, pair->client);
  }

  // Copies what `from` reads to `to` until either fails or the pair is closed; then closes it.
  template <class From, class To>
  static awaitable<void> Relay(std::shared_ptr<Pair> pair, From& from, To& to) {
    std::array<char, 16384> buffer;
    beast::error_code ec;
    while (!ec && !pair->closed) {
      const size_t n =
          co_await from.async_read_some(net::buffer(buffer), net::redirect_error(use_awaitable, ec));
      if (n > 0 && !pair->closed) {
        co_await net::async_write(to, net::buffer(buffer.data(), n),
                                  net::redirect_error(use_awaitable, ec));
      }
    }
    pair->Close();
  }

  net::io_context& io;
  TlsListenerOptions options;
  ssl::context context;
  tcp::acceptor acceptor;
  uint16_t port = 0;
  uint16_t backend_port = 0;
  size_t active = 0;
  bool stopped = false;
};

namespace {

Result<void> LoadContext(ssl::context& ctx, const TlsListenerOptions& o) {
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_compression |
                  ssl::context::single_dh_use);
  beast::error_code ec;
  ctx.use_certificate_chain_file(o.certfile, ec);
  if (ec) {
    return InvalidArgument(
        fmt::format("--ssl-certfile {}: cannot load a PEM certificate from it: {}", o.certfile,
                    ec.message()),
        "ssl_certfile");
  }
  ctx.use_private_key_file(o.keyfile, ssl::context::pem, ec);
  if (ec) {
    return InvalidArgument(fmt::format("--ssl-keyfile {}: cannot load a PEM key from it: {} "
                                       "(it must be readable by the account the engine runs as)",
                                       o.keyfile, ec.message()),
                           "ssl_keyfile");
  }
  if (SSL_CTX_check_private_key(ctx.native_handle()) != 1) {
    return InvalidArgument(fmt::format("--ssl-keyfile {} is not the key of --ssl-certfile {}: {}",
                                       o.keyfile, o.certfile, openssl::TakeError()),
                           "ssl_keyfile");
  }
  if (o.cert_reqs < 0 || o.cert_reqs > 2) {
    return InvalidArgument(
        fmt::format("--ssl-cert-reqs {} is not 0 (none), 1 (optional) or 2 (required)",
                    o.cert_reqs),
        "ssl_cert_reqs");
  }
  if (o.cert_reqs == 0) {
    ctx.set_verify_mode(ssl::verify_none);
    return {};
  }
  if (o.ca_certs.empty()) {
    return InvalidArgument(fmt::format("--ssl-cert-reqs {} checks client certificates: give the "
                                       "CA they chain to with --ssl-ca-certs",
                                       o.cert_reqs),
                           "ssl_ca_certs");
  }
  ctx.load_verify_file(o.ca_certs, ec);
  if (ec) {
    return InvalidArgument(fmt::format("--ssl-ca-certs {}: cannot load PEM certificates from it: {}",
                                       o.ca_certs, ec.message()),
                           "ssl_ca_certs");
  }
  ctx.set_verify_mode(o.cert_reqs == 2 ? ssl::verify_peer | ssl::verify_fail_if_no_peer_cert
                                       : ssl::verify_peer);
  return {};
}

}  // namespace

Result<std::unique_ptr<TlsListener>> TlsListener::Listen(net::io_context& io,
                                                         TlsListenerOptions options) {
  auto impl = std::make_shared<Impl>(io, std::move(options));
  if (auto loaded = LoadContext(impl->context, impl->options); !loaded) return loaded.error();
  auto fd = ListenTcp(impl->options.host, impl->options.port);
  if (!fd) return fd.error();
  auto port = BoundPort(*fd);
  if (!port) {
    ::close(*fd);
    return port.error();
  }
  beast::error_code ec;
  const bool v6 = impl->options.host.find(':') != std::string::npos;
  impl->acceptor.assign(v6 ? tcp::v6() : tcp::v4(), *fd, ec);
  if (ec) {
    ::close(*fd);
    return Error{ErrorCode::kInternal,
                 fmt::format("the TLS listener on port {}: {}", *port, ec.message())};
  }
  impl->port = *port;
  return std::unique_ptr<TlsListener>(new TlsListener(std::move(impl)));
}

TlsListener::TlsListener(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

TlsListener::~TlsListener() { Stop(); }

uint16_t TlsListener::port() const { return impl_->port; }

void TlsListener::Start(uint16_t backend_port) {
  impl_->backend_port = backend_port;
  net::co_spawn(impl_->io, impl_->Accept(), LogFailure("engine TLS listener"));
}

void TlsListener::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
}

}  // namespace bmas::engine
