#include "port_squatter.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

namespace bmas::testing {
namespace {

struct Account {
  uid_t uid;
  gid_t gid;
};

Result<Account> Lookup(const std::string& user) {
  passwd* pw = getpwnam(user.c_str());
  if (pw == nullptr) return Internal("no account " + user);
  return Account{pw->pw_uid, pw->pw_gid};
}

// In the child (async-signal-safe calls only): drops to `a`, binds and listens. Returns the
// socket, or -errno.
int DropAndListen(const Account& a, uint16_t port) {
  if (setgroups(0, nullptr) != 0 || setgid(a.gid) != 0 || setuid(a.uid) != 0) return -EPERM;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -errno;
  if (listen(fd, 64) != 0) return -errno;
  return fd;
}

}  // namespace

int BindAndListenAs(const std::string& user, uint16_t port) {
  auto account = Lookup(user);
  if (!account) return EINVAL;
  const pid_t pid = fork();
  if (pid < 0) return errno;
  if (pid == 0) {
    const int fd = DropAndListen(*account, port);
    _exit(fd >= 0 ? 0 : (-fd) & 0xff);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : EINTR;
}

Result<std::unique_ptr<PortSquatter>> PortSquatter::Start(const std::string& user, uint16_t port,
                                                          const std::string& record_file) {
  auto account = Lookup(user);
  if (!account) return account.error();
  const int record = open(record_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (record < 0) return Internal("cannot open " + record_file + ": " + std::strerror(errno));
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return Internal("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) return Internal("fork failed");
  if (pid == 0) {
    close(ready[0]);
    const int fd = DropAndListen(*account, port);
    const int result = fd >= 0 ? 0 : -fd;
    if (write(ready[1], &result, sizeof result) != sizeof result || fd < 0) _exit(1);
    close(ready[1]);
    static const char kForged[] =
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 64\r\n\r\n"
        "0000000000000000000000000000000000000000000000000000000000000000";
    char buf[16384];
    for (;;) {
      const int conn = accept(fd, nullptr, nullptr);
      if (conn < 0) continue;
      // Reads until the peer pauses, answers, and reads again until it closes or goes quiet.
      for (int rounds = 0; rounds < 64; ++rounds) {
        pollfd p{conn, POLLIN, 0};
        if (poll(&p, 1, 300) <= 0) break;
        const ssize_t n = read(conn, buf, sizeof buf);
        if (n <= 0) break;
        if (write(record, buf, static_cast<size_t>(n)) < 0) break;
        if (write(conn, kForged, sizeof kForged - 1) < 0) break;
      }
      close(conn);
    }
  }
  close(record);
  close(ready[1]);
  int result = -1;
  const ssize_t got = read(ready[0], &result, sizeof result);
  close(ready[0]);
  if (got != sizeof result || result != 0) {
    int status = 0;
    waitpid(pid, &status, 0);
    return Internal("the squatter could not bind and listen on port " + std::to_string(port) +
                    ": " + std::strerror(result > 0 ? result : EIO));
  }
  return std::unique_ptr<PortSquatter>(new PortSquatter(pid, port, record_file));
}

PortSquatter::~PortSquatter() {
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
}

std::string PortSquatter::Received() const {
  std::ifstream in(record_file_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace bmas::testing
