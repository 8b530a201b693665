#include "daemon/node_daemons_systemd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdlib.h>


namespace bmas {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// systemctl as the tests see it: each call recorded; units active once enabled, inactive once
// disabled; `fail` makes every call of that verb fail.
struct FakeSystemctl {
  std::vector<std::string> calls;
  std::set<std::string> active;
  std::string fail;
  SystemctlRunner Runner() {
    return [this](const std::vector<std::string>& argv) -> Result<CommandOutput> {
      std::string line;
      for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
      calls.push_back(line);
      CommandOutput out;
      out.exit_code = 0;
      if (argv.size() >= 2 && argv[1] == fail) {
        out.exit_code = 1;
        out.err = "Job for unit failed";
        return out;
      }
      if (argv[1] == "enable") active.insert(argv.back());
      if (argv[1] == "disable") active.erase(argv.back());
      if (argv[1] == "is-active") out.exit_code = active.contains(argv.back()) ? 0 : 3;
      return out;
    };
  }
};

// A fresh directory, removed with its contents.
struct Dir {
  Dir() {
    char templ[] = "/tmp/bmas-systemd-test-XXXXXX";
    path_ = mkdtemp(templ) != nullptr ? templ : "/tmp/bmas-systemd-test";
  }
  ~Dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string path_;
};

class SystemdNodeDaemonsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    paths_.state_dir = dir_.path() + "/state";
    conf_cache_ = dir_.path() + "/conf-cache/slurm.conf";
    daemons_ = NewSystemdNodeDaemons(systemctl_.Runner(), dir_.path() + "/units", "/usr/bin/bmas");
  }
  std::string DropIn(const std::string& unit) {
    return dir_.path() + "/units/" + unit + ".d/bmas-join.conf";
  }

  Dir dir_;
  FakeSystemctl systemctl_;
  cluster::NodePaths paths_;
  std::string conf_cache_;
  std::unique_ptr<cluster::NodeDaemons> daemons_;
};

TEST_F(SystemdNodeDaemonsTest, SlurmdRunsConfiglessFromADropInThatClearsDebiansCondition) {
  fs::create_directories(fs::path(conf_cache_).parent_path());
  std::ofstream(conf_cache_) << "ClusterName=lab\n";  // as slurmd leaves it once it fetched it
  EXPECT_FALSE(daemons_->SlurmdRunning(paths_));
  auto r = daemons_->StartSlurmd(
      paths_, {"-D", "--conf-server", "mgs1:6817", "-Z", "--conf", "CPUs=4 Gres=gpu:h100:2"},
      conf_cache_);
  ASSERT_TRUE(r) << r.error().message;
  const std::string unit = Read(DropIn("slurmd.service"));
  EXPECT_THAT(unit, HasSubstr("[Unit]\nConditionPathExists=\n"));
  EXPECT_THAT(unit, HasSubstr("ExecStart=\nExecStart=/usr/sbin/slurmd -s -D --conf-server "
                              "mgs1:6817 -Z --conf \"CPUs=4 Gres=gpu:h100:2\"\n"));
  EXPECT_THAT(systemctl_.calls,
              ElementsAre("systemctl is-active --quiet slurmd.service", "systemctl daemon-reload",
                          "systemctl enable --now slurmd.service"));
  EXPECT_TRUE(daemons_->SlurmdRunning(paths_));
  // systemd itself reads Debian's unit with the drop-in without complaint.
  if (fs::exists("/usr/bin/systemd-analyze") && fs::exists("/lib/systemd/system/slurmd.service")) {
    fs::copy_file("/lib/systemd/system/slurmd.service", dir_.path() + "/units/slurmd.service");
    auto verify = RunCommand({"systemd-analyze", "verify", dir_.path() + "/units/slurmd.service"},
                             {"SYSTEMD_UNIT_PATH=" + dir_.path() + "/units:"});
    ASSERT_TRUE(verify) << verify.error().message;
    EXPECT_EQ(verify->exit_code, 0) << verify->out << verify->err;
    fs::remove(dir_.path() + "/units/slurmd.service");
  }

  // Leave: the join's unit is disabled and stopped, its drop-in gone.
  auto stopped = daemons_->StopJoined(paths_, "slurmd");
  ASSERT_TRUE(stopped) << stopped.error().message;
  EXPECT_TRUE(*stopped);
  EXPECT_FALSE(fs::exists(DropIn("slurmd.service")));
  EXPECT_FALSE(daemons_->SlurmdRunning(paths_));
  // A unit without the join's drop-in is the admin's: left alone.
  systemctl_.calls.clear();
  auto again = daemons_->StopJoined(paths_, "slurmd");
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);
  EXPECT_TRUE(systemctl_.calls.empty());
}

TEST_F(SystemdNodeDaemonsTest, TheAgentsUnitNamesTheJoinsConfigAndStateDir) {
  systemctl_.fail = "enable";
  auto r = daemons_->StartAgent(paths_, "/etc/bmas/bmas.toml");
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("systemctl enable --now bmas-agent.service"));
  EXPECT_THAT(r.error().message, HasSubstr("journalctl -u bmas-agent.service"));
  const std::string unit = Read(DropIn("bmas-agent.service"));
  EXPECT_THAT(unit, HasSubstr("Environment=BMAS_STATE_DIR=" + paths_.state_dir + "\n"));
  EXPECT_THAT(unit, HasSubstr("ExecStart=\nExecStart=/usr/bin/bmas --config /etc/bmas/bmas.toml "
                              "--state-dir " + paths_.state_dir + " agent\n"));
  // A failed join's undo disables what it enabled and removes the drop-in.
  systemctl_.fail.clear();
  systemctl_.calls.clear();
  daemons_->StopStarted();
  EXPECT_THAT(systemctl_.calls, ElementsAre("systemctl disable --now bmas-agent.service",
                                            "systemctl daemon-reload"));
  EXPECT_FALSE(fs::exists(DropIn("bmas-agent.service")));
}

}  // namespace
}  // namespace bmas
