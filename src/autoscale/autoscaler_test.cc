#include "autoscale/autoscaler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

namespace bmas::autoscale {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr double kTick = 2;  // the control loop's period, in seconds

AutoscaleSettings Settings(int min, int max) {
  AutoscaleSettings s;
  s.min_replicas = min;
  s.max_replicas = max;
  s.max_in_flight_per_replica = 10;
  s.ttft_slo_ms = 1000;
  return s;
}

ReplicaSnapshot Replica(std::string id, ReplicaState state, double since, int in_flight = 0) {
  return ReplicaSnapshot{std::move(id), state, TimePoint{since}, in_flight};
}

// A deployment driven by the policy in virtual time: the test sets the load; every decision is
// carried out at once (jobs submitted as pending replicas, drained replicas gone).
class Deployment {
 public:
  explicit Deployment(AutoscaleSettings settings) : settings_(std::move(settings)) {}

  void AddReady(const std::string& id, double since = -1000) {
    model_.replicas.push_back(Replica(id, ReplicaState::kReady, since));
  }
  void MakeReady(const std::string& id, double now) {
    for (ReplicaSnapshot& r : model_.replicas) {
      if (r.id == id && r.state != ReplicaState::kReady) r = Replica(id, ReplicaState::kReady, now);
    }
  }
  // Spreads `in_flight` requests over the ready replicas (those left over are queued) and sets
  // the queue.
  void SetLoad(int in_flight, int queued = 0, double oldest_wait = 0) {
    int ready = 0;
    for (const ReplicaSnapshot& r : model_.replicas) ready += r.state == ReplicaState::kReady;
    int left = in_flight;
    for (ReplicaSnapshot& r : model_.replicas) {
      if (r.state != ReplicaState::kReady) continue;
      r.in_flight = left / ready + (left % ready != 0 ? 1 : 0);
      left -= r.in_flight;
      --ready;
    }
    model_.queued = queued + left;
    model_.oldest_queued_wait = Duration{oldest_wait};
  }
  void SetTtftP95(std::optional<double> ms) { model_.ttft_p95_ms = ms; }

  AutoscaleDecision Step(double now) {
    AutoscaleDecision d = DecideReplicas(settings_, model_, TimePoint{now}, memory_);
    const int current = Current();
    if (d.target_replicas > current) ups_.push_back(now);
    if (d.target_replicas < current) downs_.push_back(now);
    for (int i = current; i < d.target_replicas; ++i) {
      model_.replicas.push_back(
          Replica("job" + std::to_string(++submitted_), ReplicaState::kPending, now));
    }
    EXPECT_EQ(d.drain.size(), static_cast<size_t>(std::max(0, current - d.target_replicas)));
    for (const std::string& id : d.drain) {
      std::erase_if(model_.replicas, [&](const ReplicaSnapshot& r) { return r.id == id; });
      drained_.push_back(id);
    }
    return d;
  }
  // Steps every kTick from `from` to `to` (inclusive); `each` runs before each step.
  AutoscaleDecision Run(double from, double to, const std::function<void(double)>& each = {}) {
    AutoscaleDecision last;
    for (double t = from; t <= to + 1e-9; t += kTick) {
      if (each) each(t);
      last = Step(t);
    }
    return last;
  }

  int Current() const {
    return static_cast<int>(std::count_if(
        model_.replicas.begin(), model_.replicas.end(),
        [](const ReplicaSnapshot& r) { return r.state != ReplicaState::kDraining; }));
  }
  int submitted() const { return submitted_; }
  const std::vector<double>& ups() const { return ups_; }
  const std::vector<double>& downs() const { return downs_; }
  const std::vector<std::string>& drained() const { return drained_; }

