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

#include <algorithm>
#include <cstddef>

#include "common/asio.h"

namespace bmas {

// ReadHead's steps, for a caller that reads heads often and spares a coroutine frame of
// ReadHead's own (with a chain of coroutines, Asio recycles one frame a thread; the others are
// allocated and freed, each time):
//   HeadRead read(buffer, parser);
//   while (!read.Parse(ec)) {
//     const size_t n = co_await socket.async_read_some(read.buffers(), redirect_error(..., ec));
//     if (read.Read(n, ec)) break;
//   }
template <class DynamicBuffer, class Parser>
class HeadRead {
 public:
  using Buffers = beast::buffers_prefix_view<typename DynamicBuffer::mutable_buffers_type>;

  HeadRead(DynamicBuffer& buffer, Parser& parser) : buffer_(buffer), parser_(parser) {}

  // Parses what is buffered. True when the read is over: the parser has the whole head, or
  // `ec` says why not; false when the socket must be read into buffers() first.
  bool Parse(beast::error_code& ec) {
    ec = {};
    while (!parser_.is_header_done()) {
      if (buffer_.size() > 0) {
        const size_t used = parser_.put(buffer_.data(), ec);
        buffer_.consume(used);
        if (ec && ec != http::error::need_more) return true;
        const bool more = ec == http::error::need_more || used == 0;
        ec = {};
        if (!more) continue;
      }
      size_ = std::min(std::max(kMinRead, beast::read_size(buffer_, 65536)),
                       buffer_.max_size() - buffer_.size());
      if (size_ == 0) {
        ec = http::error::buffer_overflow;
        return true;
      }
      return false;
    }
    return true;
  }

  // The least a read asks for. Beast's read_size starts a buffer at 512 bytes and then keeps
  // the capacity it grew to, which can stay just under a client's requests: the `openai` npm
  // client's head is some 540 bytes and its body comes after it, so that each request took a
  // read for its head and one more for its body (3.07 recvmsg calls a relayed request, against
  // 2.02 with wrk's smaller head). A connection keeps the buffer: 4 KiB each.
  static constexpr size_t kMinRead = 4096;

  // Where the socket's next read goes.
  Buffers buffers() { return Buffers(size_, buffer_.prepare(size_)); }

  // After a read into buffers() that took `n` bytes and ended with `ec`: true when the read is
  // over (`ec` says why), false when Parse comes next.
  bool Read(size_t n, beast::error_code& ec) {
    buffer_.commit(n);
    if (ec == net::error::eof) {
      if (!parser_.got_some()) {
        ec = http::error::end_of_stream;
        return true;
      }
      ec = {};
      parser_.put_eof(ec);  // an error: the head is not whole
      return true;
    }
    return static_cast<bool>(ec);
  }

 private:
  DynamicBuffer& buffer_;
  Parser& parser_;
  size_t size_ = 0;
};

// Reads into `buffer` and parses with `parser` until the parser has the whole head, or `ec`
// says why not. `parser` may then hold part of the body too only when it is eager.
template <class Socket, class DynamicBuffer, class Parser>
awaitable<void> ReadHead(Socket& socket, DynamicBuffer& buffer, Parser& parser,
                         beast::error_code& ec) {
  HeadRead read(buffer, parser);
  while (!read.Parse(ec)) {
    const size_t n =
        co_await socket.async_read_some(read.buffers(), net::redirect_error(use_awaitable, ec));
    if (read.Read(n, ec)) break;
  }
}

}  // namespace bmas
