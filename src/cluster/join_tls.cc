#include "cluster/join_tls.h"

#include <fmt/format.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#include <csignal>
#include <map>
#include <optional>

#include "common/asio.h"
#include "common/json_object.h"
#include "common/json_read.h"
#include "common/listen_socket.h"
#include "common/version.h"

namespace bmas::cluster {
namespace {

namespace ssl = net::ssl;
using TlsStream = beast::ssl_stream<TcpStream>;

constexpr size_t kMaxHeaderBytes = 4096;
constexpr size_t kMaxDrainBytes = 256 * 1024;

http::status StatusOf(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return http::status::bad_request;
    case ErrorCode::kNotFound:
      return http::status::not_found;
    case ErrorCode::kTooLarge:
      return http::status::payload_too_large;
    case ErrorCode::kPermissionDenied:
      return http::status::forbidden;
    case ErrorCode::kAlreadyExists:
      return http::status::conflict;
    case ErrorCode::kUnavailable:
      return http::status::service_unavailable;
    case ErrorCode::kInternal:
      break;
  }
  return http::status::internal_server_error;
}

ErrorCode CodeOf(unsigned status) {
  switch (status) {
    case 400:
      return ErrorCode::kInvalidArgument;
    case 403:
      return ErrorCode::kPermissionDenied;
    case 404:
      return ErrorCode::kNotFound;
    case 413:
      return ErrorCode::kTooLarge;
    case 503:
      return ErrorCode::kUnavailable;
    default:
      return ErrorCode::kInternal;
  }
}

std::string PemOf(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  std::string out;
  if (bio != nullptr && PEM_write_bio_X509(bio, cert) == 1) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    out.assign(data, static_cast<size_t>(n));
  }
  BIO_free(bio);
  return out;
}

class Server final : public JoinServer {
 public:
  Server(JoinServerOptions options, JoinHandler handler, LxdPeersHandler peers_handler)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        peers_handler_(std::move(peers_handler)),
        ctx_(ssl::context::tls_server),
        acceptor_(io_),
        signals_(io_) {}

  Result<void> Open() {
    SSL_CTX_set_min_proto_version(ctx_.native_handle(), TLS1_2_VERSION);
    // A client certificate is asked for, not required (a joining node has none yet), and
    // checked by the handler of the path that needs one, against the CA and the node's name.
    SSL_CTX_set_verify(ctx_.native_handle(), SSL_VERIFY_PEER, [](int, X509_STORE_CTX*) {
      return 1;
    });
    const std::string chain = options_.server.cert_pem + options_.ca_cert_pem;
    beast::error_code ec;
    ctx_.use_certificate_chain(net::buffer(chain), ec);
    if (!ec) ctx_.use_private_key(net::buffer(options_.server.key_pem), ssl::context::pem, ec);
    if (ec) {
      return InvalidArgument(
          fmt::format("the join service's certificate or key is refused by TLS: {}", ec.message()),
          "server");
    }
    auto fd = ListenTcp(options_.host, options_.port);
    if (!fd) return fd.error();
    auto port = BoundPort(*fd);
    if (!port) {
      close(*fd);
      return port.error();
    }
    const bool v6 = options_.host.find(':') != std::string::npos;
    acceptor_.assign(v6 ? tcp::v6() : tcp::v4(), *fd, ec);
    if (ec) {
      close(*fd);
      return Internal(fmt::format("listening on {}:{}: {}", options_.host, *port, ec.message()));
    }
    port_ = *port;
    return {};
  }

  uint16_t port() const override { return port_; }

  void Run(bool stop_on_signals) override {
    if (stop_on_signals) {
      signals_.add(SIGINT);
      signals_.add(SIGTERM);
      signals_.async_wait([this](const beast::error_code& ec, int) {
        if (!ec) Stop();
      });
    }
    net::co_spawn(io_, AcceptLoop(), LogFailure("join service accept loop"));
    io_.run();
  }

