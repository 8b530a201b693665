#include "lxd/interactive_exec.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <optional>
#include <thread>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/beast/websocket.hpp>
#include <fmt/format.h>

#include "common/asio.h"

namespace bmas::lxd {
namespace {

namespace websocket = beast::websocket;
using Local = net::local::stream_protocol;
using Socket = websocket::stream<Local::socket>;

// The terminal's size, or 80x24 when `fd` is not one.
std::pair<int, int> WindowSize(int fd) {
  winsize ws{};
  if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
    return {ws.ws_col, ws.ws_row};
  }
  return {80, 24};
}

// Raw mode on a terminal for its life; nothing on anything else.
class RawMode {
 public:
  explicit RawMode(int fd) : fd_(fd) {
    termios t{};
    if (isatty(fd) && tcgetattr(fd, &t) == 0) {
      saved_ = t;
      cfmakeraw(&t);
      tcsetattr(fd, TCSANOW, &t);
    }
  }
  ~RawMode() {
    if (saved_) tcsetattr(fd_, TCSANOW, &*saved_);
  }
  RawMode(const RawMode&) = delete;
  RawMode& operator=(const RawMode&) = delete;

 private:
  int fd_;
  std::optional<termios> saved_;
};

// Connects `ws` to the websocket that `exec`'s secret for `fd` opens.
Result<void> Connect(Socket& ws, const std::string& socket, const WebsocketExec& exec,
                     const std::string& fd) {
  const std::string target = exec.operation + "/websocket?secret=" + exec.secrets.at(fd);
  beast::error_code ec;
  ws.next_layer().connect(Local::endpoint(socket), ec);
  if (!ec) ws.handshake("lxd", target, ec);
  if (ec) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("cannot open LXD's exec websocket {} on {}: {}", target, socket,
                             ec.message()),
                 {}};
  }
  return {};
}

// Writes all of `data` to `fd`, waiting while it is full (a descriptor shared with stdin is
// non-blocking while the relay reads stdin).
void WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd writable{fd, POLLOUT, 0};
      poll(&writable, 1, -1);
      continue;
    }
    if (n <= 0) return;  // the reader went: what is left has nowhere to go
    p += n;
    size -= static_cast<size_t>(n);
  }
}

std::string ResizeMessage(std::pair<int, int> size) {
  return fmt::format(R"({{"command":"window-resize","args":{{"width":"{}","height":"{}"}}}})",
                     size.first, size.second);
}

// Relays bytes between the caller's descriptors and the data websocket until LXD closes it;
// passes window-size changes on to the control websocket.
class Relay {
 public:
  Relay(net::io_context& io, Socket& data, Socket& control, int in_fd, int out_fd)
      : data_(data),
        control_(control),
        in_(io, dup(in_fd)),
        out_fd_(out_fd),
        winch_(io, SIGWINCH),
        drain_(io) {}

  void Start() {
    ReadData();
    ReadInput();
    WatchWindow();
  }

  // The command has ended (its operation says so). LXD does not always close the data socket
  // then (a background process may still hold the terminal), and what it still sends may be on
  // its way, so the relay ends once the data socket has been quiet for a second with nothing
  // unread on it.
  void CommandEnded() {
    ended_ = true;
    Drain();
  }

 private:
  void ReadData() {
    data_.async_read(from_lxd_, [this](beast::error_code ec, size_t n) {
      if (ec) return Finish();  // our close answered, or LXD went
      if (n == 0) {
        // An empty message is LXD's end of the pty's output; LXD ends the command's operation
        // once we close our side.
        output_ended_ = true;
        beast::error_code ignored;
        in_.cancel(ignored);
        if (!writing_) Close();
        return ReadData();  // until our close is answered
      }
      const auto b = from_lxd_.data();  // a flat_buffer's one contiguous part
      WriteAll(out_fd_, b.data(), b.size());
      from_lxd_.consume(from_lxd_.size());
      if (ended_) Drain();
      ReadData();
    });
  }