 private:
  AutoscaleSettings settings_;
  ModelSnapshot model_;
  AutoscaleMemory memory_;
  int submitted_ = 0;
  std::vector<double> ups_;
  std::vector<double> downs_;
  std::vector<std::string> drained_;
};

// ---- Hysteresis ---------------------------------------------------------------------------

TEST(AutoscalerTest, LoadJitteringAroundTheUpThresholdScalesUpOnceAndNeverFlaps) {
  // Two replicas admit 20; the up threshold is 80% (16). The load jitters 15/17 for an hour and
  // new replicas start at once.
  Deployment d(Settings(1, 8));
  d.AddReady("a");
  d.AddReady("b");
  d.Run(0, 3600, [&](double t) {
    for (int i = 1; i <= d.submitted(); ++i) d.MakeReady("job" + std::to_string(i), t);
    d.SetLoad(static_cast<int>(t / kTick) % 2 == 0 ? 15 : 17);
  });
  EXPECT_LE(d.ups().size(), 1u);
  EXPECT_THAT(d.downs(), IsEmpty());
  EXPECT_LE(d.Current(), 3);
}

TEST(AutoscalerTest, LoadJitteringAroundTheDownThresholdNeverScalesDown) {
  // Three replicas; one fewer admits 10 at the 50% down threshold. A load jittering 9/11 is
  // never low for long, and far from the up threshold (24).
  Deployment d(Settings(1, 8));
  d.AddReady("a");
  d.AddReady("b");
  d.AddReady("c");
  d.Run(0, 3600, [&](double t) { d.SetLoad(static_cast<int>(t / kTick) % 2 == 0 ? 9 : 11); });
  EXPECT_THAT(d.ups(), IsEmpty());
  EXPECT_THAT(d.downs(), IsEmpty());
  EXPECT_EQ(d.Current(), 3);
}

TEST(AutoscalerTest, SustainedLoadIsSizedToTheTargetUtilisationWithoutRunningAway) {
  // 30 requests in flight, 10 per replica, 70% target: 5 replicas. The new ones stay pending
  // (the cluster is full), and still no more than 5 are ever asked for.
  Deployment d(Settings(1, 8));
  d.AddReady("a");
  AutoscaleDecision last = d.Run(0, 1200, [&](double) { d.SetLoad(10, 20, 0.5); });
  EXPECT_EQ(last.target_replicas, 5);
  EXPECT_EQ(d.submitted(), 4);
  EXPECT_THAT(last.reason, HasSubstr("in flight or queued on average"));
}

TEST(AutoscalerTest, ASurgeIsSizedFromTheShortWindowWithoutWaitingForTheAverage) {
  // One replica admits 10. After an hour at 2 requests, a class opens its notebooks: 25 in
  // flight or queued from t=3600. The 60-s average would pass 80% of 10 only after ~18 s; the
  // 6-s burst window passes 100% within two passes.
  Deployment d(Settings(1, 8));
  d.AddReady("a");
  d.Run(0, 3598, [&](double) { d.SetLoad(2); });
  EXPECT_THAT(d.ups(), IsEmpty());
  std::string up_reason;
  for (double t = 3600; t <= 3604 && up_reason.empty(); t += kTick) {
    d.SetLoad(10, 15, t - 3600);
    const int before = d.Current();
    AutoscaleDecision decision = d.Step(t);
    if (decision.target_replicas > before) up_reason = decision.reason;
  }
  EXPECT_THAT(up_reason, HasSubstr("a surge"));
  // Within a few passes the replicas admit the surge (10 each), without running past the 70%
  // target's 4 (the pending ones count as coming).
  d.Run(3606, 3610, [&](double t) { d.SetLoad(10, 15, t - 3600); });
  EXPECT_GE(d.Current() * 10, 25);
  d.Run(3612, 3700, [&](double t) { d.SetLoad(10, 15, t - 3600); });
  EXPECT_LE(d.Current(), 4);
}

TEST(AutoscalerTest, TheBurstWindowNeverScalesDown) {
  // Three replicas of 10 at a load of 15 for an hour, then nothing. The load fits in two at
  // scale_down_utilization (0.5) once its average is below 10: the 6 s burst average gets
  // there in ~2.4 s, the 60 s one in ~24 s. With a 10 s idle time, a scale-down that listened
  // to the burst window would come at ~12 s; it must wait for the long one (~34 s).
  AutoscaleSettings s = Settings(1, 8);
  s.scale_down_idle = Duration{10};
  Deployment d(s);
  d.AddReady("a");
  d.AddReady("b");
  d.AddReady("c");
  d.Run(0, 3600, [&](double) { d.SetLoad(15); });
  d.Run(3602, 3626, [&](double) { d.SetLoad(0); });
  EXPECT_THAT(d.downs(), IsEmpty());
  d.Run(3628, 3700, [&](double) { d.SetLoad(0); });
  ASSERT_THAT(d.downs(), Not(IsEmpty()));
  EXPECT_GE(d.downs().front(), 3602 + 30);
}

// ---- Capacity coming --------------------------------------------------------------------

TEST(AutoscalerTest, ABreachWhileAReplicaIsPendingWaitsForItsStartUpAllowance) {
  AutoscaleSettings s = Settings(1, 4);
  s.startup_allowance = Duration{180};
  Deployment d(s);
  d.AddReady("a");
  d.SetLoad(2);
  d.SetTtftP95(1500);
  AutoscaleDecision first = d.Step(0);
  EXPECT_EQ(first.target_replicas, 2);
  EXPECT_THAT(first.reason, HasSubstr("TTFT p95 1500 ms over the 1000 ms SLO"));
  // The breach goes on while job1 is pending: nothing more until its allowance is over.
  AutoscaleDecision waiting = d.Run(2, 178);
  EXPECT_EQ(waiting.target_replicas, 2);
  EXPECT_EQ(d.submitted(), 1);
  EXPECT_THAT(waiting.reason, HasSubstr("replica job1 is still pending (178 s of its 180 s"));
  // Past it, the breach that persists gets one more, which is waited for in turn.
  EXPECT_EQ(d.Step(180).target_replicas, 3);
  EXPECT_EQ(d.Run(182, 358).target_replicas, 3);
  EXPECT_EQ(d.submitted(), 2);
}

TEST(AutoscalerTest, AReplicaThatJustBecameReadyIsGivenTimeToShowInTheP95) {
  Deployment d(Settings(1, 4));
  d.AddReady("a");
  d.SetLoad(2);
  d.SetTtftP95(1500);
  d.Step(0);
  d.MakeReady("job1", 60);
  // The p95 still holds slow requests from before job1; it clears at 80.
  AutoscaleDecision settling = d.Run(60, 78);
  EXPECT_THAT(settling.reason, HasSubstr("job1 has been ready only 18 s"));
  d.SetTtftP95(400);
  d.Run(80, 370);  // and the load is low from 80: one would go at 378
  EXPECT_EQ(d.submitted(), 1);
  EXPECT_EQ(d.Current(), 2);
}

TEST(AutoscalerTest, AStartingReplicaAlsoCountsAsCapacityComing) {
  ModelSnapshot m;
  m.replicas = {Replica("a", ReplicaState::kReady, -1000, 3),
                Replica("b", ReplicaState::kStarting, -20)};
  m.ttft_p95_ms = 2000;
  AutoscaleMemory memory;
  AutoscaleDecision hold = DecideReplicas(Settings(1, 4), m, TimePoint{0}, memory);
  EXPECT_EQ(hold.target_replicas, 2);
  EXPECT_THAT(hold.reason, HasSubstr("replica b is still starting"));
}

TEST(AutoscalerTest, AQueueWaitingTooLongIsABreachSizedForTheQueue) {
  Deployment d(Settings(1, 8));
  d.AddReady("a");
  d.SetLoad(2);
  d.Run(0, 100);
  d.SetLoad(10, 50, 6);  // a sudden burst: full, and 50 waiting for 6 s
  AutoscaleDecision up = d.Step(102);
  EXPECT_EQ(up.target_replicas, 8);  // 60 / 7 = 9, capped at the ceiling
  EXPECT_THAT(up.reason, HasSubstr("50 request(s) queued, the oldest for 6.0 s"));
  // A short queue wait is not a breach by itself.
  Deployment calm(Settings(1, 8));
  calm.AddReady("a");
  calm.SetLoad(4, 1, 0.2);
  EXPECT_EQ(calm.Step(0).target_replicas, 1);
}

// ---- Floor and ceiling ------------------------------------------------------------------

TEST(AutoscalerTest, NeverBelowTheFloorNorAboveTheCeiling) {
  Deployment empty(Settings(2, 3));
  AutoscaleDecision floor = empty.Step(0);
  EXPECT_EQ(floor.target_replicas, 2);
  EXPECT_THAT(floor.reason, HasSubstr("under the floor of 2"));

  ModelSnapshot over;
  over.replicas = {Replica("r1", ReplicaState::kReady, 0, 4),
                   Replica("r2", ReplicaState::kReady, 0, 0),
                   Replica("r3", ReplicaState::kStarting, 10),
                   Replica("r4", ReplicaState::kReady, 0, 9),
                   Replica("r5", ReplicaState::kPending, 20)};
  AutoscaleMemory memory;
  AutoscaleDecision ceiling = DecideReplicas(Settings(2, 3), over, TimePoint{30}, memory);
  EXPECT_EQ(ceiling.target_replicas, 3);
  EXPECT_THAT(ceiling.drain, ElementsAre("r5", "r3"));
  EXPECT_THAT(ceiling.reason, HasSubstr("over the ceiling of 3"));

  // At the ceiling, neither a breach nor any load adds a replica.
  Deployment full(Settings(1, 3));
  for (const char* id : {"a", "b", "c"}) full.AddReady(id);
  full.SetTtftP95(5000);
  AutoscaleDecision last = full.Run(0, 600, [&](double) { full.SetLoad(30, 100, 30); });
  EXPECT_EQ(last.target_replicas, 3);
  EXPECT_EQ(full.submitted(), 0);
  EXPECT_THAT(last.reason, HasSubstr("at the ceiling of 3"));

  // Idle for hours: never under the floor.
  Deployment idle(Settings(2, 4));
  for (const char* id : {"a", "b", "c", "d"}) idle.AddReady(id);
  idle.Run(0, 7200);
  EXPECT_EQ(idle.Current(), 2);
}

// ---- Scale from zero --------------------------------------------------------------------

TEST(AutoscalerTest, AQueuedRequestWithNoReplicaGetsOneAtOnce) {
  Deployment d(Settings(0, 4));
  EXPECT_EQ(d.Run(0, 100).target_replicas, 0);  // nothing asked, nothing started
  d.SetLoad(0, 1, 0);
  AutoscaleDecision up = d.Step(102);
  EXPECT_EQ(up.target_replicas, 1);
  EXPECT_THAT(up.reason, HasSubstr("scale from zero"));
  // While it starts the queue grows past the breach wait: the coming replica is waited for.
  AutoscaleDecision waiting = d.Run(104, 200, [&](double t) { d.SetLoad(0, 3, t - 102); });
  EXPECT_EQ(waiting.target_replicas, 1);
  EXPECT_EQ(d.submitted(), 1);
}

TEST(AutoscalerTest, ZeroCeilingNeverStartsAReplica) {
  Deployment d(Settings(0, 0));
  d.SetLoad(0, 5, 100);
  AutoscaleDecision hold = d.Step(0);
  EXPECT_EQ(hold.target_replicas, 0);
  EXPECT_THAT(hold.reason, HasSubstr("max_replicas is 0"));
}

// ---- Scale down -------------------------------------------------------------------------

TEST(AutoscalerTest, IdleReplicasGoOneAtATimeAfterTheIdleTimeThenToZero) {
  Deployment d(Settings(0, 4));
  for (const char* id : {"a", "b", "c"}) d.AddReady(id);
  EXPECT_EQ(d.Run(0, 298).target_replicas, 3);
  EXPECT_THAT(d.Step(300).reason, HasSubstr("one replica fewer"));
  EXPECT_EQ(d.Run(302, 358).target_replicas, 2);  // one at a time: a step apart
  EXPECT_EQ(d.Step(360).target_replicas, 1);
  AutoscaleDecision zero = d.Run(362, 420);
  EXPECT_EQ(zero.target_replicas, 0);
  EXPECT_THAT(zero.reason, HasSubstr("scale to zero"));
  EXPECT_THAT(d.downs(), ElementsAre(300, 360, 420));
}

TEST(AutoscalerTest, ARequestStartsTheIdleTimeOver) {
  Deployment d(Settings(1, 4));
  d.AddReady("a");
  d.AddReady("b");
  // Busy (15 on 2 replicas: one could not take it at 50%) until 100, then 2 in flight.
  d.Run(0, 100, [&](double) { d.SetLoad(15); });
  d.SetLoad(2);
  AutoscaleDecision waiting = d.Run(102, 398);
  EXPECT_EQ(waiting.target_replicas, 2);
  EXPECT_THAT(waiting.reason, HasSubstr("one replica goes after 300 s"));
  // The smoothed load falls under 5 some time after the burst; 300 s of that, then one goes.
  d.Run(400, 700);
  EXPECT_EQ(d.Current(), 1);
  ASSERT_EQ(d.downs().size(), 1u);
  EXPECT_GT(d.downs()[0], 400);
}

TEST(AutoscalerTest, MinOneNeverScalesToZeroAndABreachIsNeverLow) {
  Deployment d(Settings(1, 4));
  d.AddReady("a");
  d.AddReady("b");
  d.SetTtftP95(1500);
  d.SetLoad(1);
  // A breach with capacity settled adds a replica and blocks scale-down.
  d.Run(0, 1000, [&](double t) {
    for (int i = 1; i <= d.submitted(); ++i) d.MakeReady("job" + std::to_string(i), t);
    if (t >= 10) d.SetTtftP95(std::nullopt);
  });
  EXPECT_EQ(d.ups().size(), 1u);
  EXPECT_EQ(d.Current(), 1);
}

// ---- Drain choice -----------------------------------------------------------------------

TEST(AutoscalerTest, DrainPrefersPendingThenStartingThenTheLeastLoadedReady) {
  const std::vector<ReplicaSnapshot> replicas = {
      Replica("busy", ReplicaState::kReady, 10, 7),
      Replica("quiet-old", ReplicaState::kReady, 10, 1),
      Replica("draining", ReplicaState::kDraining, 50, 0),
      Replica("quiet-young", ReplicaState::kReady, 40, 1),
      Replica("starting", ReplicaState::kStarting, 45),
      Replica("pending-old", ReplicaState::kPending, 20),
      Replica("pending-young", ReplicaState::kPending, 55),
  };
  EXPECT_THAT(ChooseDrain(replicas, 6),
              ElementsAre("pending-young", "pending-old", "starting", "quiet-young", "quiet-old",
                          "busy"));
  EXPECT_THAT(ChooseDrain(replicas, 1), ElementsAre("pending-young"));
  EXPECT_THAT(ChooseDrain(replicas, 0), IsEmpty());
  EXPECT_EQ(ChooseDrain(replicas, 99).size(), 6u);  // never a draining one
}

TEST(AutoscalerTest, ScaleDownDrainsTheLeastLoadedReadyReplica) {
  ModelSnapshot m;
  m.replicas = {Replica("x", ReplicaState::kReady, 0, 2), Replica("y", ReplicaState::kReady, 0, 0),
                Replica("z", ReplicaState::kReady, 0, 1)};
  AutoscaleSettings s = Settings(1, 4);
  AutoscaleMemory memory;
  for (double t = 0; t < 300; t += kTick) {
    EXPECT_THAT(DecideReplicas(s, m, TimePoint{t}, memory).drain, IsEmpty());
  }
  AutoscaleDecision down = DecideReplicas(s, m, TimePoint{300}, memory);
  EXPECT_EQ(down.target_replicas, 2);
  EXPECT_THAT(down.drain, ElementsAre("y"));
}

TEST(AutoscalerTest, DrainingReplicasCountForNothing) {
  ModelSnapshot m;
  m.replicas = {Replica("old", ReplicaState::kDraining, 0, 5)};
  m.queued = 2;
  AutoscaleMemory memory;
  AutoscaleDecision d = DecideReplicas(Settings(0, 2), m, TimePoint{0}, memory);
  EXPECT_EQ(d.target_replicas, 1);
  EXPECT_THAT(d.reason, HasSubstr("scale from zero"));
}

}  // namespace
}  // namespace bmas::autoscale