  void Stop() override {
    net::post(io_, [this] {
      stopping_ = true;
      beast::error_code ec;
      acceptor_.close(ec);
      signals_.cancel(ec);
    });
  }

 private:
  awaitable<void> AcceptLoop() {
    while (!stopping_) {
      beast::error_code ec;
      TcpStream::socket_type socket = co_await acceptor_.async_accept(
          io_.get_executor(), net::redirect_error(use_awaitable, ec));
      if (ec) {
        if (stopping_ || ec == net::error::operation_aborted) break;
        // Out of descriptors and the like: back off, then accept again.
        spdlog::warn("join service: accept failed: {}", ec.message());
        net::steady_timer t(io_, std::chrono::milliseconds(100));
        co_await t.async_wait(net::redirect_error(use_awaitable, ec));
        continue;
      }
      const auto remote = socket.remote_endpoint(ec);
      const std::string peer = ec ? std::string("?") : remote.address().to_string();
      if (ec || active_ >= options_.max_connections ||
          per_peer_[peer] >= options_.max_connections_per_peer) {
        socket.close(ec);
        continue;
      }
      ++active_;
      ++per_peer_[peer];
      net::co_spawn(io_, Session(std::move(socket), peer), [this, peer](std::exception_ptr e) {
        --active_;
        if (--per_peer_[peer] == 0) per_peer_.erase(peer);
        LogIfFailed("join session", e);
      });
    }
  }

  awaitable<void> Session(TcpStream::socket_type socket, std::string peer) {
    beast::error_code ec;
    TlsStream stream(TcpStream(std::move(socket)), ctx_);
    // One deadline for the whole connection: a slow client holds one slot for at most this.
    beast::get_lowest_layer(stream).expires_after(options_.timeout);
    co_await stream.async_handshake(ssl::stream_base::server,
                                    net::redirect_error(use_awaitable, ec));
    if (ec) {
      spdlog::info("join service: TLS handshake with {} failed: {}", peer, ec.message());
      co_return;
    }
    beast::flat_buffer buffer;
    http::request_parser<http::string_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    parser.body_limit(kMaxJoinRequestBytes);
    co_await http::async_read(stream, buffer, parser, net::redirect_error(use_awaitable, ec));
    Result<std::string> reply = Error{};
    const bool too_large = ec == http::error::body_limit || ec == http::error::header_limit;
    if (too_large) {
      reply = Error{ErrorCode::kTooLarge,
                    fmt::format("a join request is at most {} bytes", kMaxJoinRequestBytes),
                    {}};
    } else if (ec) {
      spdlog::info("join service: reading from {} failed: {}", peer, ec.message());
      co_return;
    } else {
      const auto& req = parser.get();
      if (req.method() == http::verb::post && req.target() == kLxdPeersPath && peers_handler_) {
        reply = AnswerPeers(stream.native_handle(), req.body(), peer);
      } else if (req.method() != http::verb::post || req.target() != kJoinPath) {
        reply = NotFound(fmt::format("the join service answers POST {} only", kJoinPath));
      } else {
        auto request = ParseJoinRequest(req.body());
        auto joined = request ? handler_(*request, peer) : Result<JoinReply>(request.error());
        // The outcome, never the secret; what the peer sent only when it is a host name, an
        // address and a version, so that it cannot write a line of its own.
        if (request) {
          beast::error_code bad_address;
          net::ip::make_address(request->address, bad_address);
          spdlog::info("join service: {} (bmas {}) from {} ({}): {}",
                       IsPeerHostName(request->host) ? request->host : "(not a host name)",
                       request->bmas_version.empty() ? "?" : request->bmas_version, peer,
                       bad_address ? "not an address" : request->address,
                       joined ? "joined" : joined.error().message);
        } else {
          spdlog::info("join service: a malformed request from {}: {}", peer,
                       request.error().message);
        }
        reply = joined ? Result<std::string>(FormatJoinReply(*joined))
                       : Result<std::string>(joined.error());
      }
    }
    http::response<http::string_body> res;
    res.version(11);
    res.keep_alive(false);
    res.set(http::field::content_type, "application/json");
    if (reply) {
      res.result(http::status::ok);
      res.body() = std::move(*reply);
    } else {
      res.result(StatusOf(reply.error().code));
      res.body() = JsonObject([&](JsonWriter& w) { Member(w, "error", reply.error().message); });
    }
    res.prepare_payload();
    co_await http::async_write(stream, res, net::redirect_error(use_awaitable, ec));
    if (ec) co_return;
    if (too_large) {
      // The client is still sending: closing now would reset the connection, and the reset can
      // overtake the 413. Stop sending, then drop what comes until it closes (bounded in bytes
      // and by the connection's deadline).
      auto& socket = beast::get_lowest_layer(stream).socket();
      socket.shutdown(tcp::socket::shutdown_send, ec);
      std::array<char, 4096> scratch;
      size_t drained = 0;
      while (!ec && drained < kMaxDrainBytes) {
        drained += co_await beast::get_lowest_layer(stream).async_read_some(
            net::buffer(scratch), net::redirect_error(use_awaitable, ec));
      }
      co_return;
    }
    co_await stream.async_shutdown(net::redirect_error(use_awaitable, ec));
  }

