#pragma once

// CoarseDeadline: a deadline on a socket's reads without a timer per read.
//
// beast::basic_stream arms its timer for each operation under a deadline and cancels it when
// the operation completes: an async_wait, a cancel under the reactor's lock, and the cancelled
// wait's handler run through the io_context's queue. On a relayed request that is twice (the
// client's next request, the backend's answer), for deadlines of seconds. nginx updates its
// timers lazily for the same reason. Here one timer per io_context looks over the deadlines
// armed on it every kTick, and arming one stores a time: a deadline passes up to one tick late.
//
// When a deadline passes, its socket is closed: the operation then pending ends with an error
// (operation_aborted), and fired() says it was the deadline, as beast::error::timeout says for
// basic_stream's own. Arm before the read, Disarm after it: a deadline left armed would close
// an idle socket. On a TcpStream, keep basic_stream's own deadline at never (expires_never())
// for the reads under a CoarseDeadline.

#include <chrono>
#include <cstddef>
#include <vector>

#include "common/asio.h"

namespace bmas {

class CoarseDeadline;

// The armed deadlines of one io_context, and the timer that checks them. The timer waits only
// while a deadline is registered, so an io_context with none runs out of work as before.
class CoarseDeadlines : public net::execution_context::service {
 public:
  static net::execution_context::id id;
  static constexpr std::chrono::milliseconds kTick{50};

  explicit CoarseDeadlines(net::io_context& io);
  ~CoarseDeadlines() override;

  // Registered deadlines (armed, or disarmed since the last tick).
  size_t size() const { return deadlines_.size(); }

 private:
  friend class CoarseDeadline;

  void Add(CoarseDeadline* deadline);
  void Remove(CoarseDeadline* deadline);
  void Schedule();
  void Sweep();
  void shutdown() override;

  net::steady_timer timer_;
  std::vector<CoarseDeadline*> deadlines_;
  bool waiting_ = false;
  bool shut_down_ = false;
};

class CoarseDeadline {
 public:
  using Clock = std::chrono::steady_clock;

  // `socket` (on an io_context's executor) must outlive this.
  explicit CoarseDeadline(TcpStream::socket_type& socket);
  ~CoarseDeadline();
  CoarseDeadline(const CoarseDeadline&) = delete;
  CoarseDeadline& operator=(const CoarseDeadline&) = delete;

  // The socket is closed if the deadline is still armed `after` from now.
  void Arm(Clock::duration after) {
    when_ = Clock::now() + after;
    fired_ = false;
    if (index_ == kUnregistered) deadlines_.Add(this);
  }
  // Nothing is closed; the timer forgets this deadline at its next tick.
  void Disarm() { when_ = Clock::time_point::max(); }
  // Disarm(), after the read it was armed for: `ec` becomes beast::error::timeout when the
  // deadline had passed (the read then failed because the socket was closed).
  void Disarm(beast::error_code& ec) {
    Disarm();
    if (fired_) ec = beast::error::timeout;
  }
  // Whether the last armed deadline passed (and closed the socket).
  bool fired() const { return fired_; }

 private:
  friend class CoarseDeadlines;
  static constexpr size_t kUnregistered = static_cast<size_t>(-1);

  CoarseDeadlines& deadlines_;
  TcpStream::socket_type& socket_;
  Clock::time_point when_ = Clock::time_point::max();
  size_t index_ = kUnregistered;  // in deadlines_.deadlines_
  bool fired_ = false;
};

}  // namespace bmas
