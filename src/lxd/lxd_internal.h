#pragma once

// Internal to bmas_lxd: what its files share. One HTTP/1.1 exchange with LXD over any Beast
// sync stream, for the unix-socket transport (lxd_client.cc) and the HTTPS one (lxd_tls.cc).

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <string_view>

#include "common/asio.h"
#include "common/result.h"
#include "lxd/lxd_client.h"

namespace bmas::lxd::internal {

// The whole file; "" when it cannot be read.
std::string ReadText(const std::string& path);

// Lowercase hex SHA-256 of `data` (a certificate's fingerprint, an image tarball's).
std::string Sha256Hex(std::string_view data);

// Writes `text` to `path` through a temporary file and rename, with mode `mode`.
Result<void> WriteAtomically(const std::string& path, const std::string& text, mode_t mode);

inline constexpr size_t kMaxResponseBytes = 256u << 20;

// Bounds each read and write on `fd` by `timeout` (SO_RCVTIMEO/SO_SNDTIMEO).
void SetSocketTimeouts(int fd, std::chrono::milliseconds timeout);

// kUnavailable: `step` ("connect", "read", ...) to LXD at `where` failed with `ec`.
Error TransportError(std::string_view step, const std::string& where, const beast::error_code& ec,
                     std::chrono::milliseconds timeout);

// The Beast request for `request`, with Host `host`, closing the connection after it.
http::request<http::string_body> BuildRequest(const ClientRequest& request, std::string_view host);
ClientResponse TakeResponse(http::response<http::string_body>& response);

// Writes `request` and reads the whole response (up to kMaxResponseBytes) on a connected stream.
template <class SyncStream>
Result<ClientResponse> Exchange(SyncStream& stream, const ClientRequest& request, std::string_view host,
                             const std::string& where, std::chrono::milliseconds timeout) {
  beast::error_code ec;
  auto req = BuildRequest(request, host);
  http::write(stream, req, ec);
  if (ec) return TransportError("write", where, ec, timeout);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxResponseBytes);
  http::read(stream, buffer, parser, ec);
  if (ec) return TransportError("read", where, ec, timeout);
  return TakeResponse(parser.get());
}

// A connected socket whose reads and writes go straight to the kernel, so that its
// SO_RCVTIMEO/SO_SNDTIMEO bound them: Asio's own sync operations retry EAGAIN by waiting in
// poll() without a limit. The socket must be in blocking mode. Holds a reference.
template <class Socket>
class BoundedSocket {
 public:
  using lowest_layer_type = typename Socket::lowest_layer_type;
  using executor_type = typename Socket::executor_type;

  explicit BoundedSocket(Socket& socket) : socket_(&socket) {}

  // What ssl::stream asks of the layer below it.

  executor_type get_executor() { return socket_->get_executor(); }
  lowest_layer_type& lowest_layer() { return socket_->lowest_layer(); }
  const lowest_layer_type& lowest_layer() const { return socket_->lowest_layer(); }

  template <class MutableBuffers>
  size_t read_some(const MutableBuffers& buffers, beast::error_code& ec) {
    return Transfer(buffers, ec, [](int fd, msghdr* msg) { return ::recvmsg(fd, msg, 0); });
  }
  template <class ConstBuffers>
  size_t write_some(const ConstBuffers& buffers, beast::error_code& ec) {
    return Transfer(buffers, ec,
                    [](int fd, msghdr* msg) { return ::sendmsg(fd, msg, MSG_NOSIGNAL); });
  }
  // The throwing forms, which Beast's stream concepts ask for too.
  template <class MutableBuffers>
  size_t read_some(const MutableBuffers& buffers) {
    return OrThrow([&](beast::error_code& ec) { return read_some(buffers, ec); });
  }
  template <class ConstBuffers>
  size_t write_some(const ConstBuffers& buffers) {
    return OrThrow([&](beast::error_code& ec) { return write_some(buffers, ec); });
  }

 private:
  static constexpr size_t kMaxIov = 64;

  template <class Op>
  static size_t OrThrow(Op op) {
    beast::error_code ec;
    const size_t n = op(ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  template <class Buffers, class Syscall>
  size_t Transfer(const Buffers& buffers, beast::error_code& ec, Syscall syscall) {
    iovec iov[kMaxIov];
    size_t count = 0;
    size_t total = 0;
    for (auto it = net::buffer_sequence_begin(buffers);
         it != net::buffer_sequence_end(buffers) && count < kMaxIov; ++it) {
      net::const_buffer b(*it);
      if (b.size() == 0) continue;
      iov[count].iov_base = const_cast<void*>(b.data());
      iov[count].iov_len = b.size();
      total += b.size();
      ++count;
    }
    ec = {};
    if (total == 0) return 0;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    for (;;) {
      ssize_t n = syscall(socket_->native_handle(), &msg);
      if (n > 0) return static_cast<size_t>(n);
      if (n == 0) {
        ec = net::error::eof;
        return 0;
      }
      if (errno == EINTR) continue;
      // EAGAIN here is SO_RCVTIMEO/SO_SNDTIMEO running out.
      ec = (errno == EAGAIN || errno == EWOULDBLOCK)
               ? beast::error_code(net::error::timed_out)
               : beast::error_code(errno, boost::system::system_category());
      return 0;
    }
  }

  Socket* socket_;
};

}  // namespace bmas::lxd::internal
