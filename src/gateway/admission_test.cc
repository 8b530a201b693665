#include "gateway/admission.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace bmas::gateway {
namespace {

constexpr char kModel[] = "m";

// An Admission in virtual time with round-robin routing, so that picks are predictable.
class AdmissionTest : public ::testing::Test {
 protected:
  explicit AdmissionTest(AdmissionOptions options = {})
      : admission_(options, RoutingPolicy::kRoundRobin) {}

  // A healthy backend serving kModel with `capacity`.
  void AddBackend(const std::string& id, int capacity) {
    admission_.AddBackend(id);
    admission_.SetModels(id, {kModel}, capacity);
    admission_.SetHealthy(id, true);
  }
  Ticket Enqueue(const std::string& user, double weight = 1, int64_t prompt = 10) {
    AdmissionRequest r;
    r.model = kModel;
    r.user = user;
    r.weight = weight;
    r.prompt_estimate = prompt;
    return admission_.Enqueue(std::move(r), now_);
  }
  // Enqueues a request and dispatches; the admissions that came of it.
  std::vector<Admit> Send(const std::string& user) {
    const Ticket t = Enqueue(user);
    user_of_[t] = user;
    return admission_.Dispatch(kModel, now_);
  }
  int InFlight(const std::string& id) { return admission_.backend(id)->state.in_flight; }
  int UserInFlight(const std::string& id, const std::string& user) {
    const auto& u = admission_.backend(id)->user_in_flight;
    auto it = u.find(user);
    return it == u.end() ? 0 : it->second;
  }

  Admission admission_;
  double now_ = 1000;
  std::map<Ticket, std::string> user_of_;
};

TEST_F(AdmissionTest, NothingIsAdmittedBeforeTheBackendsFirstCheckPasses) {
  admission_.AddBackend("a");
  admission_.SetModels("a", {kModel}, 4);
  const Ticket t = Enqueue("alice");
  EXPECT_TRUE(admission_.Dispatch(kModel, now_).empty());
  EXPECT_EQ(admission_.queued(kModel), 1u);
  EXPECT_FALSE(admission_.AnyOpen(kModel));

  EXPECT_TRUE(admission_.SetHealthy("a", true));
  EXPECT_FALSE(admission_.SetHealthy("a", true)) << "no change";
  EXPECT_EQ(admission_.DispatchAll(now_), (std::vector<Admit>{{t, "a"}}));
  EXPECT_EQ(InFlight("a"), 1);
  EXPECT_EQ(admission_.queued(kModel), 0u);
}

TEST_F(AdmissionTest, CapacityIsRespectedAndAReleaseAdmitsTheNext) {
  AddBackend("a", 2);
  EXPECT_EQ(Send("alice").size(), 1u);
  EXPECT_EQ(Send("alice").size(), 1u);
  const Ticket third = Enqueue("alice");
  EXPECT_TRUE(admission_.Dispatch(kModel, now_).empty()) << "a is full";
  EXPECT_EQ(InFlight("a"), 2);
  EXPECT_EQ(admission_.Release("a", "alice", kModel, now_), (std::vector<Admit>{{third, "a"}}));
  EXPECT_EQ(InFlight("a"), 2);
}

TEST_F(AdmissionTest, TheReserveIsKeptForOtherUsersWhileTheyAreActive) {
  AddBackend("a", 4);  // limit per user while others are active: 4 - floor(4 * 0.25) = 3
  EXPECT_EQ(Send("bob").size(), 1u);
  admission_.Release("a", "bob", kModel, now_);  // bob is active for the window
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Send("alice").size(), 1u) << i;
  EXPECT_TRUE(Send("alice").empty()) << "the fourth place is bob's reserve";
  EXPECT_EQ(UserInFlight("a", "alice"), 3);
  EXPECT_EQ(Send("bob").size(), 1u) << "bob gets the reserve at once";
  EXPECT_EQ(InFlight("a"), 4);
}

TEST_F(AdmissionTest, TheReserveIsFreedOnceOthersHaveBeenIdleForTheWindow) {
  AddBackend("a", 4);
  EXPECT_EQ(Send("bob").size(), 1u);
  admission_.Release("a", "bob", kModel, now_);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Send("alice").size(), 1u);
  EXPECT_TRUE(Send("alice").empty());
  now_ += 31;  // bob's last request is older than the window
  EXPECT_EQ(admission_.Dispatch(kModel, now_).size(), 1u) << "alice may take the whole backend";
  EXPECT_EQ(UserInFlight("a", "alice"), 4);
}

