#include "agent/terminal_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <array>
#include <cerrno>

namespace bmas {
namespace {

int g_wake_fd = -1;  // the write end of the relay's self-pipe, for the signal handler

void OnSignal(int sig) {
  const int saved = errno;
  const char byte = static_cast<char>(sig);
  [[maybe_unused]] ssize_t w = write(g_wake_fd, &byte, 1);
  errno = saved;
}

bool WriteAll(int fd, const char* data, ssize_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, data, static_cast<size_t>(n));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= w;
  }
  return true;
}

void CopySize(int from, int to) {
  winsize size{};
  if (ioctl(from, TIOCGWINSZ, &size) == 0) ioctl(to, TIOCSWINSZ, &size);
}

// Signals the relay turns into bytes on its self-pipe, and their former handlers.
constexpr std::array<int, 5> kSignals = {SIGWINCH, SIGTERM, SIGHUP, SIGINT, SIGQUIT};

}  // namespace

std::optional<TerminalSize> SizeOf(int fd) {
  winsize size{};
  if (!isatty(fd) || ioctl(fd, TIOCGWINSZ, &size) != 0) return std::nullopt;
  // A terminal that reports no size (some serial lines, `script` without one) gets the classic.
  if (size.ws_row == 0 || size.ws_col == 0) return TerminalSize{24, 80};
  return TerminalSize{size.ws_row, size.ws_col};
}

int RelayTerminal(int master, int done_fd) {
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) return 0;
  g_wake_fd = wake[1];
  std::array<struct sigaction, kSignals.size()> before{};
  struct sigaction relay {};
  relay.sa_handler = OnSignal;
  sigemptyset(&relay.sa_mask);
  for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &relay, &before[i]);

  termios saved{};
  const bool raw = tcgetattr(STDIN_FILENO, &saved) == 0;
  if (raw) {
    termios t = saved;
    cfmakeraw(&t);
    tcsetattr(STDIN_FILENO, TCSADRAIN, &t);
  }
  CopySize(STDIN_FILENO, master);  // it may have changed since the request

  char buf[16384];
  bool input_open = true, master_open = true;
  int stopped_by = 0;
  for (bool over = false; !over;) {
    pollfd p[4] = {{input_open ? STDIN_FILENO : -1, POLLIN, 0},
                   {master_open ? master : -1, POLLIN, 0},
                   {done_fd, POLLIN | POLLRDHUP, 0},
                   {wake[0], POLLIN, 0}};
    if (poll(p, 4, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[3].revents & POLLIN) {
      char sig;
      while (read(wake[0], &sig, 1) == 1) {
        if (sig == SIGWINCH) {
          CopySize(STDIN_FILENO, master);
        } else {
          over = true;  // this side is being stopped: the session ends with the connection
          stopped_by = sig;
        }
      }
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
      if (n > 0) {
        WriteAll(master, buf, n);
      } else if (n == 0 || errno != EINTR) {
        input_open = false;
      }
    }
    if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = read(master, buf, sizeof buf);
      if (n > 0) {
        WriteAll(STDOUT_FILENO, buf, n);
      } else if (n == 0 || errno != EINTR) {
        master_open = false;  // EIO: nothing holds the terminal's other side any more
      }
    }
    if (p[2].revents) over = true;  // the exit code came, or the agent went away
  }
  // What the shell wrote just before it ended may still be in the terminal: the kernel moves a
  // pty's output to the master side in a worker of its own, which a loaded machine may run late,
  // after the exit code came. Read until the terminal's other side is closed and empty (EIO, at
  // once when nothing holds it) or a second passes without output.
  for (pollfd p{master, POLLIN, 0}; master_open && poll(&p, 1, 1000) > 0;) {
    const ssize_t n = read(master, buf, sizeof buf);
    if (n <= 0) break;
    WriteAll(STDOUT_FILENO, buf, n);
  }
  if (raw) tcsetattr(STDIN_FILENO, TCSADRAIN, &saved);
  for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &before[i], nullptr);
  g_wake_fd = -1;
  close(wake[0]);
  close(wake[1]);
  return stopped_by;
}

}  // namespace bmas
