#include "gateway/upstream_parser.h"

#include <gtest/gtest.h>

#include <array>
#include <string>

namespace bmas::gateway {
namespace {

// Feeds `wire` to the parser as a read would, `room` body bytes at a time; returns the body.
std::string ParseAll(UpstreamParser& parser, std::string_view wire, size_t room,
                     beast::error_code& ec) {
  parser.eager(true);
  std::string body;
  std::array<char, 64> chunk;
  while (!parser.is_done() && !wire.empty()) {
    parser.body().data = chunk.data();
    parser.body().size = std::min(room, chunk.size());
    const size_t used = parser.put(net::buffer(wire.data(), wire.size()), ec);
    wire.remove_prefix(used);
    body.append(chunk.data(), std::min(room, chunk.size()) - parser.body().size);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) break;
  }
  return body;
}

TEST(UpstreamParserTest, KeepsTheStatusTheFirstContentTypeAndTheBody) {
  UpstreamParser parser;
  beast::error_code ec;
  const std::string body = ParseAll(parser,
                                    "HTTP/1.1 429 Too Many Requests\r\nServer: x\r\n"
                                    "Content-Type: application/json\r\n"
                                    "Content-Type: text/plain\r\nContent-Length: 11\r\n\r\n"
                                    "{\"a\":12345}",
                                    4, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_TRUE(parser.is_done());
  EXPECT_EQ(parser.result(), http::status::too_many_requests);
  EXPECT_EQ(parser.content_type(), "application/json");
  EXPECT_EQ(body, "{\"a\":12345}") << "put 4 bytes at a time";
  EXPECT_TRUE(parser.keep_alive());
}

TEST(UpstreamParserTest, AChunkedBodyComesWholeAndConnectionCloseIsSeen) {
  UpstreamParser parser;
  beast::error_code ec;
  const std::string body = ParseAll(parser,
                                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                    "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                                    "6\r\ndata: \r\n3\r\nabc\r\n0\r\n\r\n",
                                    64, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_TRUE(parser.is_done());
  EXPECT_EQ(body, "data: abc");
  EXPECT_EQ(parser.content_type(), "text/event-stream");
  EXPECT_FALSE(parser.keep_alive());
}

TEST(UpstreamParserTest, ALongContentTypeIsKeptWholeAndNoneIsEmpty) {
  const std::string type = "application/json; profile=" + std::string(200, 'p');
  UpstreamParser parser;
  beast::error_code ec;
  ParseAll(parser, "HTTP/1.1 200 OK\r\nContent-Type: " + type + "\r\nContent-Length: 0\r\n\r\n",
           8, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(parser.content_type(), type);
  UpstreamParser none;
  ParseAll(none, "HTTP/1.1 204 No Content\r\n\r\n", 8, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_TRUE(none.is_done());
  EXPECT_EQ(none.content_type(), "");
}

TEST(UpstreamParserTest, AMalformedHeadIsAnError) {
  UpstreamParser parser;
  beast::error_code ec;
  ParseAll(parser, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 8,
           ec);
  EXPECT_TRUE(ec) << "two lengths";
  UpstreamParser garbage;
  ec = {};
  ParseAll(garbage, "SMTP ready\r\n\r\n", 8, ec);
  EXPECT_TRUE(ec);
}

}  // namespace
}  // namespace bmas::gateway
