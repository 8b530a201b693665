#include "daemon/up_children.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/process.h"

namespace bmas {
namespace {

// Starts `args` with stdout on a pipe and stderr appended to `log`, in a process group of its
// own (a Ctrl-C at the terminal reaches only `bmas up`, which then stops the children in order);
// returns the pid and the pipe's read end. `env` ("NAME=value", secrets among them: never on
// the command line) replaces variables of the same name.
// `listeners` go to descriptors 3, 4, ...
Result<std::pair<pid_t, int>> SpawnPiped(const std::vector<std::string>& args, const std::string& log,
                                         std::vector<std::string> env,
                                         const std::vector<HeldListener>& listeners) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Internal(fmt::format("pipe: {}", std::strerror(errno)));
  if (!listeners.empty()) env.push_back("BMAS_LISTEN_FDS=" + ListenFdsValue(listeners));
  SpawnOptions options{args, log, env};
  options.own_process_group = true;
  options.stdout_fd = out[1];
  for (const HeldListener& l : listeners) options.pass_fds.push_back(l.fd);
  Result<pid_t> pid = bmas::Spawn(options);
  close(out[1]);
  if (!pid) {
    close(out[0]);
    return pid.error();
  }
  return std::make_pair(*pid, out[0]);
}

// What a child printed when ready: its "listening on URL" line, and the "metrics on URL" line
// a gateway prints before it.
struct Ready {
  std::string url;
  std::string metrics_url;  // "" when none
};

// Reads the child's stdout up to its "listening on URL" line, waiting up to `timeout`.
Result<Ready> ReadListeningUrl(int fd, std::chrono::seconds timeout) {
  std::string text;
  auto until = std::chrono::steady_clock::now() + timeout;
  // A part that serves nothing (the inference controller) says when it runs instead.
  constexpr std::string_view kNoListener = "running, no listener";
  auto complete = [&text](std::string_view needle) {
    const size_t at = text.find(needle);
    return at != std::string::npos && text.find('\n', at) != std::string::npos;
  };
  while (!complete("listening on") && !complete(kNoListener)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Internal("did not report a listening address in time");
    fd_set set;
    FD_ZERO(&set);
    FD_SET(fd, &set);
    timeval tv{left.count() / 1000, static_cast<suseconds_t>((left.count() % 1000) * 1000)};
    int rc = select(fd + 1, &set, nullptr, nullptr, &tv);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return Internal("exited before it was ready");
    text.append(buf, static_cast<size_t>(n));
  }
  // The URL a line ends with ("" when none).
  auto url_of = [&text](std::string_view needle) {
    const size_t at = text.find(needle);
    if (at == std::string::npos) return std::string();
    const std::string line = text.substr(at, text.find('\n', at) - at);
    const size_t http = line.find("http://");
    return http == std::string::npos ? std::string() : line.substr(http);
  };
  Ready ready{url_of("listening on"), url_of("metrics on")};
  if (ready.url.empty() && !complete(kNoListener)) {
    return Internal("printed an unexpected line: " + text);
  }
  return ready;
}

// The port a "http://HOST:PORT" URL ends with, "" when none.
std::string PortOf(const std::string& url) {
  const size_t colon = url.rfind(':');
  if (colon == std::string::npos || colon < url.find("://") + 3) return "";
  std::string port = url.substr(colon + 1);
  port = port.substr(0, port.find('/'));
  return port;
}

std::string ExitText(int status) {
  return WIFEXITED(status) ? fmt::format("status {}", WEXITSTATUS(status))
                           : fmt::format("signal {}", WTERMSIG(status));
}

}  // namespace

std::string LogTail(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string out;
  for (size_t i = lines.size() > 8 ? lines.size() - 8 : 0; i < lines.size(); ++i) {
    out += "    " + lines[i] + "\n";
  }
  return out;
}

Result<void> StartChild(Child& c, std::chrono::seconds timeout) {
  auto spawned = SpawnPiped(c.args, c.log, c.env, c.listeners);
  if (!spawned) return spawned.error();
  c.pid = spawned->first;
  c.exited = false;
  c.started = std::chrono::steady_clock::now();
  c.start_ticks = ProcessStartTicks(c.pid);
  auto ready = ReadListeningUrl(spawned->second, timeout);
  close(spawned->second);
  if (!ready) {
    std::vector<Child> failed = {c};
    StopAll(failed, std::chrono::seconds(2));
    c.exited = true;
    return Internal(fmt::format("{}; its log {} ends with:\n{}", ready.error().message, c.log,
                                LogTail(c.log)));
  }
  c.url = ready->url;
  c.metrics_url = ready->metrics_url;
  // The same port when it starts again: the gateway and users were given this URL.
  const std::string port = PortOf(c.url);
  if (!c.port_flag.empty() && !port.empty()) {
    auto flag = std::find(c.args.begin(), c.args.end(), c.port_flag);
    if (flag != c.args.end() && flag + 1 != c.args.end()) {
      *(flag + 1) = port;
    } else {
      c.args.push_back(c.port_flag);
      c.args.push_back(port);
    }
  }
  return {};
}

Result<uint16_t> HoldListener(Child& c, const std::string& host, uint16_t port) {
  auto fd = ListenTcp(host, port);
  if (!fd) return fd.error();
  auto bound = BoundPort(*fd);
  if (!bound) {
    close(*fd);
    return bound.error();
  }
  c.listeners.push_back({host, *bound, *fd});
  return *bound;
}

void ReleaseListeners(Child& c) {
  for (const HeldListener& l : c.listeners) close(l.fd);
  c.listeners.clear();
}

std::optional<std::string> ReapChild(Child& c) {
  if (c.exited) return std::nullopt;
  int status;
  const pid_t r = waitpid(c.pid, &status, WNOHANG);
  if (r == 0 || (r < 0 && errno != ECHILD)) return std::nullopt;
  c.exited = true;
  return r == c.pid ? ExitText(status) : std::string("ended (not reaped)");
}

void StopAll(std::vector<Child>& children, std::chrono::seconds grace) {
  for (Child& c : children) {
    if (!c.exited) kill(c.pid, SIGTERM);
  }
  auto until = std::chrono::steady_clock::now() + grace;
  for (Child& c : children) {
    while (!c.exited) {
      int status;
      pid_t r = waitpid(c.pid, &status, WNOHANG);
      if (r == c.pid || (r < 0 && errno == ECHILD)) {
        c.exited = true;
        break;
      }
      if (std::chrono::steady_clock::now() > until) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
        c.exited = true;
        break;
      }
      usleep(20000);
    }
  }
}

}  // namespace bmas
