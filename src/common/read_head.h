#pragma once

// ReadHead: reads a message's head into a Beast parser, with the socket's own async_read_some.
//
// http::async_read_header on a TcpStream goes through three composed operations for each read
// (Beast's read_op and read_some_op, then basic_stream's transfer_op), each of which keeps a
// work guard on the executor, and basic_stream's a reference to the stream's shared state and
// its timer's bookkeeping, even with no deadline set. On a relayed request there are two such
// reads (the client's request, the backend's answer), and their layers cost more instructions
// than Beast's parse of the head they read (bench/RESULTS.md G1). The reads on the request
// path run under a CoarseDeadline, not basic_stream's own, so none of that is needed: ReadHead
// is one loop around parser.put() and the socket's read, with the results Beast's read gives:
//   - what is buffered already is parsed first, and the socket is read only when the parser
//     needs more (a pipelined request is parsed without a read);
//   - an end of file before any byte of the message is http::error::end_of_stream, and one in
//     the middle of the head is the parser's error for it (http::error::partial_message);
//   - a buffer that cannot grow is http::error::buffer_overflow, and a head over the parser's
//     limit http::error::header_limit.
// Reads into a ReadBuffer stay reads whose short result says the socket is empty
// (read_buffer.h): the socket's read gets the same buffers_prefix_view of a DrainingBuffer
// that basic_stream would pass it.

#include <cstddef>

#include "common/asio.h"

namespace bmas {

// Reads into `buffer` and parses with `parser` until the parser has the whole head, or `ec`
// says why not. `parser` may then hold part of the body too only when it is eager.
template <class Socket, class DynamicBuffer, class Parser>
awaitable<void> ReadHead(Socket& socket, DynamicBuffer& buffer, Parser& parser,
                         beast::error_code& ec) {
  ec = {};
  while (!parser.is_header_done()) {
    if (buffer.size() > 0) {
      const size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec && ec != http::error::need_more) co_return;
      const bool more = ec == http::error::need_more || used == 0;
      ec = {};
      if (!more) continue;
    }
    const size_t size = beast::read_size(buffer, 65536);
    if (size == 0) {
      ec = http::error::buffer_overflow;
      co_return;
    }
    using Buffers = typename DynamicBuffer::mutable_buffers_type;
    const size_t n = co_await socket.async_read_some(
        beast::buffers_prefix_view<Buffers>(size, buffer.prepare(size)),
        net::redirect_error(use_awaitable, ec));
    buffer.commit(n);
    if (ec == net::error::eof) {
      if (!parser.got_some()) {
        ec = http::error::end_of_stream;
        co_return;
      }
      ec = {};
      parser.put_eof(ec);  // an error: the head is not whole
      co_return;
    }
    if (ec) co_return;
  }
}

}  // namespace bmas
