#include "common/coarse_deadline.h"

namespace bmas {

net::execution_context::id CoarseDeadlines::id;

CoarseDeadlines::CoarseDeadlines(net::io_context& io)
    : net::execution_context::service(io), timer_(io) {}

CoarseDeadlines::~CoarseDeadlines() = default;

void CoarseDeadlines::shutdown() {
  shut_down_ = true;
  timer_.cancel();
}

void CoarseDeadlines::Add(CoarseDeadline* deadline) {
  deadline->index_ = deadlines_.size();
  deadlines_.push_back(deadline);
  if (!waiting_) Schedule();
}

void CoarseDeadlines::Remove(CoarseDeadline* deadline) {
  const size_t i = deadline->index_;
  deadlines_[i] = deadlines_.back();
  deadlines_[i]->index_ = i;
  deadlines_.pop_back();
  deadline->index_ = CoarseDeadline::kUnregistered;
}

void CoarseDeadlines::Schedule() {
  if (shut_down_) return;
  waiting_ = true;
  timer_.expires_after(kTick);
  timer_.async_wait([this](beast::error_code ec) {
    waiting_ = false;
    if (ec == net::error::operation_aborted && shut_down_) return;
    Sweep();
    if (!deadlines_.empty()) Schedule();
  });
}

void CoarseDeadlines::Sweep() {
  const CoarseDeadline::Clock::time_point now = CoarseDeadline::Clock::now();
  // Backwards, so that Remove's swap with the last entry moves one already looked at.
  for (size_t i = deadlines_.size(); i-- > 0;) {
    CoarseDeadline* d = deadlines_[i];
    if (d->when_ == CoarseDeadline::Clock::time_point::max()) {
      Remove(d);
    } else if (d->when_ <= now) {
      Remove(d);
      d->when_ = CoarseDeadline::Clock::time_point::max();
      d->fired_ = true;
      beast::error_code ignored;
      d->socket_.close(ignored);
    }
  }
}

CoarseDeadline::CoarseDeadline(TcpStream::socket_type& socket)
    : deadlines_(net::use_service<CoarseDeadlines>(socket.get_executor().context())),
      socket_(socket) {}

CoarseDeadline::~CoarseDeadline() {
  if (index_ != kUnregistered) deadlines_.Remove(this);
}

}  // namespace bmas
