// Issue 25, faults on the test bed: a node that drops off the network in the middle of jobs.
// Two jobs run across two nodes each, both on oss02, one submitted with --requeue and one with
// --no-requeue. oss02's link is cut at the bridge: slurmctld marks it DOWN once it has been
// silent for SlurmdTimeout, the --requeue job goes back to the queue and the other fails with
// NODE_FAIL, and `bmas node list` shows oss02 down to a student. The link comes back: oss02
// returns to service by itself (ReturnToService=2, no admin step) and the requeued job runs
// there again. The same with oss03's own interface taken down and up.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "net_bed.h"
#include "test_helpers.h"

namespace bmas::testbed {
namespace {

using bmas::testing::EnsureUnixUser;
using bmas::testing::SharedBinaryIn;
using Clock = std::chrono::steady_clock;

constexpr const char* kUser = "bmas-fault-user";
// What the bed's slurm.conf gives a silent node (a real cluster keeps Slurm's 300 s).
constexpr int kSlurmdTimeoutS = 5;
constexpr auto kPatience = std::chrono::seconds(120);  // a limit for waits, not a measure

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

class NodeFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the test bed needs root";
    if (std::getenv("BMAS_BINARY") == nullptr) GTEST_SKIP() << "BMAS_BINARY is not set";
    BedOptions options;
    options.name = "node-fault";
    options.nodes = 3;
    options.slurmd_timeout_s = kSlurmdTimeoutS;
    options.slurmrestd = true;
    auto started = bed_.Start(options);
    ASSERT_TRUE(started) << started.error().message;
    auto slurm = bed_.StartSlurm(std::chrono::seconds(60));
    ASSERT_TRUE(slurm) << slurm.error().message;
    user_ = EnsureUnixUser(kUser);
    bmas_ = SharedBinaryIn(bed_.dir());
  }

  void TearDown() override {
    if (bmas_.empty()) return;
    bed_.Stop();
    EXPECT_EQ(bed_.Leftovers(), std::vector<std::string>{});
  }

  // Waits until `done` holds; how long that took, or a negative duration when it never did.
  template <typename F>
  Clock::duration Until(F done) {
    const auto t0 = Clock::now();
    return WaitFor(done, 0, kPatience) ? Clock::now() - t0 : Clock::duration(-1);
  }

  bool Down(const std::string& node) { return bed_.NodeState(node).starts_with("down"); }
  // Back in service: answering and taking jobs (idle, or running the requeued one).
  bool Serving(const std::string& node) {
    const std::string s = bed_.NodeState(node);
    return !s.empty() && !s.starts_with("down") && s.find('*') == std::string::npos &&
           s.find("drain") == std::string::npos;
  }

  std::string JobState(const std::string& id) { return bed_.Job(id)["JobState"]; }

  // `bmas node list --json` in mgs1 as the student, through the bed's slurmrestd.
  std::string NodeList() {
    auto r = bed_.Run("mgs1",
                      {bmas_, "--state-dir", bed_.dir() + "/node/bmas-state", "--config",
                       bed_.InventoryPath(), "node", "list", "--json"},
                      user_, std::chrono::seconds(60));
    if (!r) return r.error().message;
    EXPECT_EQ(r->exit_code, 0) << r->err;
    return r->out;
  }

  NetBed bed_;
  std::string user_;
  std::string bmas_;
};

