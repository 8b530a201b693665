#include "agent/agent_wire.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace bmas {

void SetDeadlines(int fd, std::chrono::milliseconds send, std::chrono::milliseconds receive) {
  auto tv = [](std::chrono::milliseconds d) {
    return timeval{static_cast<time_t>(d.count() / 1000),
                   static_cast<suseconds_t>(d.count() % 1000 * 1000)};
  };
  const timeval s = tv(send), r = tv(receive);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &s, sizeof s);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof r);
}

bool SendMessage(int fd, std::string_view text, const std::vector<int>& fds) {
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * (fds.empty() ? 1 : fds.size())));
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(text.size());
}

Result<std::string> ReceiveMessage(int fd, size_t limit, std::vector<int>* fds) {
  // Wait for the message and learn its length first (MSG_PEEK | MSG_TRUNC gives a datagram's
  // whole length), so that a connection waiting for its request holds no buffer: a thousand
  // idle connections would otherwise pin a thousand `limit`-sized buffers.
  char probe;
  ssize_t length;
  do {
    length = recv(fd, &probe, 1, MSG_PEEK | MSG_TRUNC);
  } while (length < 0 && errno == EINTR);
  if (length < 0) {
    const int error = errno;
    return Error{ErrorCode::kUnavailable, error == EAGAIN || error == EWOULDBLOCK
                                              ? "no message before the deadline"
                                              : std::strerror(error)};
  }
  // One more byte than the message (or than the limit): a longer one shows as MSG_TRUNC.
  std::string text(std::min(static_cast<size_t>(length), limit) + 1, '\0');
  iovec iov{text.data(), text.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  const int error = errno;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); n >= 0 && c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    std::vector<int> got(count);
    std::memcpy(got.data(), CMSG_DATA(c), sizeof(int) * count);
    for (int f : got) {
      if (fds != nullptr) {
        fds->push_back(f);
      } else {
        close(f);
      }
    }
  }
  if (n < 0) {
    return Error{ErrorCode::kUnavailable, error == EAGAIN || error == EWOULDBLOCK
                                              ? "no message before the deadline"
                                              : std::strerror(error)};
  }
  if (n == 0) return Error{ErrorCode::kUnavailable, "end of file"};
  if ((msg.msg_flags & MSG_TRUNC) != 0 || static_cast<size_t>(n) > limit) {
    return InvalidArgument(fmt::format("a message is at most {} bytes", limit));
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0) return InvalidArgument("too many fds in one message");
  text.resize(static_cast<size_t>(n));
  return text;
}

int ConnectAgent(const std::string& path, std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return -1;
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  // A unix socket's connect waits (for room in a full backlog) no longer than SO_SNDTIMEO.
  SetDeadlines(fd, timeout, timeout);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int r;
  do {
    r = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } while (r != 0 && errno == EINTR);
  if (r != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace bmas
