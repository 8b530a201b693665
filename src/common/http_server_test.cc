// HttpServer against raw client sockets: its deadlines on a connection (the idle keep-alive
// connection, a request's body that stalls, and a kept-alive connection used more slowly than
// the idle timeout but never idle for that long; the reads run under CoarseDeadline,
// common/coarse_deadline.h), and a server that keeps only some request fields.

#include "common/http_server.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace bmas {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class HttpServerDeadlineTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions options, HttpHandler handler = {}) {
    if (!handler) {
      handler = [](HttpRequest&, ResponseWriter& w) -> awaitable<void> {
        co_await w.Send(http::status::ok, "text/plain", "ok");
      };
    }
    server_ = std::make_unique<HttpServer>(io_, std::move(options), std::move(handler));
    auto port = server_->Listen();
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
    server_->Start();
    thread_ = std::thread([this] { io_.run(); });
  }

  void TearDown() override {
    if (!thread_.joinable()) return;
    net::co_spawn(io_, server_->Stop(1s), [this](std::exception_ptr) { io_.stop(); });
    thread_.join();
  }

  // Starts the server and opens a blocking client connection to it.
  tcp::socket StartAndConnect(HttpServerOptions options) {
    Start(std::move(options));
    return Connect();
  }

  // A blocking client connection to the server.
  tcp::socket Connect() {
    tcp::socket s(client_io_);
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_));
    return s;
  }

  static std::string Get() { return "GET / HTTP/1.1\r\nHost: x\r\n\r\n"; }

  // Reads one response to a request without a body ("ok"): its bytes, or "" at EOF.
  static std::string ReadResponse(tcp::socket& s) {
    std::string got;
    char bytes[512];
    while (got.find("\r\n\r\nok") == std::string::npos) {
      beast::error_code ec;
      const size_t n = s.read_some(net::buffer(bytes), ec);
      if (ec) return "";
      got.append(bytes, n);
    }
    return got;
  }

  // How long until the server closes `s` (reads find EOF), within `limit`.
  static Clock::duration UntilClosed(tcp::socket& s, Clock::duration limit) {
    const Clock::time_point start = Clock::now();
    timeval tv{static_cast<time_t>(std::chrono::duration_cast<std::chrono::seconds>(limit).count()),
               0};
    setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char byte;
    beast::error_code ec;
    s.read_some(net::buffer(&byte, 1), ec);
    return ec == net::error::eof || ec == net::error::connection_reset ? Clock::now() - start
                                                                       : Clock::duration::max();
  }

  // The server closes `s` within 10 s, and not before `timeout` (less a tick's slack).
  static void ExpectClosedAtTimeout(tcp::socket& s, Clock::duration timeout, const char* what) {
    const Clock::duration closed = UntilClosed(s, 10s);
    ASSERT_NE(closed, Clock::duration::max()) << what << " stayed open for 10 s";
    EXPECT_GE(closed, timeout - 100ms) << what;
  }

  net::io_context io_;
  net::io_context client_io_;
  std::unique_ptr<HttpServer> server_;
  uint16_t port_ = 0;
  std::thread thread_;
};

TEST_F(HttpServerDeadlineTest, AnIdleKeptAliveConnectionIsClosedAtTheIdleTimeout) {
  HttpServerOptions o;
  o.idle_timeout = 1s;
  tcp::socket s = StartAndConnect(o);
  net::write(s, net::buffer(Get()));
  ASSERT_NE(ReadResponse(s), "");
  ExpectClosedAtTimeout(s, o.idle_timeout, "the idle connection");
}

TEST_F(HttpServerDeadlineTest, ABodyThatStallsIsCutAtTheReadTimeout) {
  HttpServerOptions o;
  o.read_timeout = 1s;
  tcp::socket s = StartAndConnect(o);
  net::write(s, net::buffer(std::string(
                    "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b")));
  ExpectClosedAtTimeout(s, o.read_timeout, "the stalled body's connection");
}

TEST_F(HttpServerDeadlineTest, AConnectionUsedMoreOftenThanTheIdleTimeoutStaysOpen) {
  HttpServerOptions o;
  o.idle_timeout = 1s;
  tcp::socket s = StartAndConnect(o);
  // 2.4 s in all, more than twice the idle timeout, but never idle for 1 s.
  for (int i = 0; i < 4; ++i) {
    net::write(s, net::buffer(Get()));
    ASSERT_NE(ReadResponse(s), "") << "request " << i << " found the connection closed";
    std::this_thread::sleep_for(600ms);
  }
}

