#include "gateway/fair_queue.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace bmas::gateway {
namespace {

const auto kAll = [](const std::string&) { return true; };

// Tickets are numbered so that the user can be read back: ticket = 1000000 * (user + 1) + n.
Ticket TicketOf(int user, int n) { return 1000000ull * (user + 1) + n; }
int UserOf(Ticket t) { return static_cast<int>(t / 1000000) - 1; }

struct ShareCase {
  const char* name;
  double weight_a, weight_b;
  int64_t cost_a, cost_b;    // tokens charged per served request
  double expected_b_over_a;  // served tokens
};

class FairShareTest : public testing::TestWithParam<ShareCase> {};

TEST_P(FairShareTest, BackloggedUsersGetTokensInProportionToWeight) {
  const ShareCase& c = GetParam();
  const std::string users[] = {"a", "b"};
  const double weights[] = {c.weight_a, c.weight_b};
  const int64_t costs[] = {c.cost_a, c.cost_b};
  FairQueue q(true);
  for (int n = 0; n < 5000; ++n) {
    for (int u = 0; u < 2; ++u) q.Push(TicketOf(u, n), users[u], weights[u]);
  }
  int64_t served[2] = {0, 0};
  for (int i = 0; i < 4000; ++i) {
    auto t = q.PopNext(kAll);
    ASSERT_TRUE(t);
    const int u = UserOf(*t);
    q.Charge(users[u], weights[u], costs[u]);
    served[u] += costs[u];
  }
  ASSERT_GT(served[0], 0);
  const double ratio = static_cast<double>(served[1]) / static_cast<double>(served[0]);
  EXPECT_NEAR(ratio, c.expected_b_over_a, 0.02 * c.expected_b_over_a);
  // VTC's bound: backlogged counters never drift apart by more than one request's charge.
  EXPECT_LE(std::abs(q.counter("a") - q.counter("b")),
            std::max(c.cost_a / c.weight_a, c.cost_b / c.weight_b));
}

INSTANTIATE_TEST_SUITE_P(Cases, FairShareTest,
                         testing::Values(ShareCase{"EqualWeights", 1, 1, 100, 100, 1.0},
                                         ShareCase{"OneToThree", 1, 3, 100, 100, 3.0},
                                         ShareCase{"OneToThreeUnevenCosts", 1, 3, 37, 250, 3.0},
                                         ShareCase{"TokensNotRequests", 1, 1, 10, 100, 1.0},
                                         ShareCase{"HalfWeight", 2, 1, 64, 64, 0.5}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FairQueueTest, FcfsModeIgnoresShares) {
  FairQueue q(false);
  for (int n = 0; n < 100; ++n) {
    q.Push(TicketOf(0, n), "a", 1);
    q.Push(TicketOf(1, n), "b", 3);
  }
  for (int n = 0; n < 100; ++n) {
    EXPECT_EQ(q.PopNext(kAll), TicketOf(0, n));
    q.Charge("a", 1, 1000);
    EXPECT_EQ(q.PopNext(kAll), TicketOf(1, n));
    q.Charge("b", 3, 1);
  }
  EXPECT_EQ(q.size(), 0u);
}

TEST(FairQueueTest, NoStarvationBehindALongQueue) {
  FairQueue q(true);
  for (int n = 0; n < 1000; ++n) q.Push(TicketOf(0, n), "heavy", 1);
  q.Push(TicketOf(1, 0), "light", 1);
  std::vector<Ticket> order;
  for (int i = 0; i < 3; ++i) {
    auto t = q.PopNext(kAll);
    ASSERT_TRUE(t);
    order.push_back(*t);
    q.Charge(UserOf(*t) == 0 ? "heavy" : "light", 1, 100);
  }
  // Both start at 0 and heavy's ticket is older, so heavy goes first, then light.
  EXPECT_EQ(order, (std::vector<Ticket>{TicketOf(0, 0), TicketOf(1, 0), TicketOf(0, 1)}));
}

TEST(FairQueueTest, LateJoinerGetsNoCreditForIdleTime) {
  FairQueue q(true);
  for (int n = 0; n < 1000; ++n) q.Push(TicketOf(0, n), "a", 1);
  // a is served 10,000 tokens while b is idle.
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(UserOf(*q.PopNext(kAll)), 0);
    q.Charge("a", 1, 100);
  }
  ASSERT_EQ(q.counter("a"), 10000);
  for (int n = 0; n < 1000; ++n) q.Push(TicketOf(1, n), "b", 1);
  EXPECT_EQ(q.counter("b"), 10000);  // lifted to the smallest backlogged counter

  int served_a = 0;
  for (int i = 0; i < 20; ++i) {
    const int u = UserOf(*q.PopNext(kAll));
    served_a += u == 0;
    q.Charge(u == 0 ? "a" : "b", 1, 100);
  }
  EXPECT_GE(served_a, 9);
  EXPECT_LE(served_a, 11);
}

TEST(FairQueueTest, ReturningUserIsLiftedToTheBackloggedMinimum) {
  FairQueue q(true);
  q.Push(1, "b", 1);
  ASSERT_EQ(q.PopNext(kAll), 1u);
  q.Charge("b", 1, 500);  // b has history, then goes idle
  for (int n = 0; n < 100; ++n) q.Push(TicketOf(0, n), "a", 1);
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(UserOf(*q.PopNext(kAll)), 0);  // a is lifted to the floor (0) and catches up
    q.Charge("a", 1, 100);
  }
  // a is far ahead of b's 500 now; b returning is lifted to a's counter, not kept at 500.
  q.Push(2, "b", 1);
  EXPECT_EQ(q.counter("b"), q.counter("a"));
}

