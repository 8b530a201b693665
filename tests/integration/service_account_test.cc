// The service account must not become root. `bmas up` (root) hands the store's directory to the
// service account and opens the store itself; what the account may plant there (a symlink to a
// root file, a link on the way to the store) must not steer root's chown, chmod or SQLite. And a
// daemon that up recorded is recognised by its start time, not by a name anyone may take.
// The attacks run as an account the test creates (standing in for `bmas`); the test is root.

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/process.h"
#include "engine_process.h"
#include "slurm/local_cluster.h"
#include "store/store.h"
#include "test_helpers.h"

namespace bmas {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr const char* kCanaryText = "root:$6$not-for-the-service-account:19000:0:99999:7:::\n";

class ServiceAccountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "these attacks need root to drive a second account";
    account_ = testing::EnsureUnixUser("bmas-svc-test");
    passwd* pw = getpwnam(account_.c_str());
    ASSERT_NE(pw, nullptr);
    uid_ = pw->pw_uid;
    gid_ = pw->pw_gid;
    std::string tmpl = fs::temp_directory_path() / "bmas-svc-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    base_ = tmpl;
    chmod(base_.c_str(), 0755);
    state_ = base_ + "/state";
    ASSERT_EQ(mkdir(state_.c_str(), 0755), 0);
    // A root file the account must never get: root's own, in a directory only root enters.
    ASSERT_EQ(mkdir((base_ + "/root-only").c_str(), 0700), 0);
    canary_ = base_ + "/root-only/shadow";
    std::ofstream(canary_) << kCanaryText;
    ASSERT_EQ(chmod(canary_.c_str(), 0640), 0);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(base_, ec);
  }

  // Runs `body` in a child as the test account; returns its exit status.
  int AsAccount(const std::function<int()>& body) const {
    pid_t child = fork();
    if (child == 0) {
      if (setgroups(0, nullptr) != 0 || setgid(gid_) != 0 || setuid(uid_) != 0) _exit(99);
      _exit(body());
    }
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  }

  // The account replaces store/NAME with a symlink to the canary.
  void PlantLink(const std::string& name) const {
    const std::string at = state_ + "/store/" + name;
    ASSERT_EQ(AsAccount([&] {
                unlink(at.c_str());
                return symlink(canary_.c_str(), at.c_str()) == 0 ? 0 : 1;
              }),
              0)
        << "the account could not plant " << at;
  }

  void ExpectCanaryIntact() const {
    struct stat st;
    ASSERT_EQ(stat(canary_.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u) << "root handed its file to the service account";
    EXPECT_EQ(st.st_gid, 0u);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    std::ifstream in(canary_);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(text.str(), kCanaryText);
  }

  std::string account_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  std::string base_, state_, canary_;
};