  // A loaded machine may run this thread late, when both the timer and the shell's last output
  // are ready: the timer's handler may come first, and must not end the relay over unread bytes.
  void Drain() {
    drain_.expires_after(std::chrono::seconds(1));
    drain_.async_wait([this](beast::error_code ec) {
      if (ec) return;
      beast::error_code ignored;
      if (data_.next_layer().available(ignored) > 0) return Drain();
      Finish();
    });
  }

  void ReadInput() {
    in_.async_read_some(net::buffer(to_lxd_), [this](beast::error_code ec, size_t n) {
      if (ec || finished_ || output_ended_) return;  // end of input: the command goes on
      data_.binary(true);
      writing_ = true;
      data_.async_write(net::buffer(to_lxd_.data(), n), [this](beast::error_code wec, size_t) {
        writing_ = false;
        if (output_ended_) return Close();
        if (!wec) ReadInput();
      });
    });
  }

  void Close() {
    if (closing_) return;
    closing_ = true;
    data_.async_close(websocket::close_code::normal, [](beast::error_code) {});
  }

  void WatchWindow() {
    winch_.async_wait([this](beast::error_code ec, int) {
      if (ec || finished_) return;
      resize_ = ResizeMessage(WindowSize(out_fd_));
      control_.text(true);
      control_.async_write(net::buffer(resize_), [this](beast::error_code, size_t) {
        WatchWindow();
      });
    });
  }

  void Finish() {
    if (finished_) return;
    finished_ = true;
    beast::error_code ignored;
    in_.cancel(ignored);
    winch_.cancel(ignored);
    drain_.cancel();
    control_.next_layer().close(ignored);
    data_.next_layer().close(ignored);
  }

  Socket& data_;
  Socket& control_;
  net::posix::stream_descriptor in_;
  int out_fd_;
  net::signal_set winch_;
  beast::flat_buffer from_lxd_;
  std::array<char, 4096> to_lxd_{};
  net::steady_timer drain_;
  std::string resize_;
  bool ended_ = false, finished_ = false;
  bool output_ended_ = false, writing_ = false, closing_ = false;
};

// Relays `in_fd` to the command's stdin websocket, and its stdout and stderr websockets to
// `out_fd` and `err_fd`, until the command and both its outputs have ended. SIGINT, SIGTERM,
// SIGHUP and SIGQUIT sent to bmas go on to the command over the control websocket, as with a
// local command (on a pty the terminal makes them inside the workspace instead).
class PipeRelay {
 public:
  PipeRelay(net::io_context& io, Socket& in, Socket& out, Socket& err, Socket& control, int in_fd,
            int out_fd, int err_fd)
      : to_command_(in),
        control_(control),
        outputs_{{{out, out_fd}, {err, err_fd}}},
        in_(io, OpenInput(in_fd)),
        grace_(io),
        signals_(io, SIGINT, SIGTERM, SIGHUP) {
    signals_.add(SIGQUIT);
  }

  void Start() {
    for (Output& o : outputs_) ReadOutput(o);
    ReadInput();
    ForwardSignals();
  }

  // The command has ended. LXD ends both outputs before it says so, so they are ending or
  // have; a grace period covers an end that never comes.
  void CommandEnded() {
    ended_ = true;
    if (OutputsEnded()) return Finish();
    grace_.expires_after(std::chrono::seconds(1));
    grace_.async_wait([this](beast::error_code ec) {
      if (!ec) Finish();
    });
  }

 private:
  struct Output {
    Socket& ws;
    int fd;
    beast::flat_buffer buffer;
    bool ended = false;
  };

  // A stdin that cannot be had (no descriptor left) reads as an empty one.
  static int OpenInput(int fd) {
    const int own = dup(fd);
    return own >= 0 ? own : open("/dev/null", O_RDONLY | O_CLOEXEC);
  }

  bool OutputsEnded() const { return outputs_[0].ended && outputs_[1].ended; }

  void ReadOutput(Output& o) {
    o.ws.async_read(o.buffer, [this, &o](beast::error_code ec, size_t n) {
      // LXD ends an output with an empty message once the command's end of the pipe closes;
      // an error is LXD closing the socket (or our Finish).
      if (ec || n == 0) {
        o.ended = true;
        if (ended_ && OutputsEnded()) Finish();
        return;
      }
      const auto b = o.buffer.data();
      WriteAll(o.fd, b.data(), b.size());
      o.buffer.consume(o.buffer.size());
      ReadOutput(o);
    });
  }

