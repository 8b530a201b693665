#include "common/coarse_deadline.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <memory>

#include "common/tcp_pair_testing.h"

namespace bmas {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// One read on `stream` under `deadline`, armed for `after`: the read's error, as the request
// paths see it.
awaitable<void> ReadUnder(TcpStream& stream, CoarseDeadline& deadline, Clock::duration after,
                          beast::error_code& ec, Clock::time_point& ended) {
  std::array<char, 16> bytes;
  deadline.Arm(after);
  co_await stream.async_read_some(net::buffer(bytes), net::redirect_error(use_awaitable, ec));
  deadline.Disarm(ec);
  ended = Clock::now();
}

TEST(CoarseDeadlineTest, APassedDeadlineEndsThePendingReadAsATimeout) {
  TcpPair p;
  CoarseDeadline deadline(p.server.socket());
  beast::error_code ec;
  Clock::time_point ended;
  const Clock::time_point start = Clock::now();
  net::co_spawn(p.io, ReadUnder(p.server, deadline, 100ms, ec, ended), net::detached);
  p.io.run();  // ends: the read failed and the deadline's timer stopped with nothing armed
  EXPECT_EQ(ec, beast::error::timeout) << ec.message();
  EXPECT_TRUE(deadline.fired());
  EXPECT_FALSE(p.server.socket().is_open());
  // Not before the deadline, and about one tick after it at most (generous for a busy machine).
  EXPECT_GE(ended - start, 100ms);
  EXPECT_LT(ended - start, 100ms + 20 * CoarseDeadlines::kTick);
  EXPECT_EQ(net::use_service<CoarseDeadlines>(p.io).size(), 0u);
}

TEST(CoarseDeadlineTest, AReadThatCompletesInTimeKeepsItsSocket) {
  TcpPair p;
  CoarseDeadline deadline(p.server.socket());
  beast::error_code ec;
  Clock::time_point ended;
  net::co_spawn(p.io, ReadUnder(p.server, deadline, 150ms, ec, ended), net::detached);
  net::write(p.client.socket(), net::buffer(std::string("hello")));
  // Run past the deadline: the disarmed one must not close the socket.
  net::steady_timer later(p.io, 400ms);
  later.async_wait([](beast::error_code) {});
  p.io.run();
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_FALSE(deadline.fired());
  EXPECT_TRUE(p.server.socket().is_open());
}

TEST(CoarseDeadlineTest, ReArmingMovesTheDeadlineAndClearsFired) {
  TcpPair p;
  CoarseDeadline deadline(p.server.socket());
  beast::error_code ec;
  Clock::time_point ended;
  // Each read is answered before its deadline: a keep-alive connection's reads, one by one.
  net::co_spawn(
      p.io,
      [&]() -> awaitable<void> {
        for (int i = 0; i < 5; ++i) {
          co_await ReadUnder(p.server, deadline, 200ms, ec, ended);
          if (ec) co_return;
        }
      },
      net::detached);
  net::co_spawn(
      p.io,
      [&]() -> awaitable<void> {
        net::steady_timer t(p.io);
        for (int i = 0; i < 5; ++i) {
          t.expires_after(100ms);  // 500 ms in all: past one deadline, not past any re-armed
          co_await t.async_wait(use_awaitable);
          co_await net::async_write(p.client.socket(), net::buffer(std::string("x")),
                                    use_awaitable);
        }
      },
      net::detached);
  p.io.run();
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_FALSE(deadline.fired());
  EXPECT_TRUE(p.server.socket().is_open());
}

TEST(CoarseDeadlineTest, OnlyTheDeadlinesThatPassedFire) {
  net::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  constexpr int kPairs = 6;
  std::vector<std::unique_ptr<TcpStream>> clients, servers;
  std::vector<std::unique_ptr<CoarseDeadline>> deadlines;
  std::array<beast::error_code, kPairs> errors;
  std::array<Clock::time_point, kPairs> ended;
  for (int i = 0; i < kPairs; ++i) {
    clients.push_back(std::make_unique<TcpStream>(io));
    servers.push_back(std::make_unique<TcpStream>(io));
    clients.back()->socket().connect(acceptor.local_endpoint());
    acceptor.accept(servers.back()->socket());
    deadlines.push_back(std::make_unique<CoarseDeadline>(servers.back()->socket()));
    // Even ones pass at 100 ms; odd ones are answered at 150 ms, before their 1 s.
    net::co_spawn(io,
                  ReadUnder(*servers[i], *deadlines[i], i % 2 == 0 ? 100ms : 1s, errors[i],
                            ended[i]),
                  net::detached);
  }
  net::steady_timer answer(io, 150ms);
  answer.async_wait([&](beast::error_code) {
    for (int i = 1; i < kPairs; i += 2) net::write(clients[i]->socket(), net::buffer("y", 1));
  });
  io.run();
  for (int i = 0; i < kPairs; ++i) {
    if (i % 2 == 0) {
      EXPECT_EQ(errors[i], beast::error::timeout) << i;
      EXPECT_FALSE(servers[i]->socket().is_open()) << i;
    } else {
      EXPECT_FALSE(errors[i]) << i << ": " << errors[i].message();
      EXPECT_TRUE(servers[i]->socket().is_open()) << i;
    }
  }
}

TEST(CoarseDeadlineTest, ADeadlineDestroyedWhileArmedIsForgotten) {
  TcpPair p;
  {
    CoarseDeadline deadline(p.server.socket());
    deadline.Arm(10ms);
    EXPECT_EQ(net::use_service<CoarseDeadlines>(p.io).size(), 1u);
  }
  EXPECT_EQ(net::use_service<CoarseDeadlines>(p.io).size(), 0u);
  p.io.run();  // the timer's tick finds nothing, and closes nothing
  EXPECT_TRUE(p.server.socket().is_open());
}

}  // namespace
}  // namespace bmas