// The legitimate path: a fresh state dir, the store handed over and opened by root, and again
// after the account (the gateway) has used it.
TEST_F(ServiceAccountTest, RootHandsOverAndOpensAFreshStore) {
  ASSERT_TRUE(HandStoreTo(state_, uid_, gid_));
  struct stat st;
  ASSERT_EQ(stat((state_ + "/store").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid_);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  {
    auto store = OpenSqliteStore(StorePath(state_));
    ASSERT_TRUE(store) << store.error().message;
    ASSERT_TRUE((*store)->AddUser("alice", {}));
  }
  ASSERT_TRUE(HandStoreTo(state_, uid_, gid_));
  ASSERT_EQ(stat(StorePath(state_).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid_) << "the store file is the service account's";
  EXPECT_EQ(st.st_mode & 077, 0u);
  auto again = OpenSqliteStore(StorePath(state_));
  ASSERT_TRUE(again) << again.error().message;
  auto alice = (*again)->FindUser("alice");
  ASSERT_TRUE(alice);
  EXPECT_TRUE(alice->has_value());
}

// The account plants bmas.db-shm, then bmas.db-wal, then bmas.db as links to a root file:
// `bmas up`'s hand-over and root's own opens of the store refuse, naming the link, and the root
// file keeps its owner, mode and contents. Removing the links makes it all work again.
TEST_F(ServiceAccountTest, LinksPlantedInTheStoreDirDoNotSteerRoot) {
  ASSERT_TRUE(HandStoreTo(state_, uid_, gid_));
  {
    auto store = OpenSqliteStore(StorePath(state_));
    ASSERT_TRUE(store) << store.error().message;
    ASSERT_TRUE((*store)->AddUser("alice", {}));
  }
  for (const std::string name : {"bmas.db-shm", "bmas.db-wal", "bmas.db", "bmas.db-journal"}) {
    SCOPED_TRACE(name);
    const std::string saved = state_ + "/store/" + name + ".saved";
    const std::string at = state_ + "/store/" + name;
    const bool existed = fs::exists(fs::symlink_status(at));
    if (existed) {
      ASSERT_EQ(rename(at.c_str(), saved.c_str()), 0);
    }
    PlantLink(name);

    auto handed = HandStoreTo(state_, uid_, gid_);
    ASSERT_FALSE(handed) << "bmas up followed " << at;
    EXPECT_THAT(handed.error().message, HasSubstr(name));
    EXPECT_THAT(handed.error().message, HasSubstr("symlink"));
    ExpectCanaryIntact();

    auto opened = OpenSqliteStore(StorePath(state_));
    ASSERT_FALSE(opened) << "root opened the store through " << at;
    EXPECT_THAT(opened.error().message, HasSubstr("symlink"));
    ExpectCanaryIntact();

    ASSERT_EQ(unlink(at.c_str()), 0);
    if (existed) {
      ASSERT_EQ(rename(saved.c_str(), at.c_str()), 0);
    }
  }
  ASSERT_TRUE(HandStoreTo(state_, uid_, gid_));
  auto store = OpenSqliteStore(StorePath(state_));
  ASSERT_TRUE(store) << store.error().message;
  auto alice = (*store)->FindUser("alice");
  ASSERT_TRUE(alice);
  EXPECT_TRUE(alice->has_value());
  ExpectCanaryIntact();
}

// A link on the way to the store: the state dir reached through a link in a directory the
// account writes, and a store directory that is a link. Root refuses both.
TEST_F(ServiceAccountTest, LinksOnTheWayToTheStoreDoNotSteerRoot) {
  // The account's directory, and in it a link to root's state dir (it could point it anywhere).
  const std::string theirs = base_ + "/theirs";
  ASSERT_EQ(mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(chown(theirs.c_str(), uid_, gid_), 0);
  const std::string via = theirs + "/state";
  ASSERT_EQ(AsAccount([&] { return symlink(state_.c_str(), via.c_str()) == 0 ? 0 : 1; }), 0);
  auto handed = HandStoreTo(via, uid_, gid_);
  ASSERT_FALSE(handed);
  EXPECT_THAT(handed.error().message, HasSubstr("symlink"));
  auto opened = OpenSqliteStore(StorePath(via));
  ASSERT_FALSE(opened);
  EXPECT_THAT(opened.error().message, HasSubstr("symlink"));

  // store -> a directory holding a link to the canary.
  const std::string decoy = theirs + "/store";
  ASSERT_EQ(AsAccount([&] {
              return mkdir(decoy.c_str(), 0700) == 0 &&
                             symlink(canary_.c_str(), (decoy + "/bmas.db").c_str()) == 0
                         ? 0
                         : 1;
            }),
            0);
  ASSERT_EQ(symlink(decoy.c_str(), (state_ + "/store").c_str()), 0);
  handed = HandStoreTo(state_, uid_, gid_);
  ASSERT_FALSE(handed) << "bmas up followed the store directory's link";
  EXPECT_THAT(handed.error().message, HasSubstr("symlink"));
  opened = OpenSqliteStore(StorePath(state_));
  ASSERT_FALSE(opened);
  ExpectCanaryIntact();

  ASSERT_EQ(unlink((state_ + "/store").c_str()), 0);
  ASSERT_TRUE(HandStoreTo(state_, uid_, gid_));
  EXPECT_TRUE(OpenSqliteStore(StorePath(state_)));
  ExpectCanaryIntact();
}

// The whole path, with the real service account: the last `bmas up` handed it the store; it
// plants bmas.db-shm -> a root file; the next `bmas up` (root) stops with an error that names
// the link, and the root file is untouched. Without the link, `bmas up` runs.
TEST_F(ServiceAccountTest, BmasUpRefusesALinkTheServiceAccountPlantedInTheStore) {
  if (getpwnam("bmas") == nullptr) {
    auto made = RunCommand({"useradd", "--system", "--user-group", "--no-create-home",
                            "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "bmas"});
    ASSERT_TRUE(made && made->exit_code == 0) << (made ? made->err : made.error().message);
  }
  passwd* pw = getpwnam("bmas");
  ASSERT_NE(pw, nullptr);
  uid_ = pw->pw_uid;  // AsAccount acts as the service account from here on
  gid_ = pw->pw_gid;
  ASSERT_TRUE(HandStoreTo(state_, uid_, gid_));
  PlantLink("bmas.db-shm");

  // The account must reach the binary and the config, as `bmas up` checks.
  const std::string binary = base_ + "/bmas", config = base_ + "/bmas.toml";
  fs::copy_file(std::getenv("BMAS_BINARY"), binary);
  std::ofstream(config) << "[engine]\nprofile = \"instant\"\n[up]\nslurm = false\nlxd = false\n";
  ASSERT_EQ(chmod(config.c_str(), 0644), 0);
  const std::string built = std::getenv("BMAS_BINARY");
  setenv("BMAS_BINARY", binary.c_str(), 1);
  auto start_up = [&] {
    return testing::Process::Start({"--config", config, "up", "--engines", "1"},
                                   {{"BMAS_STATE_DIR", state_}});
  };
  auto refused = start_up();
  ASSERT_TRUE(refused) << refused.error().message;
  auto status = (*refused)->Wait(60s);
  ASSERT_TRUE(status.has_value()) << "bmas up ran on with a link in the store";
  EXPECT_FALSE(status->Success());
  EXPECT_THAT((*refused)->StderrText(), HasSubstr("bmas.db-shm"));
  EXPECT_THAT((*refused)->StderrText(), HasSubstr("symlink"));
  ExpectCanaryIntact();

  ASSERT_EQ(AsAccount([&] { return unlink((state_ + "/store/bmas.db-shm").c_str()); }), 0);
  auto up = start_up();
  setenv("BMAS_BINARY", built.c_str(), 1);
  ASSERT_TRUE(up) << up.error().message;
  auto running = (*up)->WaitForLine("bmas up: running", 30s);
  ASSERT_TRUE(running) << running.error().message << (*up)->StderrText();
  EXPECT_THAT((*up)->stdout_text(), HasSubstr("engines and gateway run as the bmas account"));
  (*up)->Signal(SIGINT);
  status = (*up)->Wait(30s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->Success()) << status->ToString() << (*up)->StderrText();
  ExpectCanaryIntact();
}

// After a reboot, the account's process at the pid that local.json records for slurmctld
// renames itself `slurmctld`: its start time is not the recorded one, so it is not taken for
// the daemon (and `bmas up` starts Slurm instead of leaving it "running"). The real start time
// is recognised.
TEST_F(ServiceAccountTest, ARenamedProcessIsNotTheRecordedDaemon) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t impostor = fork();
  if (impostor == 0) {
    close(ready[0]);
    if (setgroups(0, nullptr) != 0 || setgid(gid_) != 0 || setuid(uid_) != 0) _exit(99);
    prctl(PR_SET_NAME, "slurmctld");
    [[maybe_unused]] ssize_t n = write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  const unsigned long long ticks = ProcessStartTicks(impostor);
  ASSERT_NE(ticks, 0u);
  // The name alone is fooled: that is what the start time is for.
  EXPECT_TRUE(ProcessRunning(impostor, "slurmctld"));
  EXPECT_FALSE(ProcessRunning(impostor, "slurmctld", ticks + 1));
  EXPECT_TRUE(ProcessRunning(impostor, "slurmctld", ticks));

  DaemonProcess recorded{"slurmctld", "slurmctld", impostor, ticks + 1, "", {}, {}};
  EXPECT_FALSE(recorded.Runs());
  // local.json as a `bmas slurm up` before the reboot left it, with this pid.
  ASSERT_EQ(mkdir((state_ + "/slurm").c_str(), 0755), 0);
  std::ofstream(state_ + "/slurm/local.json") << fmt::format(
      R"({{"state_dir": "{}", "root": "{}/slurm", "nodes": ["n1"], "daemons": [)"
      R"({{"name": "slurmctld", "comm": "slurmctld", "pid": {}, "start_ticks": {}}}]}})",
      state_, state_, impostor, ticks + 1);
  ASSERT_TRUE(slurm::ReadLocalCluster(state_));
  auto running = slurm::RunningLocalCluster(state_);
  EXPECT_FALSE(running) << "a renamed process was taken for slurmctld";

  recorded.start_ticks = ticks;
  EXPECT_TRUE(recorded.Runs());
  std::ofstream(state_ + "/slurm/local.json") << fmt::format(
      R"({{"state_dir": "{}", "root": "{}/slurm", "nodes": ["n1"], "daemons": [)"
      R"({{"name": "slurmctld", "comm": "slurmctld", "pid": {}, "start_ticks": {}}}]}})",
      state_, state_, impostor, ticks);
  EXPECT_TRUE(slurm::RunningLocalCluster(state_));

  kill(impostor, SIGKILL);
  waitpid(impostor, nullptr, 0);
}

}  // namespace
}  // namespace bmas