// A raw client against a server that keeps one request field (as the gateway's users' port):
// the handler sees that field and Connection only, whatever else comes; Connection: close is
// still honoured; a malformed field or an oversized body is refused with the connection closed.
TEST_F(HttpServerDeadlineTest, ARawClientGetsOnlyTheKeptFieldsToTheHandlerAndIsRefusedWhenMalformed) {
  HttpServerOptions o;
  o.request_fields = {http::field::authorization};
  o.max_body_bytes = 64;
  Start(o, [](HttpRequest& r, ResponseWriter& w) -> awaitable<void> {
    std::string seen;
    for (const auto& f : r) seen += std::string(f.name_string()) + "=" + std::string(f.value()) + ";";
    co_await w.Send(http::status::ok, "text/plain", seen + "|" + r.body());
  });
  auto exchange = [this](const std::string& request) {
    tcp::socket s = Connect();
    net::write(s, net::buffer(request));
    std::string got;
    char bytes[1024];
    beast::error_code ec;
    while (!ec) {  // until the server closes, or the kept-alive response is whole
      const size_t n = s.read_some(net::buffer(bytes), ec);
      got.append(bytes, n);
      if (got.find("|body") != std::string::npos) break;
    }
    return got;
  };
  const std::string many =
      "POST /v1/x HTTP/1.1\r\nHost: gw\r\nUser-Agent: a\r\nX-Stainless-Lang: js\r\n"
      "Authorization: Bearer k\r\nCookie: c=1\r\nContent-Length: 4\r\n\r\nbody";
  const std::string kept = exchange(many);
  EXPECT_NE(kept.find("\r\n\r\nAuthorization=Bearer k;|body"), std::string::npos) << kept;
  EXPECT_EQ(kept.find("Connection: close"), std::string::npos) << kept;
  const std::string closing = exchange(
      "POST / HTTP/1.1\r\nConnection: close\r\nX-Other: y\r\nContent-Length: 4\r\n\r\nbody");
  EXPECT_NE(closing.find("Connection: close\r\n"), std::string::npos) << closing;
  EXPECT_NE(closing.find("Connection=close;|body"), std::string::npos) << closing;
  const std::string malformed = exchange("GET / HTTP/1.1\r\nBad Name: v\r\n\r\n");
  EXPECT_NE(malformed.find("HTTP/1.1 400 "), std::string::npos) << malformed;
  EXPECT_NE(malformed.find("malformed HTTP request"), std::string::npos) << malformed;
  const std::string large = exchange("POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n");
  EXPECT_NE(large.find("HTTP/1.1 413 "), std::string::npos) << large;
}

// A whole response larger than the socket takes at once (a client that reads only after a
// while): SendAtOnce leaves the rest to SendRest, which writes every byte, in order, and the
// kept-alive connection then serves the next request; Send, which is the two steps, the same.
TEST_F(HttpServerDeadlineTest, AResponseTheSocketCannotTakeAtOnceIsWrittenWholeByItsRest) {
  const size_t size = 16 << 20;
  std::string body(size, 'x');
  for (size_t i = 0; i < size; i += 4096) body[i] = static_cast<char>('a' + (i / 4096) % 26);
  bool at_once = true;
  Start({}, [&](HttpRequest& r, ResponseWriter& w) -> awaitable<void> {
    if (r.target() == "/two-steps") {
      at_once = w.SendAtOnce(http::status::ok, "text/plain", body);
      if (!at_once) co_await w.SendRest();
    } else {
      co_await w.Send(http::status::ok, "text/plain", body);
    }
  });
  tcp::socket s = Connect();
  for (const char* target : {"/two-steps", "/send", "/two-steps"}) {
    net::write(s, net::buffer(std::string("GET ") + target + " HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::this_thread::sleep_for(50ms);  // the server's write fills the socket's buffers first
    http::response<http::string_body> response;
    beast::flat_buffer buffer;
    beast::error_code ec;
    http::read(s, buffer, response, ec);
    ASSERT_FALSE(ec) << target << ": " << ec.message();
    EXPECT_EQ(response.result(), http::status::ok) << target;
    EXPECT_TRUE(response.body() == body) << target << ": " << response.body().size() << " bytes";
    EXPECT_TRUE(response.keep_alive()) << target;
  }
  EXPECT_FALSE(at_once) << "the test's response fit the socket: it tests nothing of SendRest";
}

}  // namespace
}  // namespace bmas
