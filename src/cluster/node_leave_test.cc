#include "cluster/node_leave.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "cluster/fake_node_daemons.h"

namespace bmas::cluster {
namespace {

namespace fs = std::filesystem;

TEST(DecideLeaveTest, RefusesWhatADrainHasNotLetGoOfUnlessForced) {
  struct Case {
    const char* name;
    Result<NodeInSlurm> seen;
    bool force;
    const char* error;  // "" = may leave
  };
  const Error down{ErrorCode::kUnavailable, "munged is not running", {}};
  const std::vector<Case> cases = {
      {"idle", NodeInSlurm{true, false, false, 0, 0}, false, ""},
      {"unknown to Slurm", NodeInSlurm{}, false, ""},
      {"drained and empty", NodeInSlurm{true, true, false, 0, 0}, false, ""},
      {"jobs, not drained", NodeInSlurm{true, false, false, 2, 1}, false,
       "oss01 runs 2 job(s), 1 of them inference replicas: run `bmas node drain oss01` on the "
       "controller first"},
      {"drained, jobs still run", NodeInSlurm{true, true, false, 1, 0}, false,
       "oss01 is drained but still runs 1 job(s): wait until it is empty (`bmas node drain oss01 "
       "--wait-s 600`"},
      {"Slurm out of reach", Result<NodeInSlurm>(down), false,
       "cannot ask Slurm what runs on oss01 (munged is not running)"},
      {"forced with jobs", NodeInSlurm{true, false, false, 2, 1}, true, ""},
      {"forced without Slurm", Result<NodeInSlurm>(down), true, ""},
  };
  for (const Case& c : cases) {
    auto decided = DecideLeave("oss01", c.seen, c.force);
    if (std::string(c.error).empty()) {
      EXPECT_TRUE(decided) << c.name << ": " << decided.error().message;
    } else {
      ASSERT_FALSE(decided) << c.name;
      EXPECT_EQ(decided.error().message.rfind(c.error, 0), 0u)
          << c.name << ": " << decided.error().message;
    }
  }
}

class NodeLeaveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/bmas-node-leave-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
    options_.host = "oss01";
    options_.paths.config_dir = dir_ + "/etc-bmas";
    options_.paths.munge_key = dir_ + "/munge/munge.key";
    options_.paths.run_dir = dir_ + "/run";
    options_.paths.state_dir = dir_ + "/state";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // What a join leaves: its files, the configuration slurmd fetched, and its daemons running.
  void Joined() {
    for (const char* d :
         {"/etc-bmas", "/munge", "/hooks", "/spool/conf-cache", "/lxd", "/state/run"}) {
      fs::create_directories(dir_ + d);
    }
    std::ofstream(dir_ + "/etc-bmas/bmas.toml") << fmt::format(
        "[cluster]\ncontroller = {{ name = \"mgs1\", address = \"127.0.0.1\" }}\n"
        "[cluster.slurm]\nprolog = \"{0}/hooks/prolog\"\nepilog = \"{0}/hooks/epilog\"\n"
        "spool_dir = \"{0}/spool\"\n"
        "[[cluster.nodes]]\nnames = \"oss01\"\naddress = \"10.0.0.11\"\ncpus = 4\n"
        "memory_mib = 1024\n"
        "[[cluster.partitions]]\nname = \"batch\"\nnodes = \"ALL\"\ndefault = true\n",
        dir_);
    for (const std::string f : {"/etc-bmas/ca.crt", "/etc-bmas/node.crt", "/etc-bmas/node.key",
                                "/munge/munge.key", "/hooks/prolog", "/hooks/epilog",
                                "/spool/conf-cache/slurm.conf", "/lxd/workspace-data",
                                "/state/run/operator.secret"}) {
      std::ofstream(dir_ + f) << "x";
    }
    daemons_.munge_ = daemons_.joined_munge_ = daemons_.slurmd_ = daemons_.agent_ = true;
    slurm_.seen_ = NodeInSlurm{true, true, true, 0, 0};
  }