  // Until end of input, which LXD is told with an empty text message (its "barrier", what
  // `lxc exec` sends): it closes the command's stdin then.
  void ReadInput() {
    in_.async_read_some(net::buffer(to_lxd_), [this](beast::error_code ec, size_t n) {
      if (finished_) return;
      if (ec) {
        to_command_.text(true);
        to_command_.async_write(net::const_buffer(), [](beast::error_code, size_t) {});
        return;
      }
      to_command_.binary(true);
      to_command_.async_write(net::buffer(to_lxd_.data(), n),
                              [this](beast::error_code wec, size_t) {
                                if (!wec) ReadInput();  // else LXD went: the command has ended
                              });
    });
  }

  void ForwardSignals() {
    signals_.async_wait([this](beast::error_code ec, int signal) {
      if (ec || finished_) return;
      signal_message_ = fmt::format(R"({{"command":"signal","signal":{}}})", signal);
      control_.text(true);
      control_.async_write(net::buffer(signal_message_), [this](beast::error_code, size_t) {
        ForwardSignals();
      });
    });
  }

  void Finish() {
    if (finished_) return;
    finished_ = true;
    beast::error_code ignored;
    in_.cancel(ignored);
    grace_.cancel();
    signals_.cancel(ignored);
    for (Socket* ws : {&to_command_, &outputs_[0].ws, &outputs_[1].ws, &control_}) {
      ws->next_layer().close(ignored);
    }
  }

  Socket& to_command_;
  Socket& control_;
  std::array<Output, 2> outputs_;
  net::posix::stream_descriptor in_;
  std::array<char, 4096> to_lxd_{};
  net::steady_timer grace_;
  net::signal_set signals_;
  std::string signal_message_;
  bool ended_ = false, finished_ = false;
};

// Runs `relay` to its end. The operation's end, waited for on a client of its own (this
// thread is the relay's), tells the relay to wind down; the operation holds the exit code.
template <typename R>
Result<int> RunRelay(net::io_context& io, R& relay, const std::string& socket,
                     const std::string& operation) {
  Result<int> code = Internal("the command's end was not seen");
  relay.Start();
  std::thread waiter([&] {
    LxdClient own(socket);
    code = own.ExecExitCode(operation);
    net::post(io, [&relay] { relay.CommandEnded(); });
  });
  io.run();
  waiter.join();
  return code;
}

}  // namespace

Result<int> RunInteractive(LxdApi& client, const std::string& socket, const std::string& name,
                           const ExecSpec& spec, int in_fd, int out_fd) {
  const auto [width, height] = WindowSize(out_fd);
  auto exec = client.StartInteractiveExec(name, spec, width, height);
  if (!exec) return exec.error();
  net::io_context io;
  Socket data(io), control(io);
  // LXD starts the command once every websocket it offered is connected.
  if (auto r = Connect(data, socket, *exec, "0"); !r) return r.error();
  if (auto r = Connect(control, socket, *exec, "control"); !r) return r.error();
  RawMode raw(in_fd);
  Relay relay(io, data, control, in_fd, out_fd);
  return RunRelay(io, relay, socket, exec->operation);
}

Result<int> RunPiped(LxdApi& client, const std::string& socket, const std::string& name,
                     const ExecSpec& spec, int in_fd, int out_fd, int err_fd) {
  auto exec = client.StartPipedExec(name, spec);
  if (!exec) return exec.error();
  net::io_context io;
  Socket in(io), out(io), err(io), control(io);
  // All four, as `lxc exec` does: control carries the signals bmas is sent.
  if (auto r = Connect(in, socket, *exec, "0"); !r) return r.error();
  if (auto r = Connect(out, socket, *exec, "1"); !r) return r.error();
  if (auto r = Connect(err, socket, *exec, "2"); !r) return r.error();
  if (auto r = Connect(control, socket, *exec, "control"); !r) return r.error();
  PipeRelay relay(io, in, out, err, control, in_fd, out_fd, err_fd);
  return RunRelay(io, relay, socket, exec->operation);
}

}  // namespace bmas::lxd