TEST(FairQueueTest, JoinerOfAnEmptyQueueIsLiftedToTheLastServedCounter) {
  FairQueue q(true);
  for (int n = 0; n < 10; ++n) q.Push(TicketOf(0, n), "a", 1);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(q.PopNext(kAll));
    q.Charge("a", 1, 100);
  }
  ASSERT_EQ(q.size(), 0u);
  EXPECT_EQ(q.floor(), 900);  // a's counter when its last request was chosen
  q.Push(1, "b", 1);
  EXPECT_EQ(q.counter("b"), 900);
  // A user whose counter is already above the floor keeps it.
  q.Push(2, "a", 1);
  EXPECT_EQ(q.counter("a"), 1000);
}

TEST(FairQueueTest, FcfsWithinAUser) {
  FairQueue q(true);
  q.Push(7, "a", 1);
  q.Push(3, "a", 1);
  q.Push(5, "a", 1);
  EXPECT_EQ(q.queued("a"), 3u);
  EXPECT_EQ(q.PopNext(kAll), 7u);
  EXPECT_EQ(q.PopNext(kAll), 3u);
  EXPECT_EQ(q.PopNext(kAll), 5u);
  EXPECT_EQ(q.PopNext(kAll), std::nullopt);
}

TEST(FairQueueTest, TiesGoToTheOldestTicket) {
  FairQueue q(true);
  q.Push(1, "a", 1);
  q.Push(2, "b", 1);
  q.Push(3, "c", 1);
  q.Push(4, "b", 1);
  ASSERT_TRUE(q.Remove(1));        // reorders the queue's internal list of users
  EXPECT_EQ(q.PopNext(kAll), 2u);  // b and c tie at 0: b's oldest arrived first
  q.Charge("b", 1, 10);
  EXPECT_EQ(q.PopNext(kAll), 3u);
}

TEST(FairQueueTest, EligibleFilterIsRespected) {
  FairQueue q(true);
  q.Push(1, "a", 1);
  q.Push(2, "b", 1);
  q.Charge("b", 1, 1000);  // a has the lower counter but is not eligible
  std::map<std::string, int> calls;
  auto not_a = [&](const std::string& user) {
    ++calls[user];
    return user != "a";
  };
  EXPECT_EQ(q.PopNext(not_a), 2u);
  EXPECT_LE(calls["a"], 1);
  EXPECT_LE(calls["b"], 1);
  EXPECT_EQ(q.PopNext(not_a), std::nullopt);
  EXPECT_EQ(q.size(), 1u);  // a's ticket is still waiting
  EXPECT_EQ(q.PopNext([](const std::string&) { return false; }), std::nullopt);
  EXPECT_EQ(q.PopNext(kAll), 1u);
}

TEST(FairQueueTest, FcfsModeRespectsEligible) {
  FairQueue q(false);
  q.Push(1, "a", 1);
  q.Push(2, "b", 1);
  q.Push(3, "a", 1);
  auto not_a = [](const std::string& user) { return user != "a"; };
  EXPECT_EQ(q.PopNext(not_a), 2u);
  EXPECT_EQ(q.PopNext(not_a), std::nullopt);
  EXPECT_EQ(q.PopNext(kAll), 1u);
}