  std::string dir_;
  NodeLeaveOptions options_;
  FakeNodeDaemons daemons_;
  FakeNodeSlurm slurm_;
};

TEST_F(NodeLeaveTest, ADrainedDynamicNodeStopsItsDaemonsLeavesSlurmAndRemovesTheJoinsFiles) {
  Joined();
  auto left = LeaveNode(options_, daemons_, slurm_);
  ASSERT_TRUE(left) << left.error().message;
  EXPECT_TRUE(left->was_joined);
  EXPECT_EQ(slurm_.conf_, dir_ + "/spool/conf-cache/slurm.conf");
  EXPECT_EQ(left->stopped, (std::vector<std::string>{"agent", "slurmd", "munged"}));
  EXPECT_EQ(slurm_.deleted_, (std::vector<std::string>{"oss01"}));
  EXPECT_TRUE(left->deleted_from_slurm);
  EXPECT_EQ(left->admin_step, "");
  EXPECT_FALSE(fs::exists(dir_ + "/etc-bmas"));
  EXPECT_FALSE(fs::exists(dir_ + "/munge/munge.key"));
  EXPECT_FALSE(fs::exists(dir_ + "/hooks/prolog"));
  EXPECT_FALSE(fs::exists(dir_ + "/hooks/epilog"));
  EXPECT_FALSE(fs::exists(dir_ + "/spool/conf-cache"));
  EXPECT_FALSE(fs::exists(dir_ + "/state/run/operator.secret"));
  EXPECT_TRUE(fs::exists(dir_ + "/lxd/workspace-data"));  // LXD's are left alone
  EXPECT_EQ(left->removed.size(), 9u);

  // Again: nothing left to do, and Slurm is not asked.
  slurm_.conf_.clear();
  auto again = LeaveNode(options_, daemons_, slurm_);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_FALSE(again->was_joined);
  EXPECT_TRUE(again->stopped.empty());
  EXPECT_TRUE(again->removed.empty());
  EXPECT_EQ(slurm_.conf_, "");
}

TEST_F(NodeLeaveTest, ANodeWithJobsItWasNotDrainedOfIsRefusedAndKeepsEverything) {
  Joined();
  slurm_.seen_ = NodeInSlurm{true, false, true, 1, 0};
  auto left = LeaveNode(options_, daemons_, slurm_);
  ASSERT_FALSE(left);
  EXPECT_NE(left.error().message.find("bmas node drain oss01"), std::string::npos)
      << left.error().message;
  EXPECT_TRUE(daemons_.stop_order_.empty());
  EXPECT_TRUE(slurm_.deleted_.empty());
  EXPECT_TRUE(fs::exists(dir_ + "/etc-bmas/node.key"));
  EXPECT_TRUE(fs::exists(dir_ + "/munge/munge.key"));

  options_.force = true;
  auto forced = LeaveNode(options_, daemons_, slurm_);
  ASSERT_TRUE(forced) << forced.error().message;
  EXPECT_EQ(forced->stopped, (std::vector<std::string>{"agent", "slurmd", "munged"}));
  EXPECT_FALSE(fs::exists(dir_ + "/etc-bmas/node.key"));
}

TEST_F(NodeLeaveTest, WhatSlurmKeepsIsTheAdminsOneLine) {
  Joined();
  slurm_.fail_delete_ = true;
  auto dynamic = LeaveNode(options_, daemons_, slurm_);
  ASSERT_TRUE(dynamic) << dynamic.error().message;
  EXPECT_FALSE(dynamic->deleted_from_slurm);
  EXPECT_NE(dynamic->admin_step.find("run `scontrol delete nodename=oss01` on the controller"),
            std::string::npos)
      << dynamic->admin_step;

  Joined();
  slurm_.seen_.dynamic = false;  // in slurm.conf: only the admin takes it out
  auto listed = LeaveNode(options_, daemons_, slurm_);
  ASSERT_TRUE(listed) << listed.error().message;
  EXPECT_TRUE(slurm_.deleted_.empty());
  EXPECT_NE(listed->admin_step.find("stays in the controller's slurm.conf"), std::string::npos)
      << listed->admin_step;
}

TEST_F(NodeLeaveTest, AMungedTheJoinDidNotStartKeepsRunning) {
  Joined();
  daemons_.joined_munge_ = false;  // the system's
  auto left = LeaveNode(options_, daemons_, slurm_);
  ASSERT_TRUE(left) << left.error().message;
  EXPECT_EQ(left->stopped, (std::vector<std::string>{"agent", "slurmd"}));
  EXPECT_TRUE(daemons_.munge_);
}

}  // namespace
}  // namespace bmas::cluster
