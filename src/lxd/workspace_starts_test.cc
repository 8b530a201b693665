#include "lxd/workspace_starts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>

namespace bmas::lxd {
namespace {

using namespace std::chrono_literals;

TEST(WorkspaceStartWatchTest, AWorkspacesCgroupMadeWakesItAndNothingElseDoes) {
  char dir[] = "/tmp/bmas-starts-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  auto watch = WorkspaceStartWatch::Open(dir);
  ASSERT_TRUE(watch) << watch.error().message;
  EXPECT_FALSE((*watch)->Wait(50ms));
  ASSERT_EQ(mkdir((std::string(dir) + "/lxc.monitor.ws-alice").c_str(), 0755), 0);
  EXPECT_FALSE((*watch)->Wait(100ms)) << "LXD's monitor, not the workspace";
  ASSERT_EQ(mkdir((std::string(dir) + "/lxc.payload.ws-alice").c_str(), 0755), 0);
  EXPECT_TRUE((*watch)->Wait(1000ms));
  EXPECT_FALSE((*watch)->Wait(50ms)) << "each start once";
  std::filesystem::remove_all(dir);
}

TEST(WorkspaceStartWatchTest, ADirThatCannotBeWatchedIsAnErrorNamingIt) {
  auto watch = WorkspaceStartWatch::Open("/nonexistent/bmas");
  ASSERT_FALSE(watch);
  EXPECT_THAT(watch.error().message, ::testing::HasSubstr("cannot watch /nonexistent/bmas"));
}

}  // namespace
}  // namespace bmas::lxd
