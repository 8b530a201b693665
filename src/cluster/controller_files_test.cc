#include "cluster/controller_files.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cluster/node_files.h"

namespace bmas::cluster {
namespace {

namespace fs = std::filesystem;

class ControllerFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "gives the keys to the munge and slurm accounts";
    if (getpwnam("munge") == nullptr || getpwnam("slurm") == nullptr) {
      GTEST_SKIP() << "needs the munge and slurm accounts";
    }
    char templ[] = "/tmp/bmas-controller-files-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
    inventory_ = ParseCluster(
        "[cluster]\ncontroller = { name = \"mgs1\", address = \"10.0.0.1\" }\n"
        "[cluster.slurm]\nslurm_user = \"slurm\"\n"
        "[[cluster.nodes]]\nnames = \"oss01\"\naddress = \"10.0.0.11\"\ncpus = 4\n"
        "memory_mib = 1024\n"
        "[[cluster.partitions]]\nname = \"batch\"\nnodes = \"ALL\"\ndefault = true\n",
        "test.toml");
    paths_.slurm_dir = dir_ + "/slurm";
    paths_.munge_key = dir_ + "/munge.key";
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string dir_;
  Cluster inventory_;
  ControllerPaths paths_;
  ManualEnv env_;
};

TEST_F(ControllerFilesTest, KeysGoToTheirAccountsAndAreNeverReplaced) {
  auto first = WriteControllerFiles(inventory_, paths_, env_);
  ASSERT_TRUE(first) << first.error().message;
  auto munge = ReadNodeFile(paths_.munge_key);
  auto jwt = ReadNodeFile(paths_.slurm_dir + "/jwt_hs256.key");
  ASSERT_TRUE(munge && *munge && jwt && *jwt);
  EXPECT_EQ((*munge)->uid, getpwnam("munge")->pw_uid);
  EXPECT_EQ((*jwt)->uid, getpwnam("slurm")->pw_uid);
  EXPECT_EQ((*munge)->mode, 0400u);
  EXPECT_EQ((*jwt)->mode, 0400u);
  EXPECT_EQ((*munge)->contents.size(), kMungeKeyBytes);
  EXPECT_EQ((*jwt)->contents.size(), kJwtKeyBytes);
  auto conf = ReadNodeFile(paths_.slurm_dir + "/slurm.conf");
  ASSERT_TRUE(conf && *conf);
  EXPECT_NE((*conf)->contents.find("SlurmctldParameters=enable_configless"), std::string::npos);

  // A second init, with a slurm.conf the admin changed: nothing is replaced.
  std::ofstream(paths_.slurm_dir + "/slurm.conf", std::ios::app) << "# mine\n";
  auto second = WriteControllerFiles(inventory_, paths_, env_);
  ASSERT_TRUE(second) << second.error().message;
  for (const ControllerFile& f : *second) {
    EXPECT_FALSE(f.created) << f.path;
    if (f.path.ends_with("slurm.conf")) {
      EXPECT_NE(f.note.find("differs"), std::string::npos);
    }
    if (f.path.ends_with("gres.conf")) {
      EXPECT_EQ(f.note, "");
    }
  }
  EXPECT_EQ((*ReadNodeFile(paths_.munge_key))->contents, (*munge)->contents);
  EXPECT_EQ((*ReadNodeFile(paths_.slurm_dir + "/jwt_hs256.key"))->contents, (*jwt)->contents);
}

TEST(ConfiglessSlurmConfTest, DynamicNodesAreLeftOutAndCounted) {
  const Cluster inventory = ParseCluster(
      "[cluster]\ncontroller = { name = \"mgs1\", address = \"10.0.0.1\" }\n"
      "[[cluster.nodes]]\nnames = \"oss01\"\naddress = \"10.0.0.11\"\ncpus = 4\n"
      "memory_mib = 1024\n"
      "[[cluster.nodes]]\nnames = \"oss02\"\naddress = \"10.0.0.12\"\ncpus = 4\n"
      "memory_mib = 1024\n"
      "[[cluster.nodes]]\nnames = \"oss03\"\naddress = \"10.0.0.13\"\ncpus = 4\n"
      "memory_mib = 1024\n"
      "[[cluster.partitions]]\nname = \"batch\"\nnodes = \"oss[01-03]\"\ndefault = true\n",
      "test.toml");
  const std::string fixed = ConfiglessSlurmConf(inventory);
  EXPECT_NE(fixed.find("NodeName=oss"), std::string::npos) << fixed;
  EXPECT_EQ(fixed.find("MaxNodeCount"), std::string::npos);
  const std::string dynamic = ConfiglessSlurmConf(inventory, true);
  EXPECT_EQ(dynamic.find("NodeName="), std::string::npos) << dynamic;
  EXPECT_NE(dynamic.find(" Nodes=ALL"), std::string::npos) << dynamic;
  EXPECT_NE(dynamic.find("MaxNodeCount=3\n"), std::string::npos) << dynamic;
  EXPECT_NE(dynamic.find("SlurmctldParameters=enable_configless\n"), std::string::npos);
}

TEST(HookScriptTest, RunsTheHookAndNeverFails) {
  const std::string s = HookScript("/usr/bin/bmas", "prolog");
  EXPECT_EQ(s.rfind("#!/bin/sh\n", 0), 0u);
  EXPECT_NE(s.find("'/usr/bin/bmas' slurm hook prolog"), std::string::npos);
  EXPECT_TRUE(s.ends_with("exit 0\n"));
}

}  // namespace
}  // namespace bmas::cluster