TEST(FairQueueTest, RemoveTakesATicketOut) {
  FairQueue q(true);
  for (Ticket t = 1; t <= 5; ++t) q.Push(t, "a", 1);
  q.Push(6, "b", 1);
  EXPECT_TRUE(q.Remove(3));
  EXPECT_TRUE(q.Remove(1));  // the front
  EXPECT_FALSE(q.Remove(3));
  EXPECT_FALSE(q.Remove(42));
  EXPECT_TRUE(q.Remove(6));  // b's only ticket: b is no longer backlogged
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(q.queued("a"), 3u);
  EXPECT_EQ(q.queued("b"), 0u);
  std::vector<Ticket> order;
  while (auto t = q.PopNext(kAll)) order.push_back(*t);
  EXPECT_EQ(order, (std::vector<Ticket>{2, 4, 5}));
  EXPECT_FALSE(q.Remove(2));  // popped tickets are no longer queued
}

TEST(FairQueueTest, ManyRemovalsKeepOrder) {
  FairQueue q(true);
  // The oldest ticket stays while most later ones leave: exercises compaction.
  for (Ticket t = 0; t < 1000; ++t) q.Push(t, "a", 1);
  for (Ticket t = 1; t < 1000; ++t) {
    if (t % 10 != 0) {
      EXPECT_TRUE(q.Remove(t));
    }
  }
  EXPECT_EQ(q.size(), 100u);
  for (Ticket t = 0; t < 1000; t += 10) EXPECT_EQ(q.PopNext(kAll), t);
  EXPECT_EQ(q.size(), 0u);
}

TEST(FairQueueTest, ChargeDividesByWeight) {
  FairQueue q(true);
  q.Push(1, "a", 4);
  q.Charge("a", 4, 100);
  EXPECT_EQ(q.counter("a"), 25);
  q.Charge("a", 4, 0);
  q.Charge("a", 4, -5);
  EXPECT_EQ(q.counter("a"), 25);
  EXPECT_EQ(q.counter("nobody"), 0);
}

TEST(FairQueueTest, ForgetsIdleUsersAtTheFloor) {
  FairQueue q(true);
  // A steady user keeps the floor rising; 10,000 one-off users come and go.
  for (int i = 0; i < 10000; ++i) {
    const std::string user = "u" + std::to_string(i);
    q.Push(TicketOf(0, i), "steady", 1);
    q.Push(TicketOf(1, i), user, 1);
    for (int k = 0; k < 2; ++k) {
      auto t = q.PopNext(kAll);
      ASSERT_TRUE(t);
      q.Charge(UserOf(*t) == 0 ? "steady" : user, 1, 10);
    }
  }
  EXPECT_EQ(q.size(), 0u);
  EXPECT_LE(q.known_users_for_test(), 64u);  // a sweep runs at 64 known users
  // Forgetting changed nothing: a returning one-off user is lifted as if remembered.
  q.Push(1, "steady", 1);
  q.Push(2, "u5", 1);
  EXPECT_EQ(q.counter("u5"), q.counter("steady"));
}

TEST(FairQueueTest, ServingAtOnceMovesCountersAsPushThenPopNextDoes) {
  FairQueue pushed(true), at_once(true);
  const std::string users[] = {"a", "b", "c"};
  uint64_t seed = 3;
  auto next = [&seed](uint64_t bound) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (seed >> 33) % bound;
  };
  for (int i = 0; i < 500; ++i) {
    const std::string& user = users[next(3)];
    pushed.Push(static_cast<Ticket>(i), user, 1);
    ASSERT_EQ(pushed.PopNext(kAll), static_cast<Ticket>(i));
    const int64_t tokens = static_cast<int64_t>(next(300));
    const double weight = 0.5 + static_cast<double>(next(3));
    pushed.Charge(user, weight, tokens);
    // Half the time the charge comes with the serve (one look-up), half the time after it.
    if (next(2) == 0) {
      at_once.ServeAtOnce(user, weight, tokens);
    } else {
      at_once.ServeAtOnce(user);
      at_once.Charge(user, weight, tokens);
    }
    ASSERT_EQ(pushed.floor(), at_once.floor()) << i;
    for (const std::string& u : users) ASSERT_EQ(pushed.counter(u), at_once.counter(u)) << i;
  }
}

}  // namespace
}  // namespace bmas::gateway
