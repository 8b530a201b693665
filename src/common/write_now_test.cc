#include "common/write_now.h"

#include <gtest/gtest.h>

#include <string>

#include "common/tcp_pair_testing.h"

namespace bmas {
namespace {

using Pair = TcpPair;

// A small write goes out whole at once; one far larger than the socket's send buffer goes out
// in part at once and the rest as the reader takes it, every byte in order.
TEST(WriteAllTest, WritesSmallAndLargeBuffersWholeAndInOrder) {
  Pair p;
  std::string large(16 << 20, ' ');
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>('a' + i % 26);
  const std::string small = "hello";
  std::string received;
  beast::error_code first, second;
  net::co_spawn(
      p.io,
      [&]() -> awaitable<void> {
        const net::const_buffer head = net::buffer(small);
        first = co_await WriteAll(p.client, head, std::chrono::seconds(60));
        const std::array<net::const_buffer, 2> both{net::buffer(small), net::buffer(large)};
        second = co_await WriteAll(p.client, both, std::chrono::seconds(60));
        p.client.socket().shutdown(tcp::socket::shutdown_send);
      },
      net::detached);
  net::co_spawn(
      p.io,
      [&]() -> awaitable<void> {
        std::array<char, 4096> chunk;
        while (true) {
          beast::error_code ec;
          const size_t n = co_await p.server.socket().async_read_some(
              net::buffer(chunk), net::redirect_error(use_awaitable, ec));
          received.append(chunk.data(), n);
          if (ec) break;
        }
      },
      net::detached);
  p.io.run();
  EXPECT_FALSE(first) << first.message();
  EXPECT_FALSE(second) << second.message();
  ASSERT_EQ(received.size(), 2 * small.size() + large.size());
  EXPECT_TRUE(received == small + small + large);
}

// A peer that is gone is an error, not a write that waits.
TEST(WriteAllTest, AClosedPeerIsAnError) {
  Pair p;
  p.server.socket().close();
  beast::error_code ec;
  net::co_spawn(
      p.io,
      [&]() -> awaitable<void> {
        const std::string data(1 << 20, 'x');
        for (int i = 0; i < 8 && !ec; ++i) {
          const net::const_buffer bytes = net::buffer(data);
          ec = co_await WriteAll(p.client, bytes, std::chrono::seconds(60));
        }
      },
      net::detached);
  p.io.run();
  EXPECT_TRUE(ec);
}

}  // namespace
}  // namespace bmas