TEST_F(AdmissionTest, WaitingUsersAreServedFairlyNotInArrivalOrder) {
  AddBackend("a", 1);
  EXPECT_EQ(Send("alice").size(), 1u);  // a is now full
  std::vector<Ticket> alice, bob;
  for (int i = 0; i < 3; ++i) alice.push_back(Enqueue("alice"));
  for (int i = 0; i < 3; ++i) bob.push_back(Enqueue("bob"));
  // Each admission charges the prompt estimate, and bob's counter starts level with alice's:
  // they alternate (ties go to the older ticket), not in the order they arrived.
  std::vector<Ticket> order;
  std::string last = "alice";
  for (int i = 0; i < 6; ++i) {
    std::vector<Admit> next = admission_.Release("a", last, kModel, now_);
    ASSERT_EQ(next.size(), 1u) << i;
    order.push_back(next[0].ticket);
    last = std::find(alice.begin(), alice.end(), next[0].ticket) != alice.end() ? "alice" : "bob";
  }
  EXPECT_EQ(order, (std::vector<Ticket>{alice[0], bob[0], alice[1], bob[1], alice[2], bob[2]}));
}

TEST_F(AdmissionTest, ADrainingBackendTakesNothingNewAndGoesWhenItsLastRequestEnds) {
  AddBackend("a", 4);
  AddBackend("b", 4);
  ASSERT_TRUE(admission_.SetDraining("a", true));
  std::vector<Admit> got;
  for (int i = 0; i < 3; ++i) {
    for (const Admit& a : Send("alice")) got.push_back(a);
  }
  ASSERT_EQ(got.size(), 3u);
  for (const Admit& a : got) EXPECT_EQ(a.backend, "b");

  // A backend drained with a request in flight is removed when that request ends.
  ASSERT_TRUE(admission_.SetDraining("a", false));
  ASSERT_TRUE(admission_.SetDraining("b", true));
  const std::vector<Admit> on_a = Send("carol");
  ASSERT_EQ(on_a.size(), 1u);
  ASSERT_EQ(on_a[0].backend, "a");
  admission_.SetDraining("a", true);
  EXPECT_NE(admission_.backend("a"), nullptr);
  admission_.Release("a", "carol", kModel, now_);
  EXPECT_EQ(admission_.backend("a"), nullptr);
  EXPECT_NE(admission_.backend("b"), nullptr) << "b still has requests in flight";
}

TEST_F(AdmissionTest, ABackendDownTakesNothingAndWaitersGoWhenOneComesUp) {
  AddBackend("a", 1);
  ASSERT_EQ(Send("alice").size(), 1u);
  EXPECT_TRUE(admission_.SetHealthy("a", false));
  const Ticket waiting = Enqueue("bob");
  EXPECT_TRUE(admission_.Release("a", "alice", kModel, now_).empty()) << "a is down";
  EXPECT_EQ(InFlight("a"), 0);
  AddBackend("b", 1);  // its first check passed
  EXPECT_EQ(admission_.DispatchAll(now_), (std::vector<Admit>{{waiting, "b"}}));
}

TEST_F(AdmissionTest, ARemovedTicketIsNeverAdmitted) {
  AddBackend("a", 1);
  ASSERT_EQ(Send("alice").size(), 1u);
  const Ticket gone = Enqueue("bob");
  const Ticket stays = Enqueue("carol");
  EXPECT_TRUE(admission_.Remove(gone));
  EXPECT_FALSE(admission_.Remove(gone));
  EXPECT_EQ(admission_.Release("a", "alice", kModel, now_), (std::vector<Admit>{{stays, "a"}}));
  EXPECT_EQ(admission_.queued(), 0u);
}

TEST_F(AdmissionTest, OutstandingTokensAreCountedUntilTheBackendIsIdle) {
  AddBackend("a", 4);
  Enqueue("alice", 1, 100);
  Enqueue("bob", 1, 50);
  ASSERT_EQ(admission_.Dispatch(kModel, now_).size(), 2u);
  EXPECT_EQ(admission_.backend("a")->state.outstanding_tokens, 150);
  admission_.Release("a", "alice", kModel, now_);
  EXPECT_EQ(admission_.backend("a")->state.outstanding_tokens, 150);
  admission_.Release("a", "bob", kModel, now_);
  EXPECT_EQ(admission_.backend("a")->state.outstanding_tokens, 0);
}

