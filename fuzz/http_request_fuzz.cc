// libFuzzer target: the parser of a client's request in HttpServer (src/common/http_request_parser.h),
// Beast's HTTP/1 request parser with a handler that keeps only the listed fields. It must make
// what Beast's own request parser makes of the same bytes, less the fields it drops: the same
// error or the same method, target, version, keep-alive, body and kept fields, in order. The
// first byte picks the read size, and whether every field is kept or the gateway's list.
// Links bmas_common.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "common/http_request_parser.h"

namespace {

namespace http = boost::beast::http;

// Puts `bytes` into `parser` `step` bytes at a time, as HttpServer reads them; the error that
// ended it (need_more when the bytes ran out first).
template <class Parser>
boost::beast::error_code Feed(Parser& parser, std::string_view bytes, size_t step) {
  parser.eager(true);
  parser.header_limit(64 * 1024);
  parser.body_limit(4096);
  boost::beast::error_code ec;
  std::string buffered;
  size_t at = 0;
  while (!parser.is_done()) {
    if (at >= bytes.size()) return http::error::need_more;
    buffered.append(bytes.substr(at, step));
    at += step;
    const size_t used = parser.put(boost::asio::buffer(buffered), ec);
    if (used > buffered.size()) std::abort();
    buffered.erase(0, used);
    if (ec == http::error::need_more) {
      ec = {};
    } else if (ec) {
      return ec;
    }
  }
  return ec;
}

std::vector<std::string> Fields(const bmas::HttpRequest& r, bool all) {
  std::vector<std::string> out;
  for (const auto& f : r) {
    if (all || f.name() == http::field::authorization || f.name() == http::field::connection) {
      out.push_back(std::string(f.name_string()) + ":" + std::string(f.value()));
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t step = 1 + data[0] % 64;
  const bool all = data[0] & 0x80;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  static const std::vector<http::field> kGateways = {http::field::authorization};
  http::request_parser<http::string_body> beasts;
  bmas::HttpRequestParser ours(all ? std::span<const http::field>() : kGateways);
  const boost::beast::error_code want = Feed(beasts, bytes, step);
  const boost::beast::error_code got = Feed(ours, bytes, step);
  if (got != want) std::abort();
  if (want) return 0;
  const bmas::HttpRequest& a = beasts.get();
  const bmas::HttpRequest& b = ours.get();
  if (a.method_string() != b.method_string() || a.target() != b.target() ||
      a.version() != b.version() || a.keep_alive() != b.keep_alive() || a.body() != b.body() ||
      Fields(a, all) != Fields(b, true)) {
    std::abort();
  }
  return 0;
}
