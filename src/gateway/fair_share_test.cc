#include "gateway/fair_share.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gateway/admission.h"

namespace bmas::gateway {
namespace {

const std::string kEngine = "http://127.0.0.1:8000";
const std::vector<std::string> kModels = {"m"};

// A report of users waiting for model "m" (user, weight, queued, charged) and the engine's
// requests in flight.
FairReport Report(std::vector<FairReport::User> users, int64_t in_flight) {
  FairReport r;
  for (auto& u : users) u.model = "m";
  r.users = std::move(users);
  r.backends.push_back(FairReport::Backend{kEngine, in_flight});
  return r;
}

GatewayReport Put(const std::string& gateway, int64_t at_ms, const FairReport& r) {
  return GatewayReport{gateway, at_ms, EncodeFairReport(r)};
}

// Two snapshots a refresh apart, the second at `now`: a gateway counts once its report has
// been seen to change.
void Exchange(FairShare& share, const std::vector<GatewayReport>& reports, double now) {
  std::vector<GatewayReport> before = reports;
  for (auto& r : before) r.at_ms -= 1;
  share.Update(before, now - 0.1);
  share.Update(reports, now);
}

TEST(FairReportTest, EncodesAndDecodesEveryFieldWithOddCharacters) {
  FairReport r;
  r.users.push_back({"model\twith%tab", "w\n2", 2.5, 7, 123456789012});
  r.users.push_back({"m", "w1", 1, 0, 0});
  r.backends.push_back({"http://h:1/%41", 31});
  EXPECT_EQ(DecodeFairReport(EncodeFairReport(r)), r);
  EXPECT_EQ(DecodeFairReport(EncodeFairReport(FairReport{})), FairReport{});
}

TEST(FairReportTest, UnreadableBodiesDecodeToNothing) {
  EXPECT_FALSE(DecodeFairReport(""));
  EXPECT_FALSE(DecodeFairReport("fair2\n"));
  EXPECT_FALSE(DecodeFairReport("fair1\nu\tm\tw\tx\t1\t2\n"));  // weight not a number
  EXPECT_FALSE(DecodeFairReport("fair1\nb\th\n"));               // a field short
  EXPECT_FALSE(DecodeFairReport("fair1\nb\th%zz\t1\n"));         // a bad escape
}

TEST(FairShareTest, AloneOnABackendTakesEverySlot) {
  FairShare share("a", 1.0);
  EXPECT_EQ(share.Slots(kEngine, 32, kModels), 32);  // before any report
  share.Update({Put("a", 1, Report({{"", "w1", 1, 40, 0}}, 32))}, 0);
  EXPECT_EQ(share.Slots(kEngine, 32, kModels), 32);
}

TEST(FairShareTest, AReportThatNeverChangesNeverCounts) {
  // A stopped gateway's report, still in the store when this gateway starts.
  FairShare a("a", 1.0);
  const GatewayReport old = Put("z", 5, Report({{"", "w2", 2, 30, 0}}, 32));
  a.Update({Put("a", 1, Report({{"", "w1", 1, 20, 0}}, 0)), old}, 0);
  EXPECT_EQ(a.Slots(kEngine, 32, kModels), 32);
  a.Update({Put("a", 2, Report({{"", "w1", 1, 20, 0}}, 0)), old}, 0.2);
  EXPECT_EQ(a.LiveGateways(), std::vector<std::string>{"a"});
  EXPECT_EQ(a.Slots(kEngine, 32, kModels), 32);
}

// The L3 case: w1 (weight 1) only on gateway a, w2 (weight 2) only on gateway b, both
// backlogged on one engine of 32 slots: a gets a third, b two thirds.
TEST(FairShareTest, PinnedUsersSplitTheSlotsByTheirWeights) {
  const std::vector<GatewayReport> reports = {Put("a", 1, Report({{"", "w1", 1, 20, 0}}, 11)),
                                              Put("b", 1, Report({{"", "w2", 2, 11, 0}}, 21))};
  FairShare a("a", 1.0), b("b", 1.0);
  Exchange(a, reports, 0);
  Exchange(b, reports, 0);
  EXPECT_EQ(a.Slots(kEngine, 32, kModels), 11);  // 10.67, the larger remainder
  EXPECT_EQ(b.Slots(kEngine, 32, kModels), 21);  // 21.33
  EXPECT_EQ(a.Slots(kEngine, 32, kModels) + b.Slots(kEngine, 32, kModels), 32);
}

TEST(FairShareTest, AUserOnBothGatewaysCountsOnEachByItsQueueThere) {
  // w2 waits 30 on a and 10 on b; w1 waits 10 on b. a: 2 * 3/4 = 1.5; b: 2 * 1/4 + 1 = 1.5.
  const std::vector<GatewayReport> reports = {
      Put("a", 1, Report({{"", "w2", 2, 30, 0}}, 0)),
      Put("b", 1, Report({{"", "w2", 2, 10, 0}, {"", "w1", 1, 10, 0}}, 0))};
  FairShare a("a", 1.0), b("b", 1.0);
  Exchange(a, reports, 0);
  Exchange(b, reports, 0);
  EXPECT_EQ(a.Slots(kEngine, 32, kModels), 16);
  EXPECT_EQ(b.Slots(kEngine, 32, kModels), 16);
}

TEST(FairShareTest, NeverBelowOneSlotWhileBackloggedAndOnlyWhatOthersLeaveWhenNot) {
  FairShare a("a", 1.0);
  // a's user weighs 0.01 against 100: its exact share rounds to 0, but it keeps one slot.
  Exchange(a,
           {Put("a", 1, Report({{"", "tiny", 0.01, 5, 0}}, 0)),
            Put("b", 1, Report({{"", "huge", 100, 50, 0}}, 32))},
           0);
  EXPECT_EQ(a.Slots(kEngine, 32, kModels), 1);
  // With nothing waiting on a, it may fill what the others leave free (32 - 20), at least 1.
  a.Update({Put("a", 2, Report({}, 0)), Put("b", 2, Report({{"", "huge", 100, 50, 0}}, 20))},
           0.1);
  EXPECT_EQ(a.Slots(kEngine, 32, kModels), 12);
  a.Update({Put("a", 3, Report({}, 0)), Put("b", 3, Report({{"", "huge", 100, 50, 0}}, 40))},
           0.2);
  EXPECT_EQ(a.Slots(kEngine, 32, kModels), 1);
}

TEST(FairShareTest, SlotsHeldByGatewaysWithNoBacklogAreNotSplit) {
  FairShare a("a", 1.0);
  Exchange(a,
           {Put("a", 1, Report({{"", "w1", 1, 9, 0}}, 0)),
            Put("b", 1, Report({{"", "w2", 1, 9, 0}}, 0)), Put("c", 1, Report({}, 8))},
           0);
  EXPECT_EQ(a.Slots(kEngine, 32, kModels), 12);  // (32 - 8) / 2
}

TEST(FairShareTest, OtherBackendsAndModelsDoNotCount) {
  FairShare a("a", 1.0);
  FairReport elsewhere;
  elsewhere.users.push_back({"other-model", "w2", 2, 50, 0});
  elsewhere.backends.push_back({"http://127.0.0.1:9999", 30});
  Exchange(a, {Put("a", 1, Report({{"", "w1", 1, 9, 0}}, 0)), Put("b", 1, elsewhere)}, 0);
  EXPECT_EQ(a.Slots(kEngine, 32, kModels), 32);  // b reports nothing on this engine
  FairReport same_engine = elsewhere;
  same_engine.backends.push_back({kEngine, 4});
  a.Update({Put("a", 2, Report({{"", "w1", 1, 9, 0}}, 0)), Put("b", 2, same_engine)}, 0.1);
  // b's backlog is for a model this engine does not serve: b holds 4 slots, a may fill 28.
  EXPECT_EQ(a.Slots(kEngine, 32, kModels), 28);
}

TEST(FairShareTest, AGatewayThatStopsWritingDropsOut) {
  FairShare a("a", 1.0);
  const GatewayReport b_report = Put("b", 7, Report({{"", "w2", 2, 11, 0}}, 21));
  Exchange(a, {Put("a", 1, Report({{"", "w1", 1, 20, 0}}, 11)), b_report}, 10.0);
  EXPECT_EQ(a.Slots(kEngine, 32, kModels), 11);
  a.Update({Put("a", 2, Report({{"", "w1", 1, 20, 0}}, 11)), b_report}, 10.9);
  EXPECT_EQ(a.LiveGateways(), (std::vector<std::string>{"a", "b"}));
  // b's report has not changed for more than a second of a's time: a is alone again.
  a.Update({Put("a", 3, Report({{"", "w1", 1, 20, 0}}, 11)), b_report}, 11.1);
  EXPECT_EQ(a.LiveGateways(), (std::vector<std::string>{"a"}));
  EXPECT_EQ(a.Slots(kEngine, 32, kModels), 32);
  // It writes again: it counts again.
  a.Update({Put("a", 4, Report({{"", "w1", 1, 20, 0}}, 11)),
            Put("b", 8, Report({{"", "w2", 2, 11, 0}}, 21))},
           11.2);
  EXPECT_EQ(a.Slots(kEngine, 32, kModels), 11);
}

TEST(FairShareTest, RemoteChargesAreOthersNewTokensOnly) {
  FairShare a("a", 1.0);
  // First sight of b: its history is its own, nothing is charged.
  EXPECT_TRUE(a.Update({Put("a", 1, Report({{"", "w1", 1, 1, 500}}, 1)),
                        Put("b", 1, Report({{"", "w2", 2, 1, 1000}}, 1))},
                       0)
                  .empty());
  // b charged w2 300 more and w3 (new in its report) 40; a's own counters never come back.
  auto charges = a.Update({Put("a", 2, Report({{"", "w1", 1, 1, 900}}, 1)),
                           Put("b", 2, Report({{"", "w2", 2, 1, 1300}, {"", "w3", 1, 1, 40}}, 1))},
                          0.2);
  EXPECT_EQ(charges, (std::vector<RemoteCharge>{{"m", "w2", 2, 300}, {"m", "w3", 1, 40}}));
  // An unchanged report charges nothing again; a counter that went down charges nothing.
  EXPECT_TRUE(a.Update({Put("a", 3, Report({}, 0)),
                        Put("b", 2, Report({{"", "w2", 2, 1, 1300}, {"", "w3", 1, 1, 40}}, 1))},
                       0.4)
                  .empty());
  EXPECT_TRUE(a.Update({Put("a", 4, Report({}, 0)), Put("b", 3, Report({{"", "w2", 2, 1, 10}}, 1))},
                       0.6)
                  .empty());
  EXPECT_EQ(a.Update({Put("a", 5, Report({}, 0)), Put("b", 4, Report({{"", "w2", 2, 1, 25}}, 1))},
                     0.8),
            (std::vector<RemoteCharge>{{"m", "w2", 2, 15}}));
}

// Admission's side: the report it publishes, remote charges in the queue's order, and the
// slot share as its admission limit.
TEST(FairShareTest, AdmissionReportsChargesAndHoldsToItsShare) {
  Admission admission(AdmissionOptions{}, RoutingPolicy::kLeastLoad);
  admission.AddBackend(kEngine);
  admission.SetModels(kEngine, kModels, 4);
  admission.SetHealthy(kEngine, true);
  admission.SetSlotLimit(kEngine, 2);
  for (int i = 0; i < 3; ++i) {
    admission.Enqueue(AdmissionRequest{.model = "m", .user = "w1", .weight = 1,
                                       .prompt_estimate = 10},
                      0);
  }
  EXPECT_EQ(admission.Dispatch("m", 0).size(), 2u);  // the share, not the capacity of 4
  admission.Charge("m", "w1", 1, 5);
  FairReport report = admission.Report();
  ASSERT_EQ(report.users.size(), 1u);
  EXPECT_EQ(report.users[0], (FairReport::User{"m", "w1", 1, 1, 25}));
  EXPECT_EQ(report.backends, (std::vector<FairReport::Backend>{{kEngine, 2}}));

  // w2 arrives (its counter lifted to w1's); then another gateway serves w1 far more: w2
  // goes first although w1's waiting request came first.
  const Ticket w2 = admission.Enqueue(
      AdmissionRequest{.model = "m", .user = "w2", .weight = 1, .prompt_estimate = 10}, 1);
  admission.ChargeRemote(RemoteCharge{"m", "w1", 1, 1000});
  admission.SetSlotLimit(kEngine, 3);
  EXPECT_EQ(admission.Dispatch("m", 1), (std::vector<Admit>{{w2, kEngine}}));
  // Remote charges are not this gateway's to report.
  EXPECT_EQ(admission.Report().users.size(), 2u);
  for (const auto& u : admission.Report().users) {
    EXPECT_EQ(u.charged, u.user == "w1" ? 25 : 10) << u.user;
  }
  admission.SetSlotLimit(kEngine, 0);  // lifted: the capacity of 4
  EXPECT_EQ(admission.Dispatch("m", 1).size(), 1u);
}

}  // namespace
}  // namespace bmas::gateway