TEST_F(AdmissionTest, ChargingTokensMovesAUserBack) {
  AddBackend("a", 1);
  ASSERT_EQ(Send("carol").size(), 1u);
  const Ticket alice = Enqueue("alice");
  const Ticket bob = Enqueue("bob");
  admission_.Charge(kModel, "alice", 1, 1000);  // alice's earlier answer was long
  EXPECT_EQ(admission_.Release("a", "carol", kModel, now_), (std::vector<Admit>{{bob, "a"}}));
  EXPECT_EQ(admission_.Release("a", "bob", kModel, now_), (std::vector<Admit>{{alice, "a"}}));
  EXPECT_EQ(admission_.QueuedByModel(),
            (std::vector<std::pair<std::string, size_t>>{{kModel, 0}}));
}

class FcfsAdmissionTest : public AdmissionTest {
 protected:
  FcfsAdmissionTest() : AdmissionTest(AdmissionOptions{.fair = false}) {}
};

TEST_F(FcfsAdmissionTest, WaitingRequestsGoInArrivalOrder) {
  AddBackend("a", 1);
  ASSERT_EQ(Send("alice").size(), 1u);
  const Ticket first = Enqueue("alice");
  const Ticket second = Enqueue("bob");
  EXPECT_EQ(admission_.Release("a", "alice", kModel, now_), (std::vector<Admit>{{first, "a"}}));
  EXPECT_EQ(admission_.Release("a", "alice", kModel, now_), (std::vector<Admit>{{second, "a"}}));
}

}  // namespace

TEST(AdmissionOldestWaitTest, TheOldestWaitingRequestsWaitIsKnownPerModel) {
  Admission a(AdmissionOptions{}, RoutingPolicy::kRoundRobin);
  EXPECT_EQ(a.OldestWait("m", 10), 0);
  a.Enqueue(AdmissionRequest{.model = "m", .user = "u"}, 10);
  a.Enqueue(AdmissionRequest{.model = "m", .user = "v"}, 12);
  EXPECT_DOUBLE_EQ(a.OldestWait("m", 15), 5);  // no backend: both still wait
  EXPECT_EQ(a.OldestWait("other", 15), 0);
}


TEST_F(AdmissionTest, AResumedStreamGoesBeforeNewRequestsOfItsModel) {
  AddBackend("b1", 1);
  std::vector<Admit> first = Send("alice");  // takes the only place
  ASSERT_EQ(first.size(), 1u);
  const Ticket queued_new = admission_.Enqueue(AdmissionRequest{.model = std::string(kModel), .user = "bob"}, 1);
  const Ticket resumed = admission_.Enqueue(
      AdmissionRequest{.model = std::string(kModel), .user = "alice", .resumed = true}, 2);
  EXPECT_TRUE(admission_.Dispatch(std::string(kModel), 2).empty());
  std::vector<Admit> next = admission_.Release("b1", "alice", std::string(kModel), 3);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].ticket, resumed) << "bob's new request waits for the resumed stream";
  next = admission_.Release("b1", "alice", std::string(kModel), 4);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].ticket, queued_new);
}

TEST_F(AdmissionTest, ARequestIsAdmittedAtOnceOnlyWhenNothingWaitsAndABackendCanTakeIt) {
  const AdmissionRequest alice{.model = kModel, .user = "alice", .prompt_estimate = 10};
  EXPECT_EQ(admission_.AdmitAtOnce(alice.view(), now_), nullptr) << "no backend";
  AddBackend("a", 1);
  const std::string* id = admission_.AdmitAtOnce(alice.view(), now_);
  ASSERT_NE(id, nullptr);
  EXPECT_EQ(*id, "a");
  EXPECT_EQ(InFlight("a"), 1);
  EXPECT_EQ(admission_.backend("a")->state.outstanding_tokens, 10);
  EXPECT_EQ(admission_.AdmitAtOnce(alice.view(), now_), nullptr) << "a is full";
  const Ticket waiting = Enqueue("bob");
  EXPECT_EQ(admission_.Release("a", "alice", kModel, now_), (std::vector<Admit>{{waiting, "a"}}));
  admission_.Release("a", "bob", kModel, now_);
  EXPECT_NE(admission_.AdmitAtOnce(alice.view(), now_), nullptr);
}

