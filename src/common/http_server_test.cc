// HttpServer's deadlines on a connection: the idle keep-alive connection, a request's body that
// stalls, and a kept-alive connection used more slowly than the idle timeout but never idle
// for that long. The reads run under CoarseDeadline (common/coarse_deadline.h).

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
  void Start(HttpServerOptions options) {
    server_ = std::make_unique<HttpServer>(
        io_, std::move(options), [](HttpRequest&, ResponseWriter& w) -> awaitable<void> {
          co_await w.Send(http::status::ok, "text/plain", "ok");
        });
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

}  // namespace
}  // namespace bmas
