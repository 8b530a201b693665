#include "slurm/mode_switch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/hostlist.h"
#include "slurm/fake_slurm_api.h"

namespace bmas::slurm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// scontrol as far as mode switching uses it: one reservation list, requeues recorded.
struct FakeScontrol {
  std::vector<std::string> reservation_lines;  // `scontrol -o show reservation`
  std::vector<std::vector<std::string>> calls;
  std::vector<int64_t> requeued;

  Scontrol Fn() {
    return [this](std::vector<std::string> args) -> Result<std::string> {
      calls.push_back(args);
      if (args[0] == "-o") {
        if (reservation_lines.empty()) return std::string("No reservations in the system\n");
        return fmt::format("{}\n", fmt::join(reservation_lines, "\n"));
      }
      if (args[0] == "delete") {
        reservation_lines.clear();
        return std::string();
      }
      if (args[0] == "create") {
        // As Slurm prints it back: Users= and Nodes= from the create's arguments.
        std::string users, nodes;
        for (const std::string& a : args) {
          if (a.rfind("Users=", 0) == 0) users = a.substr(6);
          if (a.rfind("Nodes=", 0) == 0) nodes = a.substr(6);
        }
        reservation_lines = {fmt::format(
            "ReservationName=bmas_research StartTime=2026-11-27T09:00:00 "
            "EndTime=2027-11-27T09:00:00 Nodes={} Flags=IGNORE_JOBS,SPEC_NODES Users={} "
            "State=ACTIVE",
            nodes, users)};
        return std::string();
      }
      if (args[0] == "requeue") {
        requeued.push_back(std::stoll(args[1]));
        return std::string();
      }
      return Error{ErrorCode::kInvalidArgument, "fake scontrol: " + args[0]};
    };
  }
};

Cluster FourNodes() {
  Cluster c;
  for (const char* name : {"oss01", "oss02", "oss03", "oss04"}) {
    Node n;
    n.name = name;
    c.nodes.push_back(n);
  }
  return c;
}

FakeSlurmApi SlurmWithNodes() {
  FakeSlurmApi slurm;
  for (const auto& [name, state] : std::vector<std::pair<std::string, std::string>>{
           {"oss01", "allocated"}, {"oss02", "idle"}, {"oss03", "mixed"}, {"oss04", "idle"}}) {
    NodeInfo n;
    n.name = name;
    n.state = state;
    slurm.nodes.push_back(n);
  }
  return slurm;
}

TEST(ModeSwitchTest, ResearchByCountTakesIdleNodesFirstAndLabGivesThemBack) {
  FakeSlurmApi slurm = SlurmWithNodes();
  FakeScontrol scontrol;
  ResearchRequest request;
  request.users = {"alice"};
  request.count = 2;
  auto done = SwitchToResearch(slurm, scontrol.Fn(), FourNodes(), request);
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_THAT(done->nodes, ElementsAre("oss02", "oss04"));
  EXPECT_FALSE(done->replaced.research);
  auto mode = CurrentMode(scontrol.Fn());
  ASSERT_TRUE(mode);
  EXPECT_TRUE(mode->research);
  EXPECT_THAT(mode->users, ElementsAre("alice"));
  EXPECT_THAT(mode->nodes, ElementsAre("oss02", "oss04"));

  auto lab = SwitchToLab(scontrol.Fn());
  ASSERT_TRUE(lab);
  EXPECT_TRUE(lab->research);  // what was in force
  EXPECT_FALSE(CurrentMode(scontrol.Fn())->research);
  // Lab again: nothing to delete.
  const size_t calls = scontrol.calls.size();
  auto again = SwitchToLab(scontrol.Fn());
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->research);
  EXPECT_EQ(scontrol.calls.size(), calls + 1);  // only the look
}

TEST(ModeSwitchTest, ANewReservationReplacesTheOldOneAndAddKeepsIt) {
  FakeSlurmApi slurm = SlurmWithNodes();
  FakeScontrol scontrol;
  ResearchRequest first;
  first.users = {"alice"};
  first.nodes = {"oss01"};
  ASSERT_TRUE(SwitchToResearch(slurm, scontrol.Fn(), FourNodes(), first));

  ResearchRequest added;
  added.users = {"bob"};
  added.nodes = {"oss03"};
  added.add = true;
  auto both = SwitchToResearch(slurm, scontrol.Fn(), FourNodes(), added);
  ASSERT_TRUE(both) << both.error().message;
  EXPECT_THAT(both->users, ElementsAre("alice", "bob"));
  EXPECT_THAT(both->nodes, ElementsAre("oss01", "oss03"));
  EXPECT_FALSE(both->replaced.research);

  ResearchRequest replacing;
  replacing.users = {"carol"};
  replacing.nodes = {"oss02"};
  auto replaced = SwitchToResearch(slurm, scontrol.Fn(), FourNodes(), replacing);
  ASSERT_TRUE(replaced);
  EXPECT_THAT(replaced->users, ElementsAre("carol"));
  EXPECT_THAT(replaced->replaced.users, ElementsAre("alice", "bob"));
  EXPECT_THAT(CurrentMode(scontrol.Fn())->nodes, ElementsAre("oss02"));
}

TEST(ModeSwitchTest, ForceRequeuesOnlyOtherUsersRunningJobsOnTheNodes) {
  FakeSlurmApi slurm = SlurmWithNodes();
  auto job = [&](const std::string& user, const std::string& node) {
    const int64_t id = *slurm.Submit(JobSpec{});
    slurm.Run(id, node);
    slurm.jobs[id].user = user;
    return id;
  };
  const int64_t bobs_there = job("bob", "oss01");
  job("alice", "oss01");  // the research user's own
  job("bob", "oss02");    // elsewhere
  const int64_t pending = *slurm.Submit(JobSpec{});
  slurm.jobs[pending].nodes = {"oss01"};
  FakeScontrol scontrol;
  ResearchRequest request;
  request.users = {"alice"};
  request.nodes = {"oss01"};
  request.force = true;
  auto done = SwitchToResearch(slurm, scontrol.Fn(), FourNodes(), request);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->requeued, 1);
  EXPECT_THAT(scontrol.requeued, ElementsAre(bobs_there));
}

TEST(ModeSwitchTest, BadRequestsAreRefusedBeforeAnythingChanges) {
  FakeSlurmApi slurm = SlurmWithNodes();
  FakeScontrol scontrol;
  ResearchRequest unknown;
  unknown.users = {"alice"};
  unknown.nodes = {"oss09"};
  auto r = SwitchToResearch(slurm, scontrol.Fn(), FourNodes(), unknown);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("node oss09 is not in the cluster"));
  ResearchRequest too_many;
  too_many.users = {"alice"};
  too_many.count = 5;
  r = SwitchToResearch(slurm, scontrol.Fn(), FourNodes(), too_many);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("the cluster has 4 nodes, not 5"));
  ResearchRequest neither;
  neither.users = {"alice"};
  r = SwitchToResearch(slurm, scontrol.Fn(), FourNodes(), neither);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("--nodes LIST or --count N"));
  EXPECT_TRUE(scontrol.calls.empty());
}

}  // namespace
}  // namespace bmas::slurm