TEST_F(AdmissionTest, ARequestThatTheReserveHoldsBackIsNotAdmittedAtOnce) {
  AddBackend("a", 4);  // alice may hold 3 while bob is active
  EXPECT_EQ(Send("bob").size(), 1u);
  admission_.Release("a", "bob", kModel, now_);
  const AdmissionRequest alice{.model = kModel, .user = "alice"};
  for (int i = 0; i < 3; ++i) EXPECT_NE(admission_.AdmitAtOnce(alice.view(), now_), nullptr) << i;
  EXPECT_EQ(admission_.AdmitAtOnce(alice.view(), now_), nullptr) << "the fourth place is bob's reserve";
  EXPECT_EQ(UserInFlight("a", "alice"), 3);
}

// Admitting at once is a shortcut, not a policy: a workload of arrivals, releases and charges
// driven through Enqueue + Dispatch alone, and through AdmitAtOnce first, makes the same
// decisions (which request goes where, and when) and the same charges.
TEST(AdmitAtOnceTest, DecidesAsEnqueueThenDispatchDoes) {
  Admission queued_only({}, RoutingPolicy::kLeastLoad), shortcut({}, RoutingPolicy::kLeastLoad);
  for (Admission* a : {&queued_only, &shortcut}) {
    for (const char* id : {"b1", "b2"}) {
      a->AddBackend(id);
      a->SetModels(id, {kModel}, 3);
      a->SetHealthy(id, true);
    }
  }
  const std::string users[] = {"ann", "bo", "cy"};
  const double weights[] = {1, 2, 0.5};
  // Per instance: ticket -> request number, and where each request in flight went.
  struct Side {
    Admission* a;
    std::map<Ticket, int> request_of;
    std::map<int, std::string> placed;
    std::vector<std::string> log;  // "request->backend", in the order of admission
  };
  Side sides[] = {{&queued_only, {}, {}, {}}, {&shortcut, {}, {}, {}}};
  auto admit = [](Side& side, int n, const std::string& backend) {
    side.placed[n] = backend;
    side.log.push_back(std::to_string(n) + "->" + backend);
  };
  auto record = [&admit](Side& side, const std::vector<Admit>& admits) {
    for (const Admit& a : admits) admit(side, side.request_of.at(a.ticket), a.backend);
  };
  uint64_t seed = 7;
  auto next = [&seed](uint64_t bound) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (seed >> 33) % bound;
  };
  double now = 0;
  std::map<int, int> user_of;  // request -> user
  for (int n = 0; n < 3000; ++n) {
    now += static_cast<double>(next(4000)) / 1000;  // up to 4 s: users go idle past the window
    if (next(10) < 4 || sides[0].placed.empty()) {  // a request arrives
      const int u = static_cast<int>(next(3));
      user_of[n] = u;
      const AdmissionRequest request{.model = kModel,
                                     .user = users[u],
                                     .weight = weights[u],
                                     .prompt_estimate = static_cast<int64_t>(next(50))};
      for (Side& side : sides) {
        const std::string* id = side.a == &shortcut ? side.a->AdmitAtOnce(request.view(), now) : nullptr;
        if (id != nullptr) {
          admit(side, n, *id);
        } else {
          side.request_of[side.a->Enqueue(request, now)] = n;
          record(side, side.a->Dispatch(kModel, now));
        }
      }
    } else {  // one in flight ends (the same on both sides: their logs are equal)
      auto it = sides[0].placed.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(next(sides[0].placed.size())));
      const int r = it->first;
      const int u = user_of.at(r);
      const int64_t served = static_cast<int64_t>(next(200));
      for (Side& side : sides) {
        side.a->Charge(kModel, users[u], weights[u], served);
        const std::string backend = side.placed.at(r);
        side.placed.erase(r);
        record(side, side.a->Release(backend, users[u], kModel, now));
      }
    }
    ASSERT_EQ(sides[0].log, sides[1].log) << "request " << n;
  }
  EXPECT_GT(sides[0].log.size(), 1000u);
  const size_t queued = sides[1].request_of.size();  // not admitted at once
  EXPECT_GT(queued, 100u) << "the workload should also make requests wait";
  EXPECT_LT(queued, sides[1].log.size() - 100) << "and admit many at once";
  auto sorted = [](FairReport report) {
    std::sort(report.users.begin(), report.users.end(),
              [](const auto& x, const auto& y) { return x.user < y.user; });
    return report;
  };
  EXPECT_EQ(sorted(queued_only.Report()), sorted(shortcut.Report()));
}

}  // namespace bmas::gateway
