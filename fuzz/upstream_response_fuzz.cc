// libFuzzer target: the parser of a backend's response (src/gateway/upstream_parser.h), Beast's
// HTTP/1 parser with the gateway's handler that keeps the status and the first Content-Type
// and puts the body into the relay's buffer. The first byte picks the read size and the
// second the room left in the body buffer, so that heads, chunk sizes and bodies straddle
// reads and buffers in every way. Links bmas_gateway_parse.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

#include "gateway/upstream_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t step = 1 + data[0] % 64;
  const size_t room = 1 + data[1] % 64;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 2, size - 2);
  bmas::gateway::UpstreamParser parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // as the relay sets it
  parser.eager(true);
  std::string buffered, body;
  std::array<char, 64> chunk;
  size_t at = 0;
  bool more = true;  // the parser needs more bytes than are buffered
  while (!parser.is_done()) {
    if (more) {
      if (at >= bytes.size()) break;
      buffered.append(bytes.substr(at, step));
      at += step;
    }
    parser.body().data = chunk.data();
    parser.body().size = room;
    boost::beast::error_code ec;
    const size_t used = parser.put(boost::asio::buffer(buffered), ec);
    if (used > buffered.size()) std::abort();
    buffered.erase(0, used);
    const size_t put = room - parser.body().size;
    if (put > room) std::abort();
    body.append(chunk.data(), put);
    if (ec == boost::beast::http::error::need_buffer) {
      more = false;
    } else if (ec == boost::beast::http::error::need_more || (!ec && used == 0)) {
      more = true;
    } else if (ec) {
      break;
    } else {
      more = buffered.empty();
    }
  }
  // What the relay reads of the response comes from the bytes given.
  if (body.size() > bytes.size() || parser.content_type().size() > bytes.size()) std::abort();
  if (parser.is_header_done() && static_cast<unsigned>(parser.result()) > 999) std::abort();
  return 0;
}
