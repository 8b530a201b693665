#pragma once

// Fixtures shared by the workspace tests: LxdWorkspaceTest starts a real LXD with `bmas lxd up`
// (its own LXD_DIR under /tmp) and the test users bmastest1 and bmastest2; WorkspaceJobsTest
// adds a local Slurm cluster (`bmas slurm up`), the agent, and bmastest1's workspace. Needs
// root, LXD and Slurm (scripts/install-deps.sh); skips without them.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/process.h"
#include "engine_process.h"
#include "http_client.h"
#include "test_helpers.h"

namespace bmas::testing {

class LxdWorkspaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: LXD's socket and bmas lxd up are root-only";
    if (access("/usr/bin/lxd", X_OK) != 0 && access("/usr/sbin/lxd", X_OK) != 0) {
      GTEST_SKIP() << "needs LXD (bash scripts/install-deps.sh)";
    }
    std::string tmpl = "/tmp/bmas-lxd-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // Unprivileged containers' root (a high host uid) must get through to LXD_DIR.
    ASSERT_EQ(chmod(dir_.c_str(), 0711), 0);
    state_ = dir_ + "/state";
    config_ = dir_ + "/bmas.toml";
    std::ofstream(config_) << fmt::format("[lxd]\ndir = \"{}/lxd\"\npool_size = \"2GiB\"\n", dir_)
                           << config_extra_;
    chmod(config_.c_str(), 0644);
    CommandOutput up = Bmas({"lxd", "up"}, "", std::chrono::seconds(120));
    ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
    up_ = true;
    std::vector<std::string> build = {"image", "build"};
    build.insert(build.end(), image_args_.begin(), image_args_.end());
    CommandOutput image = Bmas(build, "", image_timeout_);
    ASSERT_EQ(image.exit_code, 0) << image.out << image.err;
    image_out_ = image.out;
    for (const char* user : {"bmastest1", "bmastest2"}) {
      if (getpwnam(user) == nullptr) {
        auto added = RunCommand({"useradd", "--create-home", user});
        ASSERT_TRUE(added && added->exit_code == 0);
      }
      std::filesystem::create_directories(Home(user));
    }
  }

  void TearDown() override {
    if (up_) {
      CommandOutput down = Bmas({"lxd", "down"}, "", std::chrono::seconds(120));
      EXPECT_EQ(down.exit_code, 0) << down.out << down.err;
    }
    if (dir_.empty()) return;
    // Nothing may stay mounted under the test's directory before it is removed.
    const std::vector<std::string> left = MountsUnder(dir_);
    EXPECT_THAT(left, ::testing::IsEmpty()) << "bmas lxd down left mounts behind";
    for (auto it = left.rbegin(); it != left.rend(); ++it) umount2(it->c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // `bmas --config CONFIG --state-dir STATE ARGS...`, as `user` ("" = root).
  CommandOutput Bmas(const std::vector<std::string>& args, const std::string& user = "",
                     std::chrono::seconds timeout = std::chrono::seconds(60)) {
    std::vector<std::string> argv;
    if (!user.empty()) {
      argv = {"setpriv", "--reuid=" + user, "--regid=" + user, "--init-groups"};
    }
    argv.push_back(user.empty() ? std::string(std::getenv("BMAS_BINARY")) : SharedBinary());
    argv.insert(argv.end(), {"--config", config_, "--state-dir", state_});
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv, {}, timeout);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  // Root's `bmas --config CONFIG --state-dir STATE ARGS...` with `env`: a second node's bmas.
  static CommandOutput BmasAt(const std::string& config, const std::string& state,
                              std::vector<std::string> args, std::vector<std::string> env = {}) {
    args.insert(args.begin(),
                {std::getenv("BMAS_BINARY"), "--config", config, "--state-dir", state});
    auto r = RunCommand(args, env, std::chrono::seconds(120));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  // A second node on this host: its own config and state dir (its own LXD); `Up` runs `bmas lxd
  // up` there, and the LXD it started is stopped when this goes out of scope.
  struct SecondNode {
    std::string config, state;
    bool up = false;
    CommandOutput Run(std::vector<std::string> args, std::vector<std::string> env = {}) const {
      return BmasAt(config, state, std::move(args), std::move(env));
    }
    CommandOutput Up() {
      CommandOutput r = Run({"lxd", "up"});
      up = r.exit_code == 0;
      return r;
    }
    ~SecondNode() {
      if (up) {
        EXPECT_EQ(Run({"lxd", "down"}).exit_code, 0);
      }
    }
  };

  // Root's bmas with `input` piped to its stdin (sh's pipeline ends with bmas's exit code).
  CommandOutput BmasWithInput(const std::string& input, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"sh", "-c", R"(printf %s "$0" | "$@")", input,
                                     std::getenv("BMAS_BINARY"), "--config", config_,
                                     "--state-dir", state_};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv, {}, std::chrono::seconds(60));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  // A copy of the binary other users can run (the build tree may be private).
  std::string SharedBinary() {
    const std::string copy = dir_ + "/bmas";
    if (!std::filesystem::exists(copy)) {
      std::filesystem::copy_file(std::getenv("BMAS_BINARY"), copy);
      chmod(copy.c_str(), 0755);
    }
    return copy;
  }

  static std::string Home(const std::string& user) { return getpwnam(user.c_str())->pw_dir; }

  void Create(const std::string& user, std::vector<std::string> flags = {}) {
    std::vector<std::string> args = {"workspace", "create", user};
    args.insert(args.end(), flags.begin(), flags.end());
    CommandOutput r = Bmas(args, "", std::chrono::seconds(120));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }

  rapidjson::Document List() {
    CommandOutput r = Bmas({"workspace", "list", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ParseJson(r.out);
  }

  std::string StatusOf(const std::string& user) {
    rapidjson::Document list = List();
    if (!list.IsArray()) return "<no list>";
    for (const auto& w : list.GetArray()) {
      if (Str(At(w, "user")) == user) return Str(At(w, "status"));
    }
    return "<none>";
  }

  std::string dir_, state_, config_;
  std::string config_extra_;  // more of the config file (TOML tables), set before SetUp
  // `bmas image build`'s flags and time, set before SetUp (the default: the 1 MB busybox image),
  // and what it printed.
  std::vector<std::string> image_args_ = {"--base", "busybox"};
  std::chrono::seconds image_timeout_{60};
  std::string image_out_;
  bool up_ = false;
};

class WorkspaceJobsTest : public LxdWorkspaceTest {
 protected:
  void SetUp() override {
    LxdWorkspaceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (access("/usr/sbin/slurmctld", X_OK) != 0) GTEST_SKIP() << "needs Slurm";
    std::vector<std::string> up = {"slurm", "up"};
    up.insert(up.end(), slurm_up_args_.begin(), slurm_up_args_.end());
    CommandOutput slurm = Bmas(up, "", std::chrono::seconds(120));
    ASSERT_EQ(slurm.exit_code, 0) << slurm.out << slurm.err;
    slurm_ = true;
    std::vector<std::string> args = {"--config", config_, "--state-dir", state_, "agent",
                                     "--reconcile-interval", reconcile_interval_};
    args.insert(args.end(), agent_flags_.begin(), agent_flags_.end());
    auto agent = Process::Start(args);
    ASSERT_TRUE(agent) << agent.error().message;
    agent_ = std::move(*agent);
    auto ready = agent_->WaitForLine("listening on", std::chrono::seconds(10));
    ASSERT_TRUE(ready) << ready.error().message << agent_->StderrText();
    Create("bmastest1");
  }

  void TearDown() override {
    agent_.reset();
    if (slurm_) Bmas({"slurm", "down"}, "", std::chrono::seconds(60));
    LxdWorkspaceTest::TearDown();
  }

  // `bmas ARGS...` as `user`, in the user's home (jobs start and write their output there).
  CommandOutput InHome(const std::string& user, const std::vector<std::string>& args,
                       std::vector<std::string> env = {}) {
    std::vector<std::string> argv = {"setpriv", "--reuid=" + user, "--regid=" + user,
                                     "--init-groups", "sh", "-c", "cd \"$0\" && exec \"$@\"",
                                     Home(user), SharedBinary(), "--config", config_,
                                     "--state-dir", state_};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv, env, std::chrono::seconds(60));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  // The port of the agent's metrics listener, 0 when it has not said.
  uint16_t AgentMetricsPort() {
    std::smatch m;
    const std::string out = agent_->stdout_text();
    if (!std::regex_search(out, m, std::regex("metrics listening on http://[^:]+:([0-9]+)"))) {
      return 0;
    }
    return static_cast<uint16_t>(std::stoi(m[1].str()));
  }

  // GET `target` from the agent's metrics listener, as an operator (with the operator secret);
  // "" when it does not answer.
  std::string AgentMetrics(const std::string& target = "/metrics") {
    const uint16_t port = AgentMetricsPort();
    if (port == 0) return "";
    HttpClient client(port);
    client.SetDefaultHeader("Authorization", OperatorBearerOf(state_));
    auto r = client.Get(target);
    return r ? r->body : "";
  }

  // What the workspace's /dev holds now.
  std::string DevicesIn(const std::string& user) {
    return Bmas({"workspace", "exec", user, "--", "ls", "/dev"}).out;
  }

  bool slurm_ = false;
  std::vector<std::string> agent_flags_;  // more flags for `bmas agent`, set before SetUp
  std::vector<std::string> slurm_up_args_;  // more for `bmas slurm up` (--cluster FILE)
  std::string reconcile_interval_ = "0.5";  // seconds between the agent's reconcile passes
  std::unique_ptr<Process> agent_;
};

}  // namespace bmas::testing