TEST_F(NodeFaultTest, ANodeCutOffGoesDownItsJobsRequeueOrFailAndItServesAgainWhenItsLinkIsBack) {
  const std::vector<std::string> common = {"-N2", "--mem=64", "--chdir=/tmp", "-o", "/dev/null"};
  auto job = [&](const std::string& nodes, const std::string& policy) {
    std::vector<std::string> args = common;
    // The batch step outlives a failed srun (whose step may notice the lost node before
    // slurmctld does, and would end the job FAILED first): what is tested is Slurm's policy for
    // a job whose node went down.
    args.insert(args.end(), {"-w", nodes, policy, "--wrap", "srun sleep 600; sleep 600"});
    auto id = bed_.Submit(args, user_);
    EXPECT_TRUE(id) << id.error().message;
    return id ? *id : std::string();
  };
  const std::string requeued = job("oss01,oss02", "--requeue");
  const std::string failed = job("oss02,oss03", "--no-requeue");
  ASSERT_FALSE(requeued.empty());
  ASSERT_FALSE(failed.empty());
  ASSERT_GE(Seconds(Until([&] {
              return JobState(requeued) == "RUNNING" && JobState(failed) == "RUNNING";
            })),
            0)
      << JobState(requeued) << " " << JobState(failed) << "\n"
      << bed_.LogTail("slurmctld");

  // The cable pulled at the switch: oss02's processes run on and reach no one.
  ASSERT_TRUE(bed_.CutLink("oss02"));
  const auto down = Until([&] { return Down("oss02"); });
  ASSERT_GE(Seconds(down), 0) << "oss02 is " << bed_.NodeState("oss02") << "\n"
                              << bed_.LogTail("slurmctld");
  std::printf("oss02 cut at the bridge: DOWN after %.1f s (SlurmdTimeout=%d)\n", Seconds(down),
              kSlurmdTimeoutS);
  ASSERT_GE(Seconds(Until([&] { return JobState(failed) == "NODE_FAIL"; })), 0)
      << bed_.Job(failed)["JobState"];
  // Requeued: back in the queue (it asked for oss02 by name, so it waits for it).
  ASSERT_GE(Seconds(Until([&] {
              auto j = bed_.Job(requeued);
              return j["Restarts"] == "1" && j["JobState"] == "PENDING";
            })),
            0)
      << JobState(requeued) << " Restarts=" << bed_.Job(requeued)["Restarts"];

  // What bmas shows a student: oss02 down, with Slurm's reason.
  const std::string list = NodeList();
  const std::string oss02 = list.substr(list.find("\"name\":\"oss02\""));
  const std::string row = oss02.substr(0, oss02.find('}'));
  EXPECT_NE(row.find("\"state\":\"down"), std::string::npos) << list;
  EXPECT_NE(row.find("Not responding"), std::string::npos) << list;
  EXPECT_NE(list.find("\"name\":\"oss01\""), std::string::npos) << list;

  // The link back: oss02 serves again with no admin step, and the requeued job runs there.
  ASSERT_TRUE(bed_.RestoreLink("oss02"));
  const auto back = Until([&] { return Serving("oss02"); });
  ASSERT_GE(Seconds(back), 0) << "oss02 is " << bed_.NodeState("oss02") << "\n"
                              << bed_.LogTail("slurmctld");
  std::printf("oss02's link restored: serving again after %.1f s\n", Seconds(back));
  ASSERT_GE(Seconds(Until([&] { return JobState(requeued) == "RUNNING"; })), 0)
      << JobState(requeued) << "\n"
      << bed_.LogTail("slurmctld");
  EXPECT_EQ(bed_.Job(requeued)["NodeList"], "oss[01-02]");
  EXPECT_EQ(JobState(failed), "NODE_FAIL");  // it stays failed
  const std::string listed = NodeList();
  const std::string again = listed.substr(listed.find("\"name\":\"oss02\""));
  EXPECT_EQ(again.substr(0, again.find('}')).find("\"state\":\"down"), std::string::npos)
      << listed;

  // The node's own interface down and up (no job there): down, then back by itself, and a
  // student's step runs on it.
  ASSERT_TRUE(bed_.CutLink("oss03", LinkEnd::kHost));
  ASSERT_GE(Seconds(Until([&] { return Down("oss03"); })), 0) << bed_.NodeState("oss03");
  ASSERT_TRUE(bed_.RestoreLink("oss03", LinkEnd::kHost));
  ASSERT_GE(Seconds(Until([&] { return Serving("oss03"); })), 0) << bed_.NodeState("oss03");
  auto step = bed_.Run("mgs1", {"srun", "-w", "oss03", "--mem=64", "hostname"}, user_,
                       std::chrono::seconds(60));
  ASSERT_TRUE(step) << step.error().message;
  EXPECT_EQ(step->exit_code, 0) << step->err;
  EXPECT_EQ(step->out, "oss03\n");
}

}  // namespace
}  // namespace bmas::testbed