  // A joined node's request for its LXD peers, with the certificate it showed.
  Result<std::string> AnswerPeers(SSL* ssl, const std::string& body, const std::string& peer) {
    auto host = ParseLxdPeersRequest(body);
    if (!host) return host.error();
    X509* shown = SSL_get0_peer_certificate(ssl);
    auto peers = peers_handler_(*host, shown == nullptr ? std::string() : PemOf(shown), peer);
    spdlog::info("join service: LXD peers for {} from {}: {}", *host, peer,
                 peers ? fmt::format("{} sent", peers->size()) : peers.error().message);
    if (!peers) return peers.error();
    return FormatLxdPeersReply(*peers);
  }

  JoinServerOptions options_;
  JoinHandler handler_;
  LxdPeersHandler peers_handler_;
  net::io_context io_;
  ssl::context ctx_;
  tcp::acceptor acceptor_;
  net::signal_set signals_;
  uint16_t port_ = 0;
  bool stopping_ = false;                   // on io_'s thread
  size_t active_ = 0;                       // on io_'s thread
  std::map<std::string, size_t> per_peer_;  // open connections by address, on io_'s thread
};

// What the node checks before it sends the secret: that the chain the server presented holds
// the token's CA, and that the server's certificate chains to it and names the token's address.
Result<void> CheckController(SSL* ssl, const JoinToken& token, int64_t unix_now,
                             const std::string& where) {
  STACK_OF(X509)* chain = SSL_get_peer_cert_chain(ssl);
  X509* leaf = SSL_get0_peer_certificate(ssl);
  if (leaf == nullptr || chain == nullptr) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("the server at {} presented no certificate", where),
                 {}};
  }
  std::optional<std::string> ca_pem;
  std::string seen;
  for (int i = 0; i < sk_X509_num(chain); ++i) {
    const std::string pem = PemOf(sk_X509_value(chain, i));
    auto sha = CertificateSha256(pem);
    if (!sha) continue;
    if (!seen.empty()) seen += ", ";
    seen += "sha256:" + Hex(*sha);
    if (CheckControllerCa(token, pem)) ca_pem = pem;
  }
  if (!ca_pem) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("the server at {} is not this cluster's controller: the token pins "
                             "the cluster CA sha256:{}, and it presented {}. Nothing secret was "
                             "sent. Check that `bmas cluster serve` runs on the controller and "
                             "that nothing else holds its port",
                             where, Hex(token.ca_sha256), seen),
                 {}};
  }
  if (auto ok = VerifyPeerCertificate(*ca_pem, PemOf(leaf), unix_now, token.address); !ok) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("the server at {} is not this cluster's controller ({}). Nothing "
                             "secret was sent",
                             where, ok.error().message),
                 {}};
  }
  return {};
}

