#include "lxd/job_copy.h"

#include "lxd/workspace.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace bmas::lxd
