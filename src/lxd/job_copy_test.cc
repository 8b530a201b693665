#include "lxd/job_copy.h"

#include <gtest/gtest.h>

namespace bmas::lxd {
namespace {

TEST(JobCopy, SpecKeepsTheWorkspaceAndDropsWhatBelongsToItsNode) {
  Instance source;
  source.name = "ws-alice";
  source.profiles = {"bmas"};
  source.config = {{"raw.idmap", "both 1001 1001"},
                   {"limits.memory", "4GiB"},
                   {"volatile.base_image", "abc"},
                   {"volatile.idmap.base", "1065536"},
                   {"volatile.last_state.power", "RUNNING"}};
  source.devices = {{"home", {{"type", "disk"}, {"source", "/home/alice"}}},
                    {"bmas-j12-node01-gpu0", {{"type", "unix-char"}}}};
  InstanceSpec spec = CopySpec(source, "https://node01:8443", 31);
  EXPECT_EQ(spec.name, "ws-alice");
  EXPECT_EQ(spec.profiles, std::vector<std::string>{"bmas"});
  EXPECT_EQ(spec.config, (StringMap{{"raw.idmap", "both 1001 1001"},
                                    {"limits.memory", "4GiB"},
                                    {"volatile.base_image", "abc"},
                                    {kCopyOfKey, "https://node01:8443"},
                                    {kCopyJobsKey, "31"}}));
  ASSERT_EQ(spec.devices.size(), 1u) << "another node's job GPUs stay there";
  EXPECT_EQ(spec.devices.count("home"), 1u);
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
