#include "lxd/workspace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lxd/local_lxd.h"
#include "lxd/lxd_client.h"

namespace bmas::lxd {
namespace {

TEST(WorkspaceName, PlainNamesKeepTheirNameOthersGetAHash) {
  EXPECT_EQ(WorkspaceName("alice"), "ws-alice");
  const std::string dotted = WorkspaceName("a.b");
  EXPECT_THAT(dotted, ::testing::StartsWith("ws-a-b-"));
  EXPECT_TRUE(IsValidInstanceName(dotted)) << dotted;
  EXPECT_NE(WorkspaceName("a_b"), WorkspaceName("a.b"));
  EXPECT_TRUE(IsValidInstanceName(WorkspaceName("_svc")));
}

TEST(WorkspaceInstance, MapsTheUsersIdsMountsTheHomeAndSetsLimits) {
  Account a{"alice", 1001, 1001, "/home/alice", "/bin/bash"};
  WorkspaceSettings limits;
  limits.cpus = 2;
  limits.memory = "1GiB";
  limits.processes = 500;
  limits.disk = "5GiB";
  InstanceSpec spec = WorkspaceInstance(a, "bmas-busybox", limits, "btrfs");
  EXPECT_EQ(spec.name, "ws-alice");
  EXPECT_EQ(spec.config.at("raw.idmap"), "both 1001 1001");
  EXPECT_EQ(spec.config.at("limits.cpu"), "2");
  EXPECT_EQ(spec.config.at("limits.memory"), "1GiB");
  EXPECT_EQ(spec.config.at("limits.processes"), "500");
  EXPECT_EQ(spec.config.at("user.bmas.user"), "alice");
  EXPECT_EQ(spec.devices.at("home").at("source"), "/home/alice");
  EXPECT_EQ(spec.devices.at("home").at("path"), "/home/alice");
  EXPECT_EQ(spec.devices.at("root").at("size"), "5GiB");
  EXPECT_THAT(spec.profiles, ::testing::ElementsAre("bmas"));
  EXPECT_FALSE(spec.devices.contains("gpu"));
}

TEST(WorkspaceInstance, DifferentGidAndDirPool) {
  Account a{"bob", 1002, 100, "/srv/home/bob", "/bin/sh"};
  InstanceSpec spec = WorkspaceInstance(a, "img", WorkspaceSettings{0, "", 0, "5GiB"}, "dir");
  EXPECT_EQ(spec.config.at("raw.idmap"), "uid 1002 1002\ngid 100 100");
  EXPECT_FALSE(spec.config.contains("limits.cpu"));
  EXPECT_FALSE(spec.config.contains("limits.memory"));
  EXPECT_FALSE(spec.devices.contains("root")) << "dir pools do not enforce a disk size";
}

TEST(CheckCaller, RootMayActOnAnyoneElseIsRefusedWithAReason) {
  EXPECT_TRUE(CheckCaller(0, "anyone"));
  auto other = CheckCaller(65534, "root");
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(other.error().message, ::testing::HasSubstr("only on their own workspace"));
}

TEST(SubIds, GrowsRootsRangeInPlaceAndAddsSingleIds) {
  const std::string text = "alice:100000:65536\nroot:362144:10000001\n_lxd:362144:10000001\n";
  const std::string out = EnsureSubIdsInText(text, 20000000, {1001});
  EXPECT_EQ(out,
            "alice:100000:65536\nroot:362144:20000000\n_lxd:362144:10000001\nroot:1001:1\n");
  EXPECT_EQ(EnsureSubIdsInText(out, 20000000, {1001}), out) << "idempotent";
  EXPECT_EQ(EnsureSubIdsInText(out, 0, {}), out);
}

// LXD uses root's first range of 65536 ids or more, so a new range goes in front of it.
TEST(SubIds, PutsABigEnoughRangeFirstWhenRootsFirstCannotGrow) {
  const std::string text = "root:1003:1\nroot:100000:65536\nbob:165536:65536\n";
  const std::string out = EnsureSubIdsInText(text, 1000000, {});
  EXPECT_EQ(out, "root:1003:1\nroot:231072:1000000\nroot:100000:65536\nbob:165536:65536\n");
  EXPECT_EQ(EnsureSubIdsInText(out, 1000000, {}), out) << "idempotent";
  // A later root range that is already big enough moves in front instead of a new one.
  EXPECT_EQ(EnsureSubIdsInText("root:100000:65536\nbob:165536:65536\nroot:231072:2000000\n",
                               1000000, {}),
            "root:231072:2000000\nroot:100000:65536\nbob:165536:65536\n");
  EXPECT_EQ(EnsureSubIdsInText("", 65536, {}), "root:100000:65536\n");
}

TEST(WorkspaceOwner, RootAndSystemAccountsAreRefusedUnlessAllowed) {
  const UidRange range = ParseLoginDefs("# comment\nUID_MIN\t 1000\nUID_MAX 60000\nGID_MIN 1000\n");
  EXPECT_EQ(range.min, 1000u);
  EXPECT_EQ(range.max, 60000u);
  EXPECT_EQ(ParseLoginDefs("").min, 1000u);
  EXPECT_EQ(ParseLoginDefs("UID_MIN 500\n").min, 500u);
  const Account root{"root", 0, 0, "/root", "/bin/bash"};
  const Account daemon{"daemon", 1, 1, "/usr/sbin", "/usr/sbin/nologin"};
  const Account nobody{"nobody", 65534, 65534, "/nonexistent", "/usr/sbin/nologin"};
  const Account alice{"alice", 1001, 1001, "/home/alice", "/bin/bash"};
  auto root_check = CheckWorkspaceOwner(root, range, false);
  ASSERT_FALSE(root_check);
  EXPECT_NE(root_check.error().message.find("uid 0"), std::string::npos);
  EXPECT_FALSE(CheckWorkspaceOwner(daemon, range, false));
  auto nobody_check = CheckWorkspaceOwner(nobody, range, false);
  ASSERT_FALSE(nobody_check);
  EXPECT_NE(nobody_check.error().message.find("--allow-system-account"), std::string::npos);
  EXPECT_TRUE(CheckWorkspaceOwner(alice, range, false));
  EXPECT_TRUE(CheckWorkspaceOwner(daemon, range, true));
}

TEST(AccountEntryCommand, PassesTheAccountAsArgumentsNeverAsScript) {
  Account a{"eve$(reboot)", 1234, 1235, "/home/eve", "/usr/bin/zsh"};
  const std::vector<std::string> c = AccountEntryCommand(a, "staff");
  ASSERT_EQ(c.size(), 10u);
  EXPECT_EQ(c[0], "/bin/sh");
  EXPECT_THAT(c[2], ::testing::Not(::testing::HasSubstr("eve")));
  EXPECT_EQ(std::vector<std::string>(c.begin() + 4, c.end()),
            (std::vector<std::string>{"eve$(reboot)", "1234", "1235", "staff", "/home/eve",
                                      "/usr/bin/zsh"}));
}

}  // namespace
}  // namespace bmas::lxd
