#include "common/listen_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

namespace bmas {
namespace {

constexpr const char* kListenFds = "BMAS_LISTEN_FDS";

// `host` as a socket address with `port`; false when it is not a numeric IPv4 or IPv6 address.
bool ToAddress(const std::string& host, uint16_t port, sockaddr_storage& out, socklen_t& len) {
  std::memset(&out, 0, sizeof out);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    len = sizeof *v4;
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof *v6;
    return true;
  }
  return false;
}

bool SameAddress(const std::string& a, const std::string& b) {
  sockaddr_storage x, y;
  socklen_t xl = 0, yl = 0;
  if (!ToAddress(a, 0, x, xl) || !ToAddress(b, 0, y, yl)) return a == b;
  return xl == yl && std::memcmp(&x, &y, xl) == 0;
}

Error CannotListen(const std::string& host, uint16_t port, int err) {
  const std::string where = fmt::format("{}:{}", host, port);
  if (err == EADDRINUSE) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("cannot listen on {}: another process holds port {} (see who with "
                             "`ss -ltnp 'sport = :{}'`; stop it, or pick another port, or 0 for "
                             "any free one)",
                             where, port, port),
                 "port"};
  }
  return Error{ErrorCode::kUnavailable,
               fmt::format("cannot listen on {}: {} (pick another port, or 0 for any free one)",
                           where, std::strerror(err)),
               "port"};
}

struct Inherited {
  std::string host;
  uint16_t port = 0;
  int fd = -1;
};

std::mutex inherited_mu;
bool inherited_read = false;
std::vector<Inherited> inherited;  // guarded by inherited_mu

// Reads BMAS_LISTEN_FDS once; entries that do not parse are left out (the part then binds the
// port itself, and says so if it cannot).
void ReadInherited() {
  if (inherited_read) return;
  inherited_read = true;
  const char* value = std::getenv(kListenFds);
  if (value == nullptr) return;
  std::string_view rest = value;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view entry = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    int fd = -1;
    auto [end, ec] = std::from_chars(entry.data(), entry.data() + eq, fd);
    if (ec != std::errc() || end != entry.data() + eq || fd < 3) continue;
    auto address = SplitHostPort(entry.substr(eq + 1));
    if (!address) continue;
    inherited.push_back({address->first, address->second, fd});
  }
  unsetenv(kListenFds);
}

}  // namespace

Result<std::pair<std::string, uint16_t>> SplitHostPort(std::string_view text) {
  const size_t colon = text.rfind(':');
  int port = -1;
  if (colon != std::string_view::npos) {
    const char* first = text.data() + colon + 1;
    const char* last = text.data() + text.size();
    auto [end, ec] = std::from_chars(first, last, port);
    if (ec != std::errc() || end != last || first == last || port > 65535) port = -1;
  }
  std::string host(colon == std::string_view::npos ? std::string_view() : text.substr(0, colon));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || port < 0) {
    return InvalidArgument(fmt::format("\"{}\" is not host:port (e.g. 127.0.0.1:8080; port 0 "
                                       "picks a free one)",
                                       text));
  }
  return std::make_pair(std::move(host), static_cast<uint16_t>(port));
}

bool IsLoopbackHost(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  return host == "localhost" ||
         (inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127) ||
         (inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6));
}

std::string JoinHostPort(const std::string& host, uint16_t port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

Result<int> ListenTcp(const std::string& host, uint16_t port) {
  sockaddr_storage address;
  socklen_t len = 0;
  if (!ToAddress(host, port, address, len)) {
    return InvalidArgument("'" + host + "' is not an IP address: give a numeric host", "host");
  }
  const int fd = socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return CannotListen(host, port, errno);
  const int on = 1;
  // Binds and listens in one step: a port bound but not listened on can be bound again by any
  // account, with SO_REUSEADDR, and listened on first.
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&address), len) != 0 || listen(fd, SOMAXCONN) != 0) {
    const int err = errno;
    close(fd);
    return CannotListen(host, port, err);
  }
  return fd;
}

Result<uint16_t> BoundPort(int fd) {
  sockaddr_storage address;
  socklen_t len = sizeof address;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &len) != 0) {
    return Internal(fmt::format("getsockname on descriptor {}: {}", fd, std::strerror(errno)));
  }
  if (address.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  }
  return Internal(fmt::format("descriptor {} is not an IP socket", fd));
}

std::string ListenFdsValue(const std::vector<HeldListener>& held) {
  std::string value;
  for (size_t i = 0; i < held.size(); ++i) {
    value += fmt::format("{}{}={}", i == 0 ? "" : ",", 3 + i,
                         JoinHostPort(held[i].host, held[i].port));
  }
  return value;
}

Result<int> TakeInheritedListener(const std::string& host, uint16_t port) {
  std::lock_guard<std::mutex> lock(inherited_mu);
  ReadInherited();
  for (auto it = inherited.begin(); it != inherited.end(); ++it) {
    if (it->port != port || !SameAddress(it->host, host)) continue;
    const int fd = it->fd;
    inherited.erase(it);
    int listening = 0, type = 0;
    socklen_t size = sizeof listening;
    const bool ok = getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) == 0 &&
                    listening == 1 &&
                    (size = sizeof type, getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &size)) == 0 &&
                    type == SOCK_STREAM;
    auto bound = BoundPort(fd);
    if (!ok || !bound || *bound != port) {
      return Error{ErrorCode::kInvalidArgument,
                   fmt::format("descriptor {} passed for {}:{} in {} is not a TCP socket "
                               "listening on that port: start this part from bmas up, or "
                               "without {}",
                               fd, host, port, kListenFds, kListenFds),
                   "port"};
    }
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
  }
  return -1;
}

}  // namespace bmas
