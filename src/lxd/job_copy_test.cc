#include "lxd/job_copy.h"

#include <unistd.h>

#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "lxd/fake_lxd_api.h"
#include "lxd/workspace.h"

namespace bmas::lxd {
namespace {

// Finding 5 of issue 11: the copy is configured from this node's own template, never from what
// the peer says its instance is (a hostile peer's security.* or host disk devices).
TEST(JobCopy, SpecIsTheLocalTemplateWithTheCopysMarksAndNothingOfThePeers) {
  Account alice{"alice", 1001, 1001, "/home/alice", "/bin/sh"};
  WorkspaceSettings limits;
  limits.memory = "4GiB";
  const InstanceSpec local = WorkspaceInstance(alice, "", limits, "btrfs");
  InstanceSpec spec = CopySpec(local, "https://node01:8443", 31);
  EXPECT_EQ(spec.name, "ws-alice");
  EXPECT_EQ(spec.profiles, local.profiles);
  EXPECT_EQ(spec.image, "");
  StringMap expected = local.config;
  expected[kCopyOfKey] = "https://node01:8443";
  expected[kCopyJobsKey] = "31";
  EXPECT_EQ(spec.config, expected);
  EXPECT_EQ(spec.config.at("security.privileged"), "false");
  EXPECT_EQ(spec.config.at("limits.memory"), "4GiB");
  EXPECT_EQ(spec.devices, local.devices);
  EXPECT_EQ(spec.devices.at("home").at("source"), "/home/alice");
}

TEST(JobCopy, JobListsRoundTripAndIgnoreJunk) {
  EXPECT_EQ(ParseJobList(""), std::vector<int64_t>{});
  EXPECT_EQ(ParseJobList("12,15"), (std::vector<int64_t>{12, 15}));
  EXPECT_EQ(ParseJobList("12,x,15,12,-3,"), (std::vector<int64_t>{12, 15}));
  EXPECT_EQ(JobList({12, 15}), "12,15");
  EXPECT_EQ(JobList({}), "");
}

// The reconcile pass's and the epilog's part against an in-memory LXD: no root, no daemon. The
// CreationLock's file goes in a directory of the test's own.
class JobCopyFakeTest : public testing::Test {
 protected:
  void SetUp() override {
    lock_dir_ = testing::TempDir() + "job_copy_lock_" + std::to_string(getpid());
    std::filesystem::create_directories(lock_dir_);
    std::filesystem::permissions(lock_dir_, std::filesystem::perms::owner_all);
  }
  void TearDown() override { std::filesystem::remove_all(lock_dir_); }

  // A copy of `user`'s workspace for `jobs` (running), or their workspace itself (no jobs).
  void Add(const std::string& user, const std::string& jobs, bool copy = true) {
    Account account{user, 1001, 1001, "/home/" + user, "/bin/sh"};
    InstanceSpec spec = WorkspaceInstance(account, "", WorkspaceSettings{}, "dir");
    if (copy) spec = CopySpec(spec, "https://node01:8443", 1);
    if (copy) spec.config[kCopyJobsKey] = jobs;
    ASSERT_TRUE(lxd_.CreateInstance(spec));
    ASSERT_TRUE(lxd_.ChangeState(spec.name, "start"));
  }
  std::string JobsOf(const std::string& name) {
    auto i = lxd_.GetInstance(name);
    return i ? i->config[kCopyJobsKey] : "(gone)";
  }

  FakeLxdApi lxd_;
  std::string lock_dir_;
};

TEST_F(JobCopyFakeTest, ReconcileDropsGoneJobsAndDeletesCopiesLeftWithNoneButNeverAWorkspace) {
  Add("alice", "12,15");
  Add("bob", "20");
  Add("carol", "", /*copy=*/false);
  const std::map<int64_t, bool> running = {{12, false}, {15, true}, {20, false}};
  auto deleted = ReconcileCopies(
      lxd_, [&](int64_t job) -> Result<bool> { return running.at(job); }, lock_dir_);
  ASSERT_TRUE(deleted) << deleted.error().message;
  EXPECT_EQ(*deleted, std::vector<std::string>{"ws-bob"});
  EXPECT_EQ(JobsOf("ws-alice"), "15");
  EXPECT_EQ(JobsOf("ws-bob"), "(gone)");
  EXPECT_TRUE(lxd_.GetInstance("ws-carol"));  // a workspace, not a copy: left alone
  EXPECT_EQ(lxd_.state_changes.back(), "ws-bob stop");  // stopped before it was deleted
}

TEST_F(JobCopyFakeTest, AJobWhoseStateCannotBeReadKeepsItsCopy) {
  Add("alice", "12");
  auto deleted = ReconcileCopies(
      lxd_, [](int64_t) -> Result<bool> { return Error{ErrorCode::kUnavailable, "slurmctld is down"}; }, lock_dir_);
  ASSERT_TRUE(deleted);
  EXPECT_TRUE(deleted->empty());
  EXPECT_EQ(JobsOf("ws-alice"), "12");
}

TEST_F(JobCopyFakeTest, TheEpilogReleasesItsJobAndTheLastOneDeletesTheCopy) {
  Add("alice", "12,15");
  Add("bob", "", /*copy=*/false);
  auto first = ReleaseJobCopy(lxd_, "ws-alice", 12, lock_dir_);
  ASSERT_TRUE(first);
  EXPECT_FALSE(*first);
  EXPECT_EQ(JobsOf("ws-alice"), "15");
  auto last = ReleaseJobCopy(lxd_, "ws-alice", 15, lock_dir_);
  ASSERT_TRUE(last);
  EXPECT_TRUE(*last);
  EXPECT_EQ(JobsOf("ws-alice"), "(gone)");
  auto workspace = ReleaseJobCopy(lxd_, "ws-bob", 15, lock_dir_);
  ASSERT_TRUE(workspace);
  EXPECT_FALSE(*workspace);
  EXPECT_TRUE(lxd_.GetInstance("ws-bob"));
  auto missing = ReleaseJobCopy(lxd_, "ws-nobody", 15, lock_dir_);
  ASSERT_TRUE(missing);
  EXPECT_FALSE(*missing);
}

TEST_F(JobCopyFakeTest, AnLxdThatIsDownIsAnError) {
  lxd_.down = true;
  auto deleted = ReconcileCopies(lxd_, [](int64_t) -> Result<bool> { return true; }, lock_dir_);
  EXPECT_FALSE(deleted);
}

}  // namespace
}  // namespace bmas::lxd
