#include "common/read_buffer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/tcp_pair_testing.h"

namespace bmas {
namespace {

using Pair = TcpPair;

std::string Request(const std::string& path, size_t body_bytes = 0) {
  std::string r = "POST " + path +
                  " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body_bytes) +
                  "\r\n\r\n";
  r.append(body_bytes, 'b');
  return r;
}

// Keep-alive HTTP both ways: each request is read with the same ReadBuffer after the one
// before it emptied the socket, whether the request comes before or after the read starts.
TEST(ReadBufferTest, ReadsEveryRequestOfAKeepAliveConnection) {
  Pair p;
  // Small, large (many reads), and two in one write (the second parsed from the buffer).
  const std::vector<size_t> bodies = {0, 10, 300000, 5, 0, 70000, 1};
  std::vector<std::string> paths;
  size_t ended = 0;
  net::co_spawn(
      p.io,
      [&]() -> awaitable<void> {
        ReadBuffer buffer;
        while (true) {
          http::request<http::string_body> request;
          beast::error_code ec;
          co_await http::async_read(p.server, buffer, request,
                                    net::redirect_error(use_awaitable, ec));
          if (ec == http::error::end_of_stream) {
            ++ended;
            co_return;
          }
          EXPECT_FALSE(ec) << ec.message();
          if (ec) co_return;
          paths.push_back(std::string(request.target()) + ":" +
                          std::to_string(request.body().size()));
          const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
          co_await net::async_write(p.server, net::buffer(answer), use_awaitable);
        }
      },
      net::detached);
  net::co_spawn(
      p.io,
      [&]() -> awaitable<void> {
        ReadBuffer buffer;
        for (size_t i = 0; i < bodies.size(); ++i) {
          std::string out = Request("/" + std::to_string(i), bodies[i]);
          const bool pipelined = i + 1 < bodies.size() && bodies[i] == 5;
          if (pipelined) out += Request("/" + std::to_string(i + 1), bodies[i + 1]);
          co_await net::async_write(p.client, net::buffer(out), use_awaitable);
          for (int answers = pipelined ? 2 : 1; answers > 0; --answers) {
            http::response<http::empty_body> response;
            co_await http::async_read(p.client, buffer, response, use_awaitable);
            EXPECT_EQ(response.result_int(), 200);
          }
          if (pipelined) ++i;
        }
        p.client.socket().shutdown(tcp::socket::shutdown_send);
      },
      net::detached);
  p.io.run();
  std::vector<std::string> want;
  for (size_t i = 0; i < bodies.size(); ++i) {
    want.push_back("/" + std::to_string(i) + ":" + std::to_string(bodies[i]));
  }
  EXPECT_EQ(paths, want);
  EXPECT_EQ(ended, 1u);
}

// A read that fills its buffer may have left bytes behind: the next read takes them at once;
// a read shorter than its buffer waits for what comes next.
TEST(ReadBufferTest, AFullReadIsFollowedByTheRestAndAShortOneByWhatComesNext) {
  Pair p;
  std::vector<size_t> reads;
  net::co_spawn(
      p.io,
      [&]() -> awaitable<void> {
        ReadBuffer buffer;
        for (int i = 0; i < 3; ++i) {
          const size_t n = co_await p.server.async_read_some(buffer.prepare(512), use_awaitable);
          buffer.commit(n);
          reads.push_back(n);
        }
        beast::error_code ec;
        co_await p.server.async_read_some(buffer.prepare(512),
                                          net::redirect_error(use_awaitable, ec));
        EXPECT_EQ(ec, net::error::eof);
        EXPECT_EQ(beast::buffers_to_string(buffer.data()),
                  std::string(700, 'a') + std::string(100, 'c'));
      },
      net::detached);
  net::co_spawn(
      p.io,
      [&]() -> awaitable<void> {
        co_await net::async_write(p.client, net::buffer(std::string(700, 'a')), use_awaitable);
        // Until the server has read the first 700 bytes (512, then 188), then more.
        net::steady_timer t(p.io);
        while (reads.size() < 2) {
          t.expires_after(std::chrono::milliseconds(1));
          co_await t.async_wait(use_awaitable);
        }
        co_await net::async_write(p.client, net::buffer(std::string(100, 'c')), use_awaitable);
        p.client.socket().shutdown(tcp::socket::shutdown_send);
      },
      net::detached);
  p.io.run();
  EXPECT_EQ(reads, (std::vector<size_t>{512, 188, 100}));
}

}  // namespace
}  // namespace bmas