// One POST of `body` to `path` at the token's address, once the server passed CheckController;
// `client` (when given) is shown as the client certificate. The reply's body, or the
// controller's refusal (`refused` names what it refused).
awaitable<Result<std::string>> Exchange(net::io_context& io, const JoinToken& token,
                                        std::string_view path, std::string body,
                                        const CertAndKey* client, const char* refused,
                                        int64_t unix_now, std::chrono::milliseconds timeout) {
  const std::string where = JoinHostPort(token.address, token.port);
  auto unavailable = [&](const char* step, const beast::error_code& ec) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("{} the join service at {}: {}{}", step, where, ec.message(),
                             ec == beast::error::timeout
                                 ? fmt::format(" (no answer in {} ms)", timeout.count())
                                 : std::string()),
                 {}};
  };
  ssl::context ctx(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  beast::error_code ec;
  if (client != nullptr) {
    ctx.use_certificate_chain(net::buffer(client->cert_pem), ec);
    if (!ec) ctx.use_private_key(net::buffer(client->key_pem), ssl::context::pem, ec);
    if (ec) {
      co_return InvalidArgument(fmt::format("this node's certificate or key is refused by TLS: {}: "
                                            "check node.crt and node.key",
                                            ec.message()));
    }
  }
  const auto address = net::ip::make_address(token.address, ec);
  tcp::endpoint endpoint;
  if (!ec) {
    endpoint = tcp::endpoint(address, token.port);
  } else {
    // A host name: resolved once (lookups are not bounded by the timeout).
    tcp::resolver resolver(io);
    auto found = resolver.resolve(token.address, std::to_string(token.port), ec);
    if (ec || found.empty()) co_return unavailable("cannot resolve", ec);
    endpoint = found.begin()->endpoint();
  }
  TlsStream stream(TcpStream(io.get_executor()), ctx);
  auto& tcp_layer = beast::get_lowest_layer(stream);
  tcp_layer.expires_after(timeout);
  co_await tcp_layer.async_connect(endpoint, net::redirect_error(use_awaitable, ec));
  if (ec) co_return unavailable("cannot connect to", ec);
  // The chain is checked below against the token's pin, not against any system CA.
  stream.set_verify_mode(ssl::verify_peer);
  stream.set_verify_callback([](bool, ssl::verify_context&) { return true; });
  co_await stream.async_handshake(ssl::stream_base::client, net::redirect_error(use_awaitable, ec));
  if (ec) co_return unavailable("no TLS handshake with", ec);
  if (auto ok = CheckController(stream.native_handle(), token, unix_now, where); !ok) {
    co_return ok.error();
  }
  http::request<http::string_body> req(http::verb::post, std::string(path), 11);
  req.set(http::field::host, where);
  req.set(http::field::content_type, "application/json");
  req.body() = std::move(body);
  req.prepare_payload();
  co_await http::async_write(stream, req, net::redirect_error(use_awaitable, ec));
  if (ec) co_return unavailable("cannot send to", ec);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxJoinReplyBytes);
  co_await http::async_read(stream, buffer, parser, net::redirect_error(use_awaitable, ec));
  if (ec) co_return unavailable("no reply from", ec);
  const auto& res = parser.get();
  if (res.result_int() != 200) {
    rapidjson::Document d;
    d.Parse(res.body().data(), res.body().size());
    std::string message = d.HasParseError() ? std::string() : JsonString(d, "error");
    if (message.empty()) message = fmt::format("HTTP {}", res.result_int());
    co_return Error{CodeOf(res.result_int()),
                    fmt::format("the controller at {} refused {}: {}", where, refused, message),
                    {}};
  }
  std::string answer = res.body();
  co_await stream.async_shutdown(net::redirect_error(use_awaitable, ec));
  co_return answer;
}

}  // namespace

