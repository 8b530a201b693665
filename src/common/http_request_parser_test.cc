#include "common/http_request_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace bmas {
namespace {

// What a parser made of `bytes`, put in pieces of `step` bytes (the last error, or the request).
template <class Parser>
beast::error_code Feed(Parser& parser, std::string_view bytes, size_t step) {
  parser.eager(true);
  parser.body_limit(1024);
  beast::error_code ec;
  std::string pending;
  for (size_t at = 0; at < bytes.size() && !parser.is_done();) {
    const size_t n = std::min(step, bytes.size() - at);
    pending.append(bytes.substr(at, n));
    at += n;
    const size_t used = parser.put(net::buffer(pending), ec);
    pending.erase(0, used);
    if (ec == http::error::need_more) {
      ec = {};
      continue;
    }
    if (ec) return ec;
  }
  if (!parser.is_done()) return http::error::need_more;
  return ec;
}

// The request's fields as "Name: value" lines, in order.
std::vector<std::string> Fields(const HttpRequest& r) {
  std::vector<std::string> out;
  for (const auto& f : r) out.push_back(std::string(f.name_string()) + ": " + std::string(f.value()));
  return out;
}

// Requests a client may send, well-formed or not.
const std::vector<std::string> kRequests = {
    "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
    "Authorization: Bearer bmas-abc\r\nUser-Agent: OpenAI/JS 4.0\r\nX-Stainless-Lang: js\r\n"
    "Content-Length: 11\r\n\r\n{\"a\":\"b c\"}",
    "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nAuthorization: Bearer k\r\n"
    "\r\n5\r\n{\"a\":\r\n3;ext=1\r\n\"b\"\r\n1\r\n}\r\n0\r\nTrailer: x\r\n\r\n",
    "GET /v1/models?x=1 HTTP/1.0\r\nConnection: keep-alive\r\nauthorization: Bearer k\r\n\r\n",
    "GET /health HTTP/1.1\r\nConnection: close\r\nAccept: */*\r\n\r\n",
    "BREW /pot HTTP/1.1\r\nHost: tea\r\nContent-Length: 0\r\n\r\n",
    "POST / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n",           // past the body limit
    "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",  // two lengths
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  // a bad chunk size
    "GET / HTTP/1.1\r\nBad Name: v\r\n\r\n",                           // a space in a name
    "GET / HTTP/2.0\r\n\r\n",                                           // a bad version
    "GET / HTTP/1.1\r\nX: a\x01 b\r\n\r\n",                            // a control character
    "GET / HTTP/1.1\r\nX: folded\r\n value\r\n\r\n",                    // obs-fold
};

// Every field kept, it makes what Beast's own request parser makes, or fails as it fails,
// whatever the pieces the bytes come in.
TEST(HttpRequestParserTest, KeepingEveryFieldItParsesAsBeastsParser) {
  int refused = 0;
  for (const std::string& bytes : kRequests) {
    for (size_t step : {size_t{1}, size_t{7}, bytes.size()}) {
      http::request_parser<http::string_body> beasts;
      HttpRequestParser ours;
      const beast::error_code want = Feed(beasts, bytes, step);
      const beast::error_code got = Feed(ours, bytes, step);
      ASSERT_EQ(got, want) << bytes << " in pieces of " << step;
      refused += want ? 1 : 0;
      if (want) continue;
      const HttpRequest& a = beasts.get();
      const HttpRequest& b = ours.get();
      EXPECT_EQ(b.method_string(), a.method_string()) << bytes;
      EXPECT_EQ(b.target(), a.target());
      EXPECT_EQ(b.version(), a.version());
      EXPECT_EQ(b.keep_alive(), a.keep_alive());
      EXPECT_EQ(Fields(b), Fields(a));
      EXPECT_EQ(b.body(), a.body());
    }
  }
  EXPECT_EQ(refused, 6 * 3) << "the six malformed requests, in every piece size";
}

// With a list, it keeps the listed fields and Connection, drops the rest (unknown names
// included), and still checks them all.
TEST(HttpRequestParserTest, ItKeepsTheListedFieldsAndConnection) {
  const std::vector<http::field> keep = {http::field::authorization};
  for (const std::string& bytes : kRequests) {
    http::request_parser<http::string_body> beasts;
    HttpRequestParser ours(keep);
    const beast::error_code want = Feed(beasts, bytes, 3);
    ASSERT_EQ(Feed(ours, bytes, 3), want) << bytes;
    if (want) continue;
    std::vector<std::string> kept;
    for (const auto& f : beasts.get()) {
      if (f.name() == http::field::authorization || f.name() == http::field::connection) {
        kept.push_back(std::string(f.name_string()) + ": " + std::string(f.value()));
      }
    }
    EXPECT_EQ(Fields(ours.get()), kept) << bytes;
    EXPECT_EQ(ours.get().keep_alive(), beasts.get().keep_alive()) << bytes;
    EXPECT_EQ(ours.get().body(), beasts.get().body()) << bytes;
  }
  HttpRequestParser first(keep);
  ASSERT_FALSE(Feed(first, kRequests[0], kRequests[0].size()));
  HttpRequest r = first.release();
  EXPECT_EQ(Fields(r), std::vector<std::string>{"Authorization: Bearer bmas-abc"});
  EXPECT_EQ(r.body(), "{\"a\":\"b c\"}");
  HttpRequestParser closing(keep);
  ASSERT_FALSE(Feed(closing, kRequests[3], 5));
  EXPECT_FALSE(closing.get().keep_alive()) << "Connection: close is kept";
  HttpRequestParser brewing(keep);
  ASSERT_FALSE(Feed(brewing, kRequests[4], 5));
  EXPECT_EQ(brewing.get().method_string(), "BREW");
}

}  // namespace
}  // namespace bmas
