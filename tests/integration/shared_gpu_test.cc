// Issue 26: GPUs shared as Slurm shards, on the local cluster of
// examples/cluster-local-shared.toml (oss03's GPUs 2 and 3, four shards each), under real Slurm
// and real LXD, as the non-root test users. `bmas run --gpus 1 --share 4` asks for one shard;
// two users' jobs pack onto one shared GPU, each gets that GPU in its own workspace for its
// life (and no other GPU), whole-GPU jobs never land on a shared GPU, and `bmas jobs` says what
// each holds. Needs root, LXD and Slurm, like the workspace tests.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <thread>

#include "lxd_workspace_fixture.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;

class SharedGpuTest : public WorkspaceJobsTest {
 protected:
  void SetUp() override {
    slurm_up_args_ = {"--cluster",
                      std::string(BMAS_SOURCE_DIR) + "/examples/cluster-local-shared.toml"};
    WorkspaceJobsTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    Create("bmastest2");
  }

  // What `scontrol ARGS...` prints about the local cluster.
  std::string Scontrol(std::vector<std::string> args) {
    args.insert(args.begin(), "scontrol");
    auto r = RunCommand(args, {"SLURM_CONF=" + state_ + "/slurm/etc/slurm.conf"});
    return r ? r->out + r->err : r.error().message;
  }

