#pragma once

// WriteAll: writes a buffer sequence to a TcpStream, at once when the socket takes it all.
//
// A small response, or a request to a backend, nearly always fits in the socket's send buffer.
// Asio's async_write would then still arm the stream's deadline timer, cancel it, and resume
// the coroutine through the io_context's queue (with an epoll_wait(2) on the way): more CPU
// than the sendmsg(2) itself. WriteAll makes one non-blocking sendmsg first, and only for what
// the socket did not take (a full send buffer, a large body) the deadline and async_write.

#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>

#include "common/asio.h"

namespace bmas {

// One non-blocking sendmsg of `buffers` (at most 8 of them; more are left to the caller's
// async write): the bytes the socket took, 0 when it took none (its send buffer is full).
// Sets `ec` when the connection failed (EPIPE, ECONNRESET, ...).
template <class ConstBufferSequence>
size_t SendNow(TcpStream::socket_type& socket, const ConstBufferSequence& buffers,
               beast::error_code& ec) {
  std::array<iovec, 8> iov;
  size_t count = 0;
  for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers);
       ++it) {
    const net::const_buffer b(*it);
    if (b.size() == 0) continue;
    if (count == iov.size()) return 0;
    iov[count++] = iovec{const_cast<void*>(b.data()), b.size()};
  }
  if (count == 0) return 0;
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = count;
  while (true) {
    const ssize_t n = ::sendmsg(socket.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      ec = beast::error_code(errno, net::error::get_system_category());
    }
    return 0;
  }
}

// SendNow for a whole write, without a coroutine: true when nothing is left to write (the
// socket took all of `buffers`, or the connection failed: `ec`); false when WriteRest must
// write what is left after the `sent` bytes it took. On a request path, where the socket
// nearly always takes it all, this spares WriteAll's coroutine frame:
//   if (!WriteAtOnce(socket, b, sent, ec)) ec = co_await WriteRest(stream, b, sent, timeout);
template <class ConstBufferSequence>
bool WriteAtOnce(TcpStream::socket_type& socket, const ConstBufferSequence& buffers, size_t& sent,
                 beast::error_code& ec) {
  sent = SendNow(socket, buffers, ec);
  return ec || sent == net::buffer_size(buffers);
}

// Writes what follows the first `sent` bytes of `buffers`, with async_write under `timeout`.
// Returns the error that ended the write, if any (beast::error::timeout when the deadline
// passed).
template <class ConstBufferSequence>
awaitable<beast::error_code> WriteRest(TcpStream& stream, const ConstBufferSequence& buffers,
                                       size_t sent, std::chrono::steady_clock::duration timeout) {
  beast::error_code ec;
  beast::buffers_suffix<ConstBufferSequence> rest(buffers);
  rest.consume(sent);
  stream.expires_after(timeout);
  co_await net::async_write(stream, rest, net::redirect_error(use_awaitable, ec));
  // Reads after it may run under a CoarseDeadline instead, with none of basic_stream's own.
  stream.expires_never();
  co_return ec;
}

// Writes all of `buffers`: what SendNow does not take, with WriteRest.
template <class ConstBufferSequence>
awaitable<beast::error_code> WriteAll(TcpStream& stream, const ConstBufferSequence& buffers,
                                      std::chrono::steady_clock::duration timeout) {
  beast::error_code ec;
  size_t sent = 0;
  if (WriteAtOnce(stream.socket(), buffers, sent, ec)) co_return ec;
  co_return co_await WriteRest(stream, buffers, sent, timeout);
}

}  // namespace bmas
