// `bmas lxd up/down/status`, `bmas image build` and `bmas workspace ...` against a real LXD that
// each test starts with `bmas lxd up` (its own LXD_DIR under /tmp, so nothing is shared with a
// system LXD) and stops at its end. Needs root and LXD's packages (scripts/install-deps.sh).

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/process.h"
#include "engine_process.h"
#include "http_client.h"
#include "default_image.h"
#include "lxd_workspace_fixture.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Prints a workspace's memory limit (bytes) and process limit, read from inside.
constexpr const char* kReadCgroupLimits =
    "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max;"
    "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max";

TEST_F(LxdWorkspaceTest, UpIsIdempotentAndStatusNamesThePoolDriver) {
  CommandOutput again = Bmas({"lxd", "up"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("storage pool bmas ("));
  CommandOutput status = Bmas({"lxd", "status", "--json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  rapidjson::Document s = ParseJson(status.out);
  EXPECT_TRUE(At(s, "running").IsTrue());
  const std::string driver = Str(At(s, "pool_driver"));
  EXPECT_TRUE(driver == "btrfs" || driver == "dir") << status.out;
  EXPECT_EQ(At(s, "disk_limits_enforced").IsTrue(), driver == "btrfs");
  // One lxd and one lxcfs at most, however often `up` runs.
  EXPECT_LE(At(s, "started").Size(), 2u) << status.out;
}

TEST_F(LxdWorkspaceTest, CreateExecStopStartDelete) {
  Create("bmastest1", {"--image", "bmas-busybox"});
  EXPECT_EQ(StatusOf("bmastest1"), "Running");
  const passwd* pw = getpwnam("bmastest1");
  CommandOutput r = Bmas({"workspace", "exec", "bmastest1", "--", "sh", "-c",
                          "id -u; id -g; echo $HOME; pwd; echo oops >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, fmt::format("{}\n{}\n{}\n{}\n", pw->pw_uid, pw->pw_gid, pw->pw_dir, pw->pw_dir));
  EXPECT_EQ(r.err, "oops\n");

  CommandOutput stop = Bmas({"workspace", "stop", "bmastest1"});
  ASSERT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_EQ(StatusOf("bmastest1"), "Stopped");
  CommandOutput stopped_exec = Bmas({"workspace", "exec", "bmastest1", "--", "true"});
  EXPECT_NE(stopped_exec.exit_code, 0);
  EXPECT_THAT(stopped_exec.err, HasSubstr("bmas workspace start bmastest1"));

  CommandOutput start = Bmas({"workspace", "start", "bmastest1"});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  EXPECT_EQ(StatusOf("bmastest1"), "Running");
  EXPECT_EQ(Bmas({"workspace", "exec", "bmastest1", "--", "true"}).exit_code, 0);

  CommandOutput del = Bmas({"workspace", "delete", "bmastest1"});
  ASSERT_EQ(del.exit_code, 0) << del.err;
  EXPECT_EQ(StatusOf("bmastest1"), "<none>");
  EXPECT_TRUE(fs::is_directory(pw->pw_dir)) << "the home stays";
}

TEST_F(LxdWorkspaceTest, LimitsAreVisibleInside) {
  Create("bmastest1", {"--cpus", "1", "--memory", "256MiB", "--processes", "100"});
  CommandOutput r = Bmas({"workspace", "exec", "bmastest1", "--", "sh", "-c",
                          "nproc; grep MemTotal /proc/meminfo"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "1\nMemTotal:         262144 kB\n")  // lxcfs shows the memory limit
      << Bmas({"lxd", "status"}).out;
  // The cgroups the image's init mounts hold the limits (v1 controllers or v2's files).
  CommandOutput cg = Bmas({"workspace", "exec", "bmastest1", "--", "sh", "-c", kReadCgroupLimits});
  EXPECT_EQ(cg.out, "268435456\n100\n") << cg.err;
  // The process limit: count the sleeps that could start (the cgroup's pids.max is not
  // mounted inside an unprivileged container on a cgroup v1 host). Once the limit is hit no
  // fork works, so only builtins run after the loop, and kill -1 ends the user's processes.
  CommandOutput pids = Bmas(
      {"workspace", "exec", "bmastest1", "--", "sh", "-c",
       "( i=0; while [ $i -lt 150 ]; do sleep 60 >/dev/null 2>&1 & i=$((i+1)); "
       "echo $i > /tmp/n; done ) 2>/dev/null; read n < /tmp/n; echo $n; kill -9 -1"});
  const int running = std::atoi(pids.out.c_str());
  EXPECT_GT(running, 50) << pids.out;
  EXPECT_LT(running, 100) << pids.out;
  rapidjson::Document list = List();
  EXPECT_EQ(Str(At(At(list, 0), "memory")), "256MiB");
}

// Root's `workspace shell` on a terminal: a login shell on a pty in the workspace, as the user,
// through LXD's interactive exec websockets; its exit code comes back.
TEST_F(LxdWorkspaceTest, RootsShellRunsOnAPtyInTheWorkspace) {
  Create("bmastest1");
  int terminal = -1;
  const pid_t pid = forkpty(&terminal, nullptr, nullptr, nullptr);
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl(std::getenv("BMAS_BINARY"), "bmas", "--config", config_.c_str(), "--state-dir",
          state_.c_str(), "workspace", "shell", "bmastest1", nullptr);
    _exit(127);
  }
  // The pause before `exit`: a shell that exits at once after printing loses its last output on
  // the way through LXD's pty relay in 3-4% of runs here (so did this test before bmas had its
  // own websocket client); what is tested is that the session reaches the pty, not that race.
  const std::string input = "echo at-$(hostname)-$(id -u)-$(tty); sleep 1; exit 7\n";
  ASSERT_EQ(write(terminal, input.data(), input.size()), static_cast<ssize_t>(input.size()));
  std::string out;
  for (;;) {  // until the shell ends (EIO once bmas has exited), or 30 s of silence
    pollfd p{terminal, POLLIN, 0};
    if (poll(&p, 1, 30'000) <= 0) break;
    char buf[4096];
    const ssize_t n = read(terminal, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(terminal);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7) << status << "\n" << out;
  EXPECT_THAT(out, HasSubstr(fmt::format("at-ws-bmastest1-{}-/dev/pts/",
                                         getpwnam("bmastest1")->pw_uid)));
}

// Stdin not a terminal: pipes, not a pty, so the shell reads the piped script to its end (through
// a pty that end never reached it), and its stdout and stderr come back apart.
TEST_F(LxdWorkspaceTest, RootsShellReadsAPipedScript) {
  Create("bmastest1");
  const std::string uid = std::to_string(getpwnam("bmastest1")->pw_uid);
  CommandOutput r = BmasWithInput("id -u\necho to-stderr >&2\ntty || true\nexit 3\n",
                                  {"workspace", "shell", "bmastest1"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_EQ(r.out, uid + "\nnot a tty\n") << r.err;
  EXPECT_EQ(r.err, "to-stderr\n");

  // No `exit`: the end of input ends the shell, with its last command's status.
  r = BmasWithInput("id -u\nfalse\n", {"workspace", "shell", "bmastest1"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out, uid + "\n") << r.err;

  // A signal sent to bmas reaches the command in the workspace (here the shell has become a
  // sleep), which ends by it as a local command would: 128 + SIGTERM.
  auto killed = RunCommand({"sh", "-c",
                            R"(printf 'exec sleep 271\n' | "$@" & pid=$!;)"
                            // Once the sleep runs in the workspace (so bmas relays by then).
                            R"( for i in $(seq 300); do "$1" "$2" "$3" "$4" "$5" workspace exec)"
                            R"( bmastest1 -- ps | grep -q 'sleep 27[1]' && break; sleep 0.1; done;)"
                            R"( kill -TERM $pid; wait $pid; echo "status $?")",
                            "sh", std::getenv("BMAS_BINARY"), "--config", config_, "--state-dir",
                            state_, "workspace", "shell", "bmastest1"},
                           {}, std::chrono::seconds(60));
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->out, "status 143\n") << killed->err;
  EXPECT_THAT(Bmas({"workspace", "exec", "bmastest1", "--", "ps"}).out,
              ::testing::Not(HasSubstr("sleep 271")));
}

// Limits from the user's settings in the store (`bmas user add|set`): used at creation, and
// applied to the running workspace when they change.
TEST_F(LxdWorkspaceTest, TheUsersStoredLimitsApplyAtCreationAndLive) {
  CommandOutput add = Bmas({"user", "add", "bmastest1", "--memory", "300MiB", "--processes", "77"});
  ASSERT_EQ(add.exit_code, 0) << add.err;
  Create("bmastest1");
  CommandOutput r = Bmas({"workspace", "exec", "bmastest1", "--", "sh", "-c", kReadCgroupLimits});
  EXPECT_EQ(r.out, "314572800\n77\n") << r.err;

  CommandOutput set =
      Bmas({"user", "set", "bmastest1", "--memory", "200MiB", "--unset", "processes"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_THAT(set.out, HasSubstr("ws-bmastest1 now has cpus -, memory 200MiB, processes -"));
  r = Bmas({"workspace", "exec", "bmastest1", "--", "sh", "-c", kReadCgroupLimits});
  EXPECT_EQ(r.out, "209715200\nmax\n") << r.err;
  rapidjson::Document list = List();
  ASSERT_TRUE(list.IsArray() && list.Size() == 1);
  EXPECT_EQ(Str(At(At(list, 0), "memory")), "200MiB");
  EXPECT_EQ(At(At(list, 0), "memory_bytes").GetInt64(), 209715200);
  EXPECT_TRUE(At(At(list, 0), "processes").IsNull());
  EXPECT_TRUE(At(At(list, 0), "cpus").IsNull());
  CommandOutput cpus = Bmas({"user", "set", "bmastest1", "--cpus", "2"});
  ASSERT_EQ(cpus.exit_code, 0) << cpus.err;
  EXPECT_EQ(At(At(List(), 0), "cpus").GetInt64(), 2);

  // A size LXD would not take is refused before anything changes.
  CommandOutput bad = Bmas({"user", "set", "bmastest1", "--memory", "lots"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("'lots' is not a memory size"));
  EXPECT_EQ(Str(At(At(List(), 0), "memory")), "200MiB");
}

// A killed lxcfs leaves its mount behind, failing every read; the next `bmas lxd up` replaces
// it, instead of taking the dead mount for a running lxcfs.
TEST_F(LxdWorkspaceTest, AnLxcfsThatDiedIsReplacedByTheNextUp) {
  rapidjson::Document s = ParseJson(Bmas({"lxd", "status", "--json"}).out);
  ASSERT_TRUE(At(s, "lxcfs").IsTrue());
  pid_t lxcfs = -1;
  for (const auto& d : At(s, "started").GetArray()) {
    if (Str(At(d, "name")) == "lxcfs") lxcfs = At(d, "pid").GetInt();
  }
  if (lxcfs < 0) GTEST_SKIP() << "lxcfs was running before the test; not ours to kill";
  ASSERT_EQ(kill(lxcfs, SIGKILL), 0);
  for (int i = 0; i < 500 && kill(lxcfs, 0) == 0; ++i) usleep(10'000);
  EXPECT_TRUE(At(ParseJson(Bmas({"lxd", "status", "--json"}).out), "lxcfs").IsFalse());

  CommandOutput up = Bmas({"lxd", "up"}, "", std::chrono::seconds(120));
  ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
  EXPECT_THAT(up.out, HasSubstr("started lxcfs"));
  EXPECT_TRUE(At(ParseJson(Bmas({"lxd", "status", "--json"}).out), "lxcfs").IsTrue());
  Create("bmastest1", {"--memory", "256MiB"});
  CommandOutput r = Bmas({"workspace", "exec", "bmastest1", "--", "grep", "MemTotal",
                          "/proc/meminfo"});
  EXPECT_EQ(r.out, "MemTotal:         262144 kB\n") << r.err;
}

// The image users get by default: Debian from apt's mirror (debootstrap), tini as PID 1 rather
// than systemd, the limits readable inside, and stop and start (LXD's SIGPWR ends tini).
TEST_F(LxdWorkspaceTest, TheDebianImageRunsWithoutSystemdAndStopsAndStarts) {
  if (const std::string why = WhyNoDefaultImage(); !why.empty()) GTEST_SKIP() << why;
  CommandOutput image = Bmas({"image", "build", "--base", "debian"}, "", std::chrono::seconds(1500));
  ASSERT_EQ(image.exit_code, 0) << image.out << image.err;
  Create("bmastest1", {"--image", "bmas-debian", "--memory", "256MiB", "--processes", "100"});
  CommandOutput r = Bmas({"workspace", "exec", "bmastest1", "--", "sh", "-c",
                          std::string("cat /proc/1/comm; ") + kReadCgroupLimits});
  EXPECT_EQ(r.out, "tini\n268435456\n100\n") << r.err;
  // An orphan is reaped by PID 1 rather than left a zombie.
  r = Bmas({"workspace", "exec", "bmastest1", "--", "sh", "-c",
            "(sleep 0.1 &); sleep 0.5; ps -eo stat= | grep -c Z"});
  EXPECT_EQ(r.out, "0\n") << r.err;
  CommandOutput stop = Bmas({"workspace", "stop", "bmastest1"});
  ASSERT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_EQ(StatusOf("bmastest1"), "Stopped");
  ASSERT_EQ(Bmas({"workspace", "start", "bmastest1"}).exit_code, 0);
  EXPECT_EQ(Bmas({"workspace", "exec", "bmastest1", "--", "true"}).exit_code, 0);
}

TEST_F(LxdWorkspaceTest, AFileWrittenInTheHomeBelongsToTheUserOnTheHost) {
  Create("bmastest1");
  const std::string file = Home("bmastest1") + "/bmas-workspace-test-file";
  fs::remove(file);
  CommandOutput r = Bmas({"workspace", "exec", "bmastest1", "--", "sh", "-c",
                          "echo hello > $HOME/bmas-workspace-test-file"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  struct stat st;
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  const passwd* pw = getpwnam("bmastest1");
  EXPECT_EQ(st.st_uid, pw->pw_uid);
  EXPECT_EQ(st.st_gid, pw->pw_gid);
  fs::remove(file);
}

TEST_F(LxdWorkspaceTest, AWorkspaceSurvivesRestartsOfItselfAndOfLxd) {
  Create("bmastest1");
  // Written as root with `lxc exec` (bmas's exec runs as the user), in the container's own
  // root file system, outside the home.
  auto written =
      RunCommand({"lxc", "exec", "ws-bmastest1", "--", "sh", "-c",
                  "echo survives > /etc/bmas-survives"},
                 {"LXD_DIR=" + dir_ + "/lxd"});
  ASSERT_TRUE(written && written->exit_code == 0) << (written ? written->err : written.error().message);
  auto read_back = [this] {
    return Bmas({"workspace", "exec", "bmastest1", "--", "cat", "/etc/bmas-survives"});
  };
  ASSERT_EQ(read_back().out, "survives\n");

  ASSERT_EQ(Bmas({"workspace", "stop", "bmastest1"}).exit_code, 0);
  ASSERT_EQ(Bmas({"workspace", "start", "bmastest1"}).exit_code, 0);
  EXPECT_EQ(read_back().out, "survives\n") << "after the workspace's own restart";

  // LXD itself, stopped and started again over the same state dir and LXD_DIR.
  CommandOutput down = Bmas({"lxd", "down"}, "", std::chrono::seconds(120));
  ASSERT_EQ(down.exit_code, 0) << down.out << down.err;
  EXPECT_THAT(down.out, HasSubstr("instance ws-bmastest1"));
  up_ = false;
  CommandOutput up = Bmas({"lxd", "up"}, "", std::chrono::seconds(120));
  ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
  up_ = true;
  // `lxd down` stopped it before stopping LXD, so it comes back stopped, and listed.
  EXPECT_EQ(StatusOf("bmastest1"), "Stopped");
  ASSERT_EQ(Bmas({"workspace", "start", "bmastest1"}).exit_code, 0);
  EXPECT_EQ(StatusOf("bmastest1"), "Running");
  CommandOutput listed = Bmas({"workspace", "list"});
  EXPECT_THAT(listed.out, HasSubstr("ws-bmastest1"));
  EXPECT_EQ(read_back().out, "survives\n") << "after LXD's restart";
  // The home is still bind-mounted with the user's uid.
  const std::string file = Home("bmastest1") + "/bmas-after-restart";
  fs::remove(file);
  ASSERT_EQ(Bmas({"workspace", "exec", "bmastest1", "--", "touch", file}).exit_code, 0);
  struct stat st;
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, getpwnam("bmastest1")->pw_uid);
  fs::remove(file);
}

TEST_F(LxdWorkspaceTest, ASecondUsersWorkspaceCannotSeeTheFirstsHome) {
  Create("bmastest1");
  Create("bmastest2");
  std::ofstream(Home("bmastest1") + "/secret") << "mine\n";
  CommandOutput r = Bmas({"workspace", "exec", "bmastest2", "--", "sh", "-c",
                          fmt::format("ls {}; cat {}/secret", Home("bmastest1"),
                                      Home("bmastest1"))});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("mine")));
  CommandOutput home = Bmas({"workspace", "exec", "bmastest2", "--", "ls", "/home"});
  EXPECT_EQ(home.out, "bmastest2\n");
  fs::remove(Home("bmastest1") + "/secret");
}

TEST_F(LxdWorkspaceTest, ANonRootUserCannotExecInAnothersWorkspace) {
  Create("bmastest1");
  const std::string marker = Home("bmastest1") + "/written-by-bmastest2";
  fs::remove(marker);
  CommandOutput r =
      Bmas({"workspace", "exec", "bmastest1", "--", "touch", marker}, "bmastest2");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("bmastest2 may act only on their own workspace"));
  EXPECT_FALSE(fs::exists(marker));
  // Their own: refused until `bmas agent` brokers the root-only socket, and saying so.
  CommandOutput own = Bmas({"workspace", "list"}, "bmastest2");
  EXPECT_EQ(own.exit_code, 2);
  EXPECT_THAT(own.err, HasSubstr("bmas agent"));
}

TEST_F(LxdWorkspaceTest, BadInputGivesAClearErrorAndChangesNothing) {
  Create("bmastest1", {"--memory", "256MiB"});
  CommandOutput unknown = Bmas({"workspace", "create", "no-such-user-bmas"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_THAT(unknown.err, HasSubstr("no Unix account \"no-such-user-bmas\""));

  // Root's and a system account's workspaces would map the host's root or a daemon's files in.
  CommandOutput root = Bmas({"workspace", "create", "root"});
  EXPECT_EQ(root.exit_code, 2);
  EXPECT_THAT(root.err, HasSubstr("uid 0"));
  CommandOutput nobody = Bmas({"workspace", "create", "nobody"});
  EXPECT_EQ(nobody.exit_code, 2);
  EXPECT_THAT(nobody.err, HasSubstr("--allow-system-account"));

  CommandOutput dup = Bmas({"workspace", "create", "bmastest1", "--memory", "512MiB"});
  EXPECT_NE(dup.exit_code, 0);
  EXPECT_THAT(dup.err, HasSubstr("already has a workspace"));

  CommandOutput image = Bmas({"workspace", "create", "bmastest2", "--image", "no-such-image"});
  EXPECT_NE(image.exit_code, 0);
  EXPECT_THAT(image.err, HasSubstr("no image \"no-such-image\""));

  rapidjson::Document list = List();
  ASSERT_TRUE(list.IsArray());
  ASSERT_EQ(list.Size(), 1u);
  EXPECT_EQ(Str(At(At(list, 0), "status")), "Running");
  EXPECT_EQ(Str(At(At(list, 0), "memory")), "256MiB");

  // LXD not running: a config naming an LXD_DIR where none runs.
  const std::string other = dir_ + "/other.toml";
  std::ofstream(other) << fmt::format("[lxd]\ndir = \"{}/no-lxd\"\n", dir_);
  auto r = RunCommand({std::getenv("BMAS_BINARY"), "--config", other, "--state-dir", state_,
                       "workspace", "create", "bmastest2"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("Is LXD running? `bmas lxd up` starts it"));
  EXPECT_EQ(List().Size(), 1u);
}


// Jobs in workspaces: a real local Slurm beside the test's LXD, and `bmas agent`. The prolog
// plugs the job's GPUs into its user's workspace, the agent runs the job there, the epilog
// unplugs them (or the reconcile pass, when the epilog's unplugging fails).
// Two nodes, each with its own LXD (two daemons on this host, as LXD's own tests run them): a
// job on node B, which lacks the user's workspace, runs in a copy pulled from node A over
// HTTPS, configured from B's own template (nothing of A's instance config comes over); a second
// job of the user shares the copy; it goes with the last job's epilog; and a peer whose
// certificate is not the configured fingerprint is refused.
TEST_F(LxdWorkspaceTest, AJobOnAnotherNodeRunsInACopyPulledFromThePeerThatHoldsTheWorkspace) {
  const int port = FreeTcpPort();
  const std::string peer_keys =
      fmt::format("cert = \"{0}/peer.crt\"\nkey = \"{0}/peer.key\"\n", dir_);
  std::ofstream(config_, std::ios::app) << fmt::format("listen = \"127.0.0.1:{}\"\n", port)
                                        << peer_keys;
  CommandOutput up_a = Bmas({"lxd", "up"});
  ASSERT_EQ(up_a.exit_code, 0) << up_a.out << up_a.err;
  EXPECT_THAT(up_a.out, HasSubstr(fmt::format("peers: LXD listens on 127.0.0.1:{}", port)));
  EXPECT_THAT(up_a.out, HasSubstr("made it now: copy it and " + dir_ + "/peer.key"));
  rapidjson::Document status_a = ParseJson(Bmas({"lxd", "status", "--json"}).out);
  EXPECT_EQ(Str(At(status_a, "https_address")), fmt::format("127.0.0.1:{}", port));
  Create("bmastest1");
  ASSERT_EQ(RunCommand({"lxc", "exec", "ws-bmastest1", "--", "sh", "-c",
                        "echo installed on A > /etc/bmas-marker"},
                       {"LXD_DIR=" + dir_ + "/lxd"})
                ->exit_code,
            0);

  // What a hostile peer could put in its instance: host disks, privileges. None may reach B.
  const std::vector<std::string> lxc_a = {"LXD_DIR=" + dir_ + "/lxd"};
  ASSERT_EQ(RunCommand({"lxc", "config", "set", "ws-bmastest1", "user.planted", "yes"}, lxc_a)
                ->exit_code,
            0);
  ASSERT_EQ(RunCommand({"lxc", "config", "device", "add", "ws-bmastest1", "hostetc", "disk",
                        "source=/etc", "path=/mnt/hostetc"},
                       lxc_a)
                ->exit_code,
            0);

  // Node B: its own LXD and state, the same client certificate, A as its peer with the
  // fingerprint A's status gives.
  const std::string fingerprint_a = Str(At(status_a, "certificate_fingerprint"));
  ASSERT_EQ(fingerprint_a.size(), 64u);
  const std::string config_b = dir_ + "/bmas-b.toml", state_b = dir_ + "/state-b";
  auto write_config_b = [&](const std::string& fingerprint) {
    std::ofstream(config_b) << fmt::format(
        "[lxd]\ndir = \"{}/lxd-b\"\npool_size = \"2GiB\"\n"
        "peers = [{{ url = \"https://127.0.0.1:{}\", fingerprint = \"{}\" }}]\n{}",
        dir_, port, fingerprint, peer_keys);
  };
  write_config_b(fingerprint_a);
  SecondNode node_b{config_b, state_b};
  auto on_b = [&](std::vector<std::string> args, std::vector<std::string> env = {}) {
    return node_b.Run(std::move(args), std::move(env));
  };
  CommandOutput up_b = node_b.Up();
  ASSERT_EQ(up_b.exit_code, 0) << up_b.out << up_b.err;
  auto hook = [&](const std::string& phase, int job) {
    return on_b({"slurm", "hook", phase},
                {fmt::format("SLURM_JOB_ID={}", job), "SLURM_JOB_USER=bmastest1",
                 "SLURMD_NODENAME=nodeb", "SLURM_JOB_GPUS="});
  };
  auto status_on_b = [&] {
    rapidjson::Document list = ParseJson(on_b({"workspace", "list", "--json"}).out);
    for (const auto& w : list.GetArray()) {
      if (Str(At(w, "user")) == "bmastest1") return Str(At(w, "status"));
    }
    return std::string("<none>");
  };

  CommandOutput first = hook("prolog", 7001);
  EXPECT_THAT(first.out, HasSubstr(fmt::format("copied ws-bmastest1 from https://127.0.0.1:{}",
                                               port)));
  ASSERT_EQ(status_on_b(), "Running") << first.out << first.err;
  // Only the file system came from A: the copy's config and devices are B's own template.
  auto shown_r = RunCommand({"lxc", "config", "show", "ws-bmastest1"},
                            {"LXD_DIR=" + dir_ + "/lxd-b"});
  ASSERT_TRUE(shown_r);
  const CommandOutput& shown = *shown_r;
  EXPECT_THAT(shown.out, HasSubstr("security.privileged: \"false\""));
  EXPECT_THAT(shown.out, ::testing::Not(HasSubstr("user.planted"))) << shown.out;
  EXPECT_THAT(shown.out, ::testing::Not(HasSubstr("hostetc"))) << shown.out;
  // The copy holds what was installed in the workspace, and the user's real home.
  CommandOutput inside = on_b({"workspace", "exec", "bmastest1", "--", "sh", "-c",
                               "cat /etc/bmas-marker; id -u; echo from B > ~/from-b"});
  EXPECT_EQ(inside.out, fmt::format("installed on A\n{}\n", getpwnam("bmastest1")->pw_uid))
      << inside.err;
  struct stat st {};
  ASSERT_EQ(stat((Home("bmastest1") + "/from-b").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, getpwnam("bmastest1")->pw_uid);
  fs::remove(Home("bmastest1") + "/from-b");

  // A second job shares the copy; the copy stays until the last job's epilog.
  CommandOutput second = hook("prolog", 7002);
  EXPECT_THAT(second.out, ::testing::Not(HasSubstr("copied"))) << second.out;
  hook("epilog", 7001);
  EXPECT_EQ(status_on_b(), "Running");
  CommandOutput last = hook("epilog", 7002);
  EXPECT_THAT(last.out, HasSubstr("deleted ws-bmastest1, a copy no job uses"));
  EXPECT_EQ(status_on_b(), "<none>");
  EXPECT_EQ(StatusOf("bmastest1"), "Running") << "the workspace on A is untouched";

  // A peer whose certificate is not the configured one (here: B's config names another
  // fingerprint, as when someone else answers on A's port) is refused, and the job runs as a
  // plain Slurm job.
  const std::string other(64, 'b');
  write_config_b(other);
  CommandOutput refused = hook("prolog", 7003);
  EXPECT_THAT(refused.out, HasSubstr(fmt::format("fingerprint {}, not the {}", fingerprint_a,
                                                 other)));
  EXPECT_THAT(refused.out, HasSubstr("not trusted"));
  EXPECT_EQ(status_on_b(), "<none>");

  // The attack itself: a plain user listens first on the port a peer is configured at (8443 is
  // unprivileged), with a certificate of their own. B is not fooled, and copies nothing.
  const int stolen = FreeTcpPort();
  const std::string keys = dir_ + "/imposter";
  fs::create_directories(keys);
  chown(keys.c_str(), getpwnam("bmastest1")->pw_uid, getpwnam("bmastest1")->pw_gid);
  auto made = RunCommand({"setpriv", "--reuid=bmastest1", "--regid=bmastest1", "--init-groups",
                          "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                          "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=imposter",
                          "-keyout", keys + "/k.pem", "-out", keys + "/c.pem", "-days", "1"});
  ASSERT_TRUE(made && made->exit_code == 0) << (made ? made->err : made.error().message);
  SpawnOptions serve;
  serve.args = {"setpriv", "--reuid=bmastest1", "--regid=bmastest1", "--init-groups",
                "openssl", "s_server", "-quiet", "-accept", std::to_string(stolen),
                "-cert", keys + "/c.pem", "-key", keys + "/k.pem", "-www"};
  auto imposter = Spawn(serve);
  ASSERT_TRUE(imposter) << imposter.error().message;
  struct StopImposter {
    pid_t pid;
    ~StopImposter() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } stop_imposter{*imposter};
  ASSERT_TRUE(Eventually([&] { return !ConnectionRefused(stolen); }, std::chrono::seconds(10)));
  std::ofstream(config_b) << fmt::format(
      "[lxd]\ndir = \"{}/lxd-b\"\npool_size = \"2GiB\"\n"
      "peers = [{{ url = \"https://127.0.0.1:{}\", fingerprint = \"{}\" }}]\n{}",
      dir_, stolen, fingerprint_a, peer_keys);
  CommandOutput fooled = hook("prolog", 7004);
  EXPECT_THAT(fooled.out, HasSubstr("not trusted")) << fooled.out;
  EXPECT_EQ(status_on_b(), "<none>");
}


TEST_F(WorkspaceJobsTest, AJobRunsInTheWorkspaceWithExactlyItsGpusWhichGoAwayAfter) {
  CommandOutput r = InHome("bmastest1", {"run", "--gpus", "2", "--wait", "--", "sh", "-c",
                                         "hostname; id -u; for d in /dev/nvidia*; do echo $d; "
                                         "cat $d; done; cat /proc/self/cgroup; exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;  // the job's own exit code, through the agent
  EXPECT_THAT(r.out, HasSubstr("ws-bmastest1\n"));  // the workspace's host name
  EXPECT_THAT(r.out, HasSubstr(fmt::format("\n{}\n", getpwnam("bmastest1")->pw_uid)));
  EXPECT_THAT(r.out, HasSubstr("/dev/nvidia0\n"));
  EXPECT_THAT(r.out, HasSubstr("/dev/nvidia1\n"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("/dev/nvidia2")));
  // Present, and no driver behind it: the device node is there and the open reaches it.
  EXPECT_THAT(r.out, HasSubstr("No such device or address"));
  // In the workspace's cgroups (its limits hold), not in the Slurm job's on the host.
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("job_"))) << r.out;
  // The epilog has unplugged them.
  EXPECT_TRUE(Eventually([&] { return DevicesIn("bmastest1").find("nvidia") == std::string::npos; },
                         std::chrono::seconds(10)))
      << DevicesIn("bmastest1");
  // Outside a job no GPU is visible in the workspace at all.
  EXPECT_THAT(DevicesIn("bmastest1"), ::testing::Not(HasSubstr("nvidia")));
  // The agent's /metrics: the job's bind and release (the epilog reports it after unplugging),
  // the running workspace, and no job in it any more.
  EXPECT_TRUE(Eventually(
      [&] { return AgentMetrics().find("bmas_agent_gpu_release_seconds_count 1\n") !=
                   std::string::npos; },
      std::chrono::seconds(10)))
      << AgentMetrics();
  const std::string metrics = AgentMetrics();
  EXPECT_THAT(metrics, HasSubstr("bmas_agent_gpu_bind_seconds_count 1\n"));
  EXPECT_THAT(metrics, HasSubstr("bmas_agent_execs_total 1.0\n"));
  EXPECT_THAT(metrics, HasSubstr("bmas_agent_jobs_in_containers 0.0\n"));
  EXPECT_THAT(metrics, HasSubstr("bmas_agent_sessions_total 0.0\n"));
  EXPECT_THAT(metrics, HasSubstr("bmas_agent_workspaces_running 1.0\n"));
}

TEST_F(WorkspaceJobsTest, TheReconcilePassRemovesWhatAFailedEpilogLeft) {
  std::ofstream(state_ + "/run/fail-gpu-release") << "test\n";
  CommandOutput r = InHome("bmastest1", {"run", "--gpus", "1", "--wait", "--", "true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Eventually([&] { return DevicesIn("bmastest1").find("nvidia") == std::string::npos; },
                         std::chrono::seconds(10)))
      << DevicesIn("bmastest1");
  std::ifstream hooks(state_ + "/slurm/log/hooks.log");
  std::stringstream log;
  log << hooks.rdbuf();
  EXPECT_THAT(log.str(), HasSubstr("unplugging skipped"));  // it was the reconcile pass
}

// A copy of a workspace from another node (marked as the prolog marks one) whose epilog never
// ran: the reconcile pass drops its jobs that are gone, keeps it while one runs, and deletes it
// once none does.
TEST_F(WorkspaceJobsTest, TheReconcilePassDeletesACopyWhoseJobsAreGone) {
  Create("bmastest2");
  const std::vector<std::string> lxd_env = {"LXD_DIR=" + dir_ + "/lxd"};
  auto jobs_of = [&] {
    auto r = RunCommand({"lxc", "config", "get", "ws-bmastest2", "user.bmas.jobs"}, lxd_env);
    return r && r->exit_code == 0 ? r->out : std::string("<gone>");
  };
  CommandOutput run = InHome("bmastest2", {"run", "--", "sleep", "60"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string id = run.out.substr(0, run.out.find('\n'));
  // Job 999999 is unknown to Slurm: gone.
  ASSERT_EQ(RunCommand({"lxc", "config", "set", "ws-bmastest2",
                        "user.bmas.copy-of=https://node09:8443", "user.bmas.jobs=999999," + id},
                       lxd_env)
                ->exit_code,
            0);
  EXPECT_TRUE(Eventually([&] { return jobs_of() == id + "\n"; }, std::chrono::seconds(10)))
      << jobs_of();
  InHome("bmastest2", {"cancel", id});
  EXPECT_TRUE(Eventually([&] { return jobs_of() == "<gone>"; }, std::chrono::seconds(15)))
      << jobs_of();
  EXPECT_EQ(StatusOf("bmastest1"), "Running") << "a workspace is never deleted";

  // Only jobs that are gone: deleted by the reconcile pass itself.
  Create("bmastest2");
  ASSERT_EQ(RunCommand({"lxc", "config", "set", "ws-bmastest2",
                        "user.bmas.copy-of=https://node09:8443", "user.bmas.jobs=999998"},
                       lxd_env)
                ->exit_code,
            0);
  EXPECT_TRUE(Eventually([&] { return StatusOf("bmastest2") == "<none>"; },
                         std::chrono::seconds(10)));
  // The pass counts a deletion after it returns, a moment after the copy is gone.
  EXPECT_TRUE(Eventually(
      [&] {
        return MetricValue(AgentMetrics(), "bmas_agent_reconcile_copies_deleted_total")
                   .value_or(0) >= 1.0;
      },
      std::chrono::seconds(5)))
      << AgentMetrics();
}

TEST_F(WorkspaceJobsTest, CancelReachesTheJobsProcessesInTheWorkspace) {
  CommandOutput run = InHome("bmastest1", {"run", "--", "sleep", "271"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::string id = run.out.substr(0, run.out.find('\n'));
  auto sleeping = [&] {
    return Bmas({"workspace", "exec", "bmastest1", "--", "ps"}).out.find("sleep 271") !=
           std::string::npos;
  };
  ASSERT_TRUE(Eventually(sleeping, std::chrono::seconds(15)));
  ASSERT_EQ(InHome("bmastest1", {"cancel", id}).exit_code, 0);
  EXPECT_TRUE(Eventually([&] { return !sleeping(); }, std::chrono::seconds(15)));
}

TEST_F(WorkspaceJobsTest, OthersGetPlainJobsAndCannotBorrowAnothersJob) {
  // No workspace: the job runs on the node itself.
  CommandOutput plain = InHome("bmastest2", {"run", "--wait", "--", "hostname"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_THAT(plain.out, ::testing::StartsWith("oss0"));
  // A process outside the job cannot have the agent run anything for it.
  CommandOutput run = InHome("bmastest1", {"run", "--", "sleep", "60"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string id = run.out.substr(0, run.out.find('\n'));
  CommandOutput borrowed = InHome("bmastest1", {"agent", "exec", "--", "true"},
                                  {"SLURM_JOB_ID=" + id});
  EXPECT_EQ(borrowed.exit_code, 126);
  EXPECT_THAT(borrowed.err, HasSubstr("is not a process of job " + id));
  InHome("bmastest1", {"cancel", id});
}

// A torchrun job over two nodes: each node's torchrun starts in the workspace (here a stand-in
// in the user's ~/bin), with its node rank, and with the node's network, which its ranks and
// NCCL need to reach each other.
TEST_F(WorkspaceJobsTest, EachNodesTorchrunRunsInTheWorkspaceWithTheNodesNetwork) {
  const std::string bin = Home("bmastest1") + "/bin";
  fs::create_directories(bin);
  std::ofstream(bin + "/torchrun") << "#!/bin/sh\n"
                                      "echo \"$(hostname) $3 $(readlink /proc/self/ns/net) $*\"\n";
  chmod((bin + "/torchrun").c_str(), 0755);
  chown(bin.c_str(), getpwnam("bmastest1")->pw_uid, getpwnam("bmastest1")->pw_gid);
  CommandOutput r = InHome("bmastest1",
                           {"run", "--gpus", "8", "--launcher", "torchrun", "--wait", "--",
                            "train.py", "--lr", "0.1"},
                           {"PATH=" + bin + ":/usr/bin:/bin"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  ASSERT_EQ(lines.size(), 2u) << r.out;
  const std::string net = fs::read_symlink("/proc/self/ns/net").string();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(lines[rank], ::testing::StartsWith(
                                 fmt::format("ws-bmastest1 --node-rank={} {} ", rank, net)));
    EXPECT_THAT(lines[rank], ::testing::EndsWith("train.py --lr 0.1"));
  }
  fs::remove_all(bin);
}

TEST_F(WorkspaceJobsTest, AUserReachesTheirOwnWorkspaceThroughTheAgent) {
  CommandOutput own = InHome("bmastest1", {"workspace", "exec", "bmastest1", "--", "sh", "-c",
                                           "hostname; id -u; pwd; exit 4"});
  EXPECT_EQ(own.exit_code, 4) << own.err;
  EXPECT_EQ(own.out, fmt::format("ws-bmastest1\n{}\n{}\n", getpwnam("bmastest1")->pw_uid,
                                 Home("bmastest1")));
  // A session stays in the workspace's own network namespace (a job gets the node's).
  CommandOutput net = InHome("bmastest1", {"workspace", "exec", "bmastest1", "--", "readlink",
                                           "/proc/self/ns/net"});
  EXPECT_NE(net.out, fs::read_symlink("/proc/self/ns/net").string() + "\n") << net.err;
  // Counted as sessions, not as jobs.
  EXPECT_THAT(AgentMetrics(), HasSubstr("bmas_agent_sessions_total 2.0\n"));
  EXPECT_THAT(AgentMetrics(), HasSubstr("bmas_agent_execs_total 0.0\n"));
  CommandOutput other = InHome("bmastest2", {"workspace", "exec", "bmastest1", "--", "true"});
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_THAT(other.err, HasSubstr("may act only on their own workspace"));
  // bmastest2 has none: the agent says so.
  CommandOutput none = InHome("bmastest2", {"workspace", "exec", "bmastest2", "--", "true"});
  EXPECT_EQ(none.exit_code, 126);
  EXPECT_THAT(none.err, HasSubstr("ws-bmastest2"));
}

}  // namespace
}  // namespace bmas::testing