  // What `file` in `user`'s home holds, "" when it is missing.
  static std::string ReadHome(const std::string& user, const std::string& file) {
    std::ifstream in(Home(user) + "/" + file);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Submits `args` (bmas run's, before `--`) as `user`, with a job that writes what each GPU
  // device node in its workspace answers to `file` and then sleeps. Returns the job id.
  std::string RunProbe(const std::string& user, std::vector<std::string> args,
                       const std::string& file) {
    const std::string probe =
        "for d in /dev/nvidia[0-9]*; do r=$(cat $d 2>&1); "
        "case $r in *'not permitted'*) r=EPERM;; *'No such device'*) r=ENXIO;; esac; "
        "echo \"$d $r\"; done";
    std::remove((Home(user) + "/" + file).c_str());
    args.insert(args.begin(), "run");
    for (const char* a : {"--", "sh", "-c"}) args.push_back(a);
    args.push_back(probe + " >" + file + "; exec sleep 3011");
    CommandOutput run = InHome(user, args);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return run.out.substr(0, run.out.find('\n'));
  }
};

TEST_F(SharedGpuTest, TwoUsersShareOneGpuEachInTheirOwnWorkspaceAndWholeGpuJobsStayOff) {
  const std::string one = RunProbe("bmastest1", {"--gpus", "1", "--share", "4"}, "probe-share");
  const std::string two = RunProbe("bmastest2", {"--gpus", "1", "--share", "2"}, "probe-share");
  ASSERT_FALSE(one.empty());
  ASSERT_FALSE(two.empty());
  for (const char* user : {"bmastest1", "bmastest2"}) {
    ASSERT_TRUE(Eventually([&] { return !ReadHome(user, "probe-share").empty(); },
                           std::chrono::seconds(40)))
        << user << ": " << DevicesIn(user);
  }
  // Both on oss03's first shared GPU (Slurm packs shards), each in its own workspace: the job
  // opens it (ENXIO: no driver behind the fake), and no other GPU is there.
  EXPECT_EQ(ReadHome("bmastest1", "probe-share"), "/dev/nvidia2 ENXIO\n");
  EXPECT_EQ(ReadHome("bmastest2", "probe-share"), "/dev/nvidia2 ENXIO\n");
  EXPECT_THAT(Scontrol({"show", "job", "-d", one}), HasSubstr("GRES=shard:1(IDX:2)"));
  EXPECT_THAT(Scontrol({"show", "job", "-d", two}), HasSubstr("GRES=shard:2(IDX:2)"));

  // A whole-GPU job asks for the whole GPUs' type, which Slurm never meets with a shared GPU
  // (docs/slurm-shards.md: an untyped request could get one).
  const std::string whole = RunProbe("bmastest1", {"--gpus", "2"}, "probe-whole");
  ASSERT_FALSE(whole.empty());
  EXPECT_THAT(Scontrol({"show", "job", whole}), HasSubstr("TresPerNode=gres:gpu:l40s:2"));
  EXPECT_TRUE(Eventually(
      [&] { return Scontrol({"show", "job", "-d", whole}).find("GRES=gpu:l40s:2(IDX:") !=
                   std::string::npos; },
      std::chrono::seconds(40)))
      << Scontrol({"show", "job", "-d", whole});

  // bmas jobs says what each holds.
  CommandOutput jobs = InHome("bmastest1", {"jobs", "--all"});
  EXPECT_THAT(jobs.out, HasSubstr("1 shard")) << jobs.out;
  EXPECT_THAT(jobs.out, HasSubstr("2 shards")) << jobs.out;

  // A share that is no whole number of shards is refused, saying which shares there are.
  CommandOutput third = InHome("bmastest1", {"run", "--gpus", "1", "--share", "3", "--", "true"});
  EXPECT_NE(third.exit_code, 0);
  EXPECT_THAT(third.err, HasSubstr("--share takes 1, 2, 4")) << third.err;

  for (const std::string& job : {one, whole}) {
    ASSERT_EQ(InHome("bmastest1", {"cancel", job}).exit_code, 0);
  }
  ASSERT_EQ(InHome("bmastest2", {"cancel", two}).exit_code, 0);
  // Unplugged from both workspaces.
  for (const char* user : {"bmastest1", "bmastest2"}) {
    auto left = [&] {
      return Bmas({"workspace", "exec", user, "--", "sh", "-c", "ls /dev/nvidia[0-9]* 2>/dev/null"})
          .out;
    };
    EXPECT_TRUE(Eventually([&] { return left().empty(); }, std::chrono::seconds(20)))
        << user << ": " << left();
  }
}

// Two share jobs of one user on one GPU: the GPU's device node is in the workspace once, at
// /dev/nvidia2, for both; when the first job ends, the second still opens it there.
TEST_F(SharedGpuTest, TwoJobsOfOneUserOnOneGpuBothFindItWhereTheyLookAndKeepItWhenOneEnds) {
  const std::string first = RunProbe("bmastest1", {"--gpus", "1", "--share", "4"}, "probe-a");
  ASSERT_FALSE(first.empty());
  ASSERT_TRUE(Eventually([&] { return !ReadHome("bmastest1", "probe-a").empty(); },
                         std::chrono::seconds(40)));
  // The second probes again and again, so that what it sees after the first has ended shows.
  const std::string probe =
      "for d in /dev/nvidia[0-9]*; do r=$(cat $d 2>&1); "
      "case $r in *'not permitted'*) r=EPERM;; *'No such device'*) r=ENXIO;; esac; "
      "echo \"$d $r\"; done";
  std::remove((Home("bmastest1") + "/probe-b").c_str());
  CommandOutput run = InHome(
      "bmastest1", {"run", "--gpus", "1", "--share", "4", "--", "sh", "-c",
                    "while true; do (" + probe + ") >probe-b.new; mv probe-b.new probe-b; "
                    "sleep 0.3; done"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string second = run.out.substr(0, run.out.find('\n'));
  ASSERT_TRUE(Eventually([&] { return !ReadHome("bmastest1", "probe-b").empty(); },
                         std::chrono::seconds(40)))
      << DevicesIn("bmastest1");
  EXPECT_EQ(ReadHome("bmastest1", "probe-a"), "/dev/nvidia2 ENXIO\n");
  EXPECT_EQ(ReadHome("bmastest1", "probe-b"), "/dev/nvidia2 ENXIO\n");
  EXPECT_THAT(Scontrol({"show", "job", "-d", second}), HasSubstr("GRES=shard:1(IDX:2)"));

  ASSERT_EQ(InHome("bmastest1", {"cancel", first}).exit_code, 0);
  ASSERT_TRUE(Eventually([&] { return Scontrol({"show", "job", first}).find("JobState=CANCELLED") !=
                                      std::string::npos; },
                         std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the epilog has run, probes went on
  EXPECT_EQ(ReadHome("bmastest1", "probe-b"), "/dev/nvidia2 ENXIO\n") << DevicesIn("bmastest1");
  ASSERT_EQ(InHome("bmastest1", {"cancel", second}).exit_code, 0);
  auto left = [&] {
    return Bmas({"workspace", "exec", "bmastest1", "--", "sh", "-c",
                 "ls /dev/nvidia[0-9]* 2>/dev/null"})
        .out;
  };
  EXPECT_TRUE(Eventually([&] { return left().empty(); }, std::chrono::seconds(20))) << left();
}

}  // namespace
}  // namespace bmas::testing
