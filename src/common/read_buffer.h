#pragma once

// ReadBuffer: a beast::flat_buffer whose reads of a message's head make no read that finds
// nothing.
//
// Asio (1.74) starts every read with a recvmsg(2) before it asks epoll, and keeps doing so
// after a read that emptied the socket: on a keep-alive connection the read of the next
// request (or of a backend's answer to the request just sent) then fails with EAGAIN first, a
// system call for nothing (1.8 of them a relayed request at 32 connections, counted with
// perf's syscall tracepoints). Waiting with async_wait(wait_read) instead costs an
// epoll_ctl(2) each time. nginx's way costs nothing: a read that returned less than it had
// room for emptied the socket, so the next one waits for epoll's next edge. Reads into a
// ReadBuffer tell Asio's reactor exactly that: such a read reports itself "done and exhausted"
// (as Asio's own reads do at end of file), and the reactor then queues the next read on that
// socket until epoll says something came (the socket is registered edge-triggered once).
//
// The one thing such a read cannot see is an end of file that came in the same epoll event as
// its data: no later edge announces it, and the next read on the socket (plain or not) waits
// for its deadline. So only the head of a message is read through the ReadBuffer itself, where
// what the peer does next is answer what we send it (a peer that closed answers that with a
// reset, which is an edge): a request's head, and the head of a backend's whole (not streamed)
// answer. Bodies go through plain(), and a stream's backend, which may die mid-way, is read
// plain throughout. What is left, when a peer closes in the same instant as it sends: a client
// that shuts down its sending side right after its request keeps its connection until the idle
// timeout (it still gets its whole answer); a disconnect watch misses a client that closed
// then (its request is answered, to nobody); a backend that dies between the head and the body
// of a whole answer is found out by the upstream idle timeout instead of at once.

#include <cstddef>

#include "common/asio.h"

// After asio.h: it needs the socket types that asio.h brings in.
#include <boost/asio/detail/reactive_socket_recv_op.hpp>

namespace bmas {

// One mutable buffer, as a buffer sequence of its own type: the type that marks a read as one
// whose short result means the socket is empty.
class DrainingBuffer {
 public:
  using value_type = net::mutable_buffer;
  using const_iterator = const net::mutable_buffer*;

  DrainingBuffer() = default;
  explicit DrainingBuffer(net::mutable_buffer buffer) : buffer_(buffer) {}

  const_iterator begin() const { return &buffer_; }
  const_iterator end() const { return &buffer_ + 1; }

 private:
  net::mutable_buffer buffer_;
};

// A flat_buffer whose prepare() hands out DrainingBuffers: pass it to http::async_read_header
// on a TcpStream for the head of a message, and plain() for what follows it.
class ReadBuffer : public beast::flat_buffer {
 public:
  using mutable_buffers_type = DrainingBuffer;

  DrainingBuffer prepare(std::size_t n) { return DrainingBuffer(beast::flat_buffer::prepare(n)); }
  // The same bytes, read as Asio reads them: a short read says nothing of what is left.
  beast::flat_buffer& plain() { return *this; }
};

}  // namespace bmas

namespace boost::asio::detail {

// A TcpStream (beast::basic_stream) reads through a buffers_prefix_view of the caller's
// buffers: this is the read that a ReadBuffer's reads become. As Asio's own do_perform, but a
// read shorter than its buffers is done_and_exhausted too.
template <>
inline reactor_op::status reactive_socket_recv_op_base<
    beast::buffers_prefix_view<bmas::DrainingBuffer>>::do_perform(reactor_op* base) {
  auto* o = static_cast<reactive_socket_recv_op_base*>(base);
  buffer_sequence_adapter<mutable_buffer, beast::buffers_prefix_view<bmas::DrainingBuffer>>
      bufs(o->buffers_);
  const bool stream = (o->state_ & socket_ops::stream_oriented) != 0;
  if (!socket_ops::non_blocking_recv(o->socket_, bufs.buffers(), bufs.count(), o->flags_,
                                     stream, o->ec_, o->bytes_transferred_)) {
    return not_done;  // EAGAIN: queued until epoll reports data
  }
  if (stream && o->bytes_transferred_ < bufs.total_size()) return done_and_exhausted;
  return done;
}

}  // namespace boost::asio::detail
