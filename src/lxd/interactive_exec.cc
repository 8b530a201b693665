#include "lxd/interactive_exec.h"

#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <array>
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

Result<void> Connect(Socket& ws, const std::string& socket, const std::string& target) {
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
  // then; what it still sends arrives within moments, so the relay ends once the data socket
  // has been quiet for a little while.
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
      const char* p = static_cast<const char*>(b.data());
      for (size_t left = b.size(); left > 0;) {
        ssize_t n = write(out_fd_, p, left);
        if (n <= 0) break;
        p += n;
        left -= static_cast<size_t>(n);
      }
      from_lxd_.consume(from_lxd_.size());
      if (ended_) Drain();
      ReadData();
    });
  }

  void Drain() {
    drain_.expires_after(std::chrono::milliseconds(100));
    drain_.async_wait([this](beast::error_code ec) {
      if (!ec) Finish();
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

}  // namespace

Result<int> RunInteractive(LxdClient& client, const std::string& socket, const std::string& name,
                           const ExecSpec& spec, int in_fd, int out_fd) {
  const auto [width, height] = WindowSize(out_fd);
  auto exec = client.StartInteractiveExec(name, spec, width, height);
  if (!exec) return exec.error();
  net::io_context io;
  Socket data(io), control(io);
  const std::string base = exec->operation + "/websocket?secret=";
  // LXD starts the command once every websocket it offered is connected.
  if (auto r = Connect(data, socket, base + exec->data_secret); !r) return r.error();
  if (auto r = Connect(control, socket, base + exec->control_secret); !r) return r.error();
  Result<int> code = Internal("the interactive command's end was not seen");
  {
    RawMode raw(in_fd);
    Relay relay(io, data, control, in_fd, out_fd);
    relay.Start();
    // The operation's end, waited for on a client of its own, tells the relay to wind down.
    std::thread waiter([&] {
      LxdClient own(socket);
      code = own.ExecExitCode(exec->operation);
      net::post(io, [&relay] { relay.CommandEnded(); });
    });
    io.run();
    waiter.join();
  }
  return code;
}

}  // namespace bmas::lxd
