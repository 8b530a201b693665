#include "common/read_head.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/read_buffer.h"
#include "common/tcp_pair_testing.h"

namespace bmas {
namespace {

using Parser = http::request_parser<http::string_body>;

struct Read {
  beast::error_code ec;
  std::string target;
  bool header_done = false;
};

// Reads heads from the server side of `p` with ReadHead (and each body with Beast's async_read)
// until an error, while `client` writes.
template <class Buffer>
void ReadAll(TcpPair& p, Buffer& buffer, std::vector<Read>& reads,
             std::function<awaitable<void>()> client, size_t header_limit = 8192) {
  net::co_spawn(
      p.io,
      [&]() -> awaitable<void> {
        while (true) {
          Parser parser;
          parser.header_limit(static_cast<uint32_t>(header_limit));
          Read r;
          co_await ReadHead(p.server.socket(), buffer, parser, r.ec);
          r.header_done = parser.is_header_done();
          if (!r.ec) {
            r.target = std::string(parser.get().target());
            co_await http::async_read(p.server, buffer, parser,
                                      net::redirect_error(use_awaitable, r.ec));
          }
          reads.push_back(r);
          if (r.ec) co_return;
        }
      },
      net::detached);
  net::co_spawn(p.io, std::move(client), net::detached);
  p.io.run();
}

// A write whose failure (the reader gave up and closed) the reader's results tell.
awaitable<void> Write(TcpStream& s, std::string text) {
  beast::error_code ec;
  co_await net::async_write(s, net::buffer(text), net::redirect_error(use_awaitable, ec));
}

const std::string kGet = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";

TEST(ReadHeadTest, ReadsAHeadSentAByteAtATimeThenAPipelinedPairFromOneWrite) {
  TcpPair p;
  ReadBuffer buffer;
  std::vector<Read> reads;
  ReadAll(p, buffer, reads, [&]() -> awaitable<void> {
    net::steady_timer t(p.io);
    for (char c : kGet) {
      co_await Write(p.client, std::string(1, c));
      t.expires_after(std::chrono::milliseconds(1));
      co_await t.async_wait(use_awaitable);
    }
    co_await Write(p.client, "GET /b HTTP/1.1\r\nHost: x\r\n\r\n"
                             "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
    // The end of file once the reader waits again: one that came with the last request's
    // bytes no ReadBuffer sees (read_buffer.h).
    while (reads.size() < 3) {
      t.expires_after(std::chrono::milliseconds(1));
      co_await t.async_wait(use_awaitable);
    }
    t.expires_after(std::chrono::milliseconds(20));
    co_await t.async_wait(use_awaitable);
    p.client.socket().shutdown(tcp::socket::shutdown_send);
  });
  ASSERT_EQ(reads.size(), 4u);
  EXPECT_EQ(reads[0].target, "/a");
  EXPECT_EQ(reads[1].target, "/b");
  EXPECT_EQ(reads[2].target, "/c");
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(reads[i].ec) << i << ": " << reads[i].ec.message();
  EXPECT_EQ(reads[3].ec, http::error::end_of_stream) << reads[3].ec.message();
}

TEST(ReadHeadTest, AnEndOfFileInTheMiddleOfAHeadIsAPartialMessage) {
  TcpPair p;
  beast::flat_buffer buffer;  // a plain buffer, as a stream's backend is read
  std::vector<Read> reads;
  ReadAll(p, buffer, reads, [&]() -> awaitable<void> {
    co_await Write(p.client, "GET /a HTTP/1.1\r\nHo");
    p.client.socket().shutdown(tcp::socket::shutdown_send);
  });
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].ec, http::error::partial_message) << reads[0].ec.message();
  EXPECT_FALSE(reads[0].header_done);
}

TEST(ReadHeadTest, AHeadOverTheParsersLimitIsRefused) {
  TcpPair p;
  ReadBuffer buffer;
  std::vector<Read> reads;
  ReadAll(p, buffer, reads,
      [&]() -> awaitable<void> {
        co_await Write(p.client, "GET /a HTTP/1.1\r\nX-Long: " + std::string(4000, 'v'));
        co_await Write(p.client, std::string(4000, 'v') + "\r\n\r\n");
      },
      /*header_limit=*/1024);
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].ec, http::error::header_limit) << reads[0].ec.message();
}

TEST(ReadHeadTest, ABufferThatCannotGrowIsAnOverflow) {
  TcpPair p;
  beast::flat_buffer buffer(16);
  std::vector<Read> reads;
  ReadAll(p, buffer, reads, [&]() -> awaitable<void> { co_await Write(p.client, kGet); });
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].ec, http::error::buffer_overflow) << reads[0].ec.message();
}

TEST(ReadHeadTest, AMalformedHeadIsTheParsersError) {
  TcpPair p;
  ReadBuffer buffer;
  std::vector<Read> reads;
  ReadAll(p, buffer, reads, [&]() -> awaitable<void> {
    co_await Write(p.client, "GET /a HTTP/1.1\r\nBad Field: x\r\n\r\n");
  });
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].ec, http::error::bad_field) << reads[0].ec.message();
}

// A socket that counts the reads ReadHead makes.
struct CountingSocket {
  TcpStream::socket_type& socket;
  int reads = 0;
  template <class Buffers, class Token>
  auto async_read_some(const Buffers& buffers, Token&& token) {
    ++reads;
    return socket.async_read_some(buffers, std::forward<Token>(token));
  }
};

// The `openai` npm client's requests (a head of some 540 bytes, the body after it) come in one
// read each, head and body, from the first on a connection: not a 512-byte read first, nor a
// buffer that stays just under a request's size after its first growth.
TEST(ReadHeadTest, AClientsRequestWithItsBodyComesInOneReadEachTime) {
  TcpPair p;
  const std::string body(114, 'b');
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " +
                              std::string(480, 'p') + "\r\nContent-Length: 114\r\n\r\n" + body;
  std::vector<std::pair<int, size_t>> seen;  // reads, and the body's bytes buffered after them
  net::co_spawn(
      p.io,
      [&]() -> awaitable<void> {
        ReadBuffer buffer;
        CountingSocket socket{p.server.socket()};
        for (int i = 0; i < 3; ++i) {
          // Each request is sent whole before it is read.
          co_await net::async_write(p.client, net::buffer(request), use_awaitable);
          Parser parser;
          beast::error_code ec;
          socket.reads = 0;
          co_await ReadHead(socket, buffer, parser, ec);
          EXPECT_FALSE(ec) << ec.message();
          seen.emplace_back(socket.reads, buffer.size());
          buffer.consume(buffer.size());
        }
      },
      net::detached);
  p.io.run();
  ASSERT_EQ(seen.size(), 3u);
  for (const auto& [reads, buffered] : seen) {
    EXPECT_EQ(reads, 1);
    EXPECT_EQ(buffered, body.size());
  }
}

}  // namespace
}  // namespace bmas