Error OlderControllerHint(Error e) {
  if (e.code == ErrorCode::kInvalidArgument &&
      e.message.find("no member 'protocol'") != std::string::npos) {
    e.message += fmt::format(
        " (the controller runs a bmas older than this node's {}, join protocol {}: upgrade the "
        "controller first, then join again; README: Upgrading bmas on a running cluster)",
        kBmasVersion, kJoinProtocol);
    e.param = "protocol";
  }
  return e;
}

namespace {

// Runs Exchange to its end on an io_context of its own.
Result<std::string> RunExchange(const JoinToken& token, std::string_view path, std::string body,
                                const CertAndKey* client, const char* refused, int64_t unix_now,
                                std::chrono::milliseconds timeout) {
  net::io_context io;
  std::optional<Result<std::string>> out;
  auto run = [&]() -> awaitable<void> {
    out = co_await Exchange(io, token, path, std::move(body), client, refused, unix_now, timeout);
  };
  net::co_spawn(io, run(), [&](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      out = Internal(fmt::format("asking the join service failed: {}", ex.what()));
    }
  });
  io.run();
  if (!out) return Internal("asking the join service ended without an outcome");
  return std::move(*out);
}

}  // namespace

Result<std::unique_ptr<JoinServer>> ListenForJoins(JoinServerOptions options, JoinHandler handler,
                                                   LxdPeersHandler peers_handler) {
  auto server =
      std::make_unique<Server>(std::move(options), std::move(handler), std::move(peers_handler));
  if (auto ok = server->Open(); !ok) return ok.error();
  return std::unique_ptr<JoinServer>(std::move(server));
}

Result<std::string> RequestJoinBody(const JoinToken& token, std::string body, int64_t unix_now,
                                    std::chrono::milliseconds timeout) {
  auto reply =
      RunExchange(token, kJoinPath, std::move(body), nullptr, "the join", unix_now, timeout);
  if (!reply) return OlderControllerHint(reply.error());
  return reply;
}

Result<JoinReply> RequestJoin(const JoinToken& token, JoinRequest request, int64_t unix_now,
                              std::chrono::milliseconds timeout) {
  request.secret = token.secret;
  auto body = RequestJoinBody(token, FormatJoinRequest(request), unix_now, timeout);
  if (!body) return body.error();
  auto reply = ParseJoinReply(*body);
  if (!reply && reply.error().param == "protocol") return reply.error();
  if (!reply) {
    return Internal(fmt::format("the controller at {} sent a reply that is not a join reply: {}",
                                JoinHostPort(token.address, token.port), reply.error().message));
  }
  return reply;
}

Result<std::map<std::string, std::string>> RequestLxdPeers(const std::string& address,
                                                           uint16_t port, const std::string& ca_pem,
                                                           const CertAndKey& node,
                                                           const std::string& host,
                                                           int64_t unix_now,
                                                           std::chrono::milliseconds timeout) {
  // The controller is checked as a join checks it, with the node's CA in the token's place.
  JoinToken pin;
  pin.address = address;
  pin.port = port;
  auto sha = CertificateSha256(ca_pem);
  if (!sha) return sha.error();
  pin.ca_sha256 = *sha;
  auto body = RunExchange(pin, kLxdPeersPath, FormatLxdPeersRequest(host), &node,
                          "to send this node's LXD peers", unix_now, timeout);
  if (!body) return body.error();
  auto peers = ParseLxdPeersReply(*body);
  if (!peers) {
    return Internal(fmt::format("the controller at {} sent a reply that is not a peers reply: {}",
                                JoinHostPort(address, port), peers.error().message));
  }
  return peers;
}

}  // namespace bmas::cluster
