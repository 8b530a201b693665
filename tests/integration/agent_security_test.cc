// The root agent's trust boundary, attacked by non-root users the fixture creates (bmastest1
// has a workspace, bmastest2 none): through the environment and file descriptors of their
// commands, by processes that detach from their job, and through raw bytes on the agent's
// socket. Each test asserts that the attack fails and that the normal path still works.
// Needs root, LXD, Slurm and a C compiler (scripts/install-deps.sh); skips without them.

#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include "lxd_workspace_fixture.h"
#include "store/store.h"

// Whether this binary carries AddressSanitizer: GCC says so with __SANITIZE_ADDRESS__, clang 14
// with __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define BMAS_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BMAS_TEST_UNDER_ASAN 1
#endif
#endif

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// The agent's deadline and per-uid cap in these tests.
constexpr int kIoTimeoutSeconds = 3;
constexpr int kCapPerUid = 4;


class AgentSecurityTest : public WorkspaceJobsTest {
 protected:
  void SetUp() override {
    agent_flags_ = {"--io-timeout", std::to_string(kIoTimeoutSeconds), "--max-connections-per-uid",
                    std::to_string(kCapPerUid)};
    WorkspaceJobsTest::SetUp();
  }

  void TearDown() override {
    std::error_code ec;
    fs::remove("/root/bmas-preload-ran-as-root", ec);
    WorkspaceJobsTest::TearDown();
  }

  // Compiles C `source` into `path` (owned by `user`), with `flags` ("-shared -fPIC", "-static").
  void Compile(const std::string& source, const std::string& path, const std::string& flags,
               const std::string& user) {
    const std::string c = dir_ + "/src.c";
    std::ofstream(c) << source;
    auto r = RunCommand({"sh", "-c", fmt::format("cc {} -o {} {}", flags, path, c)});
    ASSERT_TRUE(r && r->exit_code == 0) << (r ? r->err : r.error().message);
    chown(path.c_str(), getpwnam(user.c_str())->pw_uid, getpwnam(user.c_str())->pw_gid);
  }

  // Runs `body` in a child process as `user` and returns what it wrote to the fd it is given.
  // `body` makes system calls only (this process may have other threads).
  std::string AsUser(const std::string& user, const std::function<void(int out)>& body) {
    const passwd* pw = getpwnam(user.c_str());
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    const pid_t child = fork();
    if (child == 0) {
      close(p[0]);
      if (setgroups(0, nullptr) != 0 || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0) {
        _exit(1);
      }
      body(p[1]);
      _exit(0);
    }
    close(p[1]);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
    close(p[0]);
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return out;
  }

  std::string Socket() const { return state_ + "/run/agent.sock"; }

  // Submits a job of bmastest1's that leaves `sleep 3005` in the background (its own session)
  // and runs on; returns its id once that sleep runs ("" when it does not).
  std::string StartJobThatDetaches() {
    CommandOutput run = InHome("bmastest1", {"run", "--", "sh", "-c",
                                             "setsid sleep 3005 </dev/null >/dev/null 2>&1 & "
                                             "exec sleep 3006"});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    if (run.exit_code != 0 || !Eventually([] { return !HostProcesses("sleep 3005").empty(); },
                                          std::chrono::seconds(30))) {
      return "";
    }
    return run.out.substr(0, run.out.find('\n'));
  }

  // A session of bmastest1 in its workspace, through the agent: prints the uid.
  void ExpectTheAgentServes() {
    CommandOutput id = InHome("bmastest1", {"workspace", "exec", "bmastest1", "--", "id", "-u"});
    EXPECT_EQ(id.exit_code, 0) << id.err;
    EXPECT_EQ(id.out, fmt::format("{}\n", getpwnam("bmastest1")->pw_uid));
    EXPECT_TRUE(agent_->running()) << agent_->StderrText();
  }

  // What the Slurm prolog and epilog wrote so far.
  std::string HooksLog() const {
    std::ifstream hooks(state_ + "/slurm/log/hooks.log");
    std::stringstream log;
    log << hooks.rdbuf();
    return log.str();
  }
};

// Whether none of the sleeps the jobs of these tests start (3001, 3002, 3005, 3006) runs on
// the host; each by its full number, so that another `sleep 300...` on the machine is not taken
// for one.
bool NoTestSleeps() {
  for (const char* s : {"sleep 3001", "sleep 3002", "sleep 3005", "sleep 3006"}) {
    if (!HostProcesses(s).empty()) return false;
  }
  return true;
}

// A connected SOCK_SEQPACKET socket to `path` with a receive deadline, -1 on failure; system
// calls only.
int RawConnect(const char* path, int timeout_s) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path, sizeof a.sun_path - 1);
  timeval tv{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Writes the next message on `fd`, "EOF" when the agent closed it, "TIMEOUT" when nothing came.
void WriteReply(int fd, int out) {
  char reply[4096];
  const ssize_t n = recv(fd, reply, sizeof reply, 0);
  if (n > 0) {
    [[maybe_unused]] ssize_t w = write(out, reply, static_cast<size_t>(n));
  } else {
    const char* what = n == 0 ? "EOF" : "TIMEOUT";
    [[maybe_unused]] ssize_t w = write(out, what, std::strlen(what));
  }
  [[maybe_unused]] ssize_t w = write(out, "\n", 1);
}

TEST_F(AgentSecurityTest, TheUsersLoaderVariablesNeverReachRootAndTheCommandStillRuns) {
#if defined(BMAS_TEST_UNDER_ASAN)
  // An AddressSanitizer build of bmas refuses to start with a library preloaded before its
  // runtime, so the attacker's LD_PRELOAD stops the client itself; `make test` runs this.
  GTEST_SKIP() << "LD_PRELOAD into an AddressSanitizer binary; runs in the normal build";
#endif
  const std::string home = Home("bmastest1");
  // The library's constructor leaves a file in root's home if it ever runs as root, and says
  // under which uid it ran.
  Compile(R"(#include <fcntl.h>
             #include <stdio.h>
             #include <unistd.h>
             __attribute__((constructor)) static void Run(void) {
               if (geteuid() == 0) close(open("/root/bmas-preload-ran-as-root", O_CREAT | O_WRONLY, 0644));
               fprintf(stderr, "preload ran as %d\n", (int)geteuid());
             })",
          home + "/x.so", "-shared -fPIC", "bmastest1");
  const std::vector<std::string> attack = {"LD_PRELOAD=" + home + "/x.so", "GCONV_PATH=" + home,
                                           "LOCPATH=" + home, "LD_LIBRARY_PATH=" + home};
  // Set after setpriv (as the user), so that only bmas sees them.
  std::vector<std::string> args = {"setpriv",
                                   "--reuid=bmastest1",
                                   "--regid=bmastest1",
                                   "--init-groups",
                                   "sh",
                                   "-c",
                                   "cd \"$0\" && exec \"$@\"",
                                   home,
                                   "env"};
  args.insert(args.end(), attack.begin(), attack.end());
  args.insert(args.end(), {SharedBinary(), "--config", config_, "--state-dir", state_, "workspace",
                           "exec", "bmastest1", "--", "id", "-u"});
  auto ran = RunCommand(args, {}, std::chrono::seconds(60));
  ASSERT_TRUE(ran) << ran.error().message;
  const CommandOutput& session = *ran;
  EXPECT_EQ(session.exit_code, 0) << session.err;
  EXPECT_EQ(session.out, fmt::format("{}\n", getpwnam("bmastest1")->pw_uid));
  EXPECT_THAT(session.err, Not(HasSubstr("preload ran as 0")));
  EXPECT_FALSE(fs::exists("/root/bmas-preload-ran-as-root"));

  // The same from a job: a batch script that sets them before `bmas agent exec`.
  const std::string script = home + "/attack.sh";
  std::ofstream(script) << fmt::format(
      "#!/bin/sh\nexport LD_PRELOAD={0}/x.so GCONV_PATH={0} LOCPATH={0}\n"
      "exec {1} --config {2} --state-dir {3} agent exec -- sh -c 'id -u; ls /proc/self/fd'\n",
      home, SharedBinary(), config_, state_);
  chmod(script.c_str(), 0755);
  auto job =
      RunCommand({"setpriv", "--reuid=bmastest1", "--regid=bmastest1", "--init-groups", "sbatch",
                  "--wait", "--parsable", "-D", home, "-o", home + "/attack.out", script},
                 {"SLURM_CONF=" + state_ + "/slurm/etc/slurm.conf"}, std::chrono::seconds(60));
  ASSERT_TRUE(job && job->exit_code == 0) << (job ? job->out + job->err : job.error().message);
  std::ifstream in(home + "/attack.out");
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command ran in the workspace as the user, with no fd of the agent's (ls's own is 3).
  EXPECT_THAT(out, HasSubstr(fmt::format("{}\n0\n1\n2\n3\n", getpwnam("bmastest1")->pw_uid)))
      << out;
  EXPECT_THAT(out, Not(HasSubstr("preload ran as 0")));
  EXPECT_FALSE(fs::exists("/root/bmas-preload-ran-as-root"));
}

TEST_F(AgentSecurityTest, ACommandGetsNoFileDescriptorOfTheAgents) {
  CommandOutput session =
      InHome("bmastest1", {"workspace", "exec", "bmastest1", "--", "ls", "/proc/self/fd"});
  EXPECT_EQ(session.exit_code, 0) << session.err;
  EXPECT_EQ(session.out, "0\n1\n2\n3\n");  // 3: the directory ls reads
  CommandOutput job = InHome("bmastest1", {"run", "--wait", "--", "ls", "/proc/self/fd"});
  EXPECT_EQ(job.exit_code, 0) << job.err;
  EXPECT_EQ(job.out, "0\n1\n2\n3\n");
}

TEST_F(AgentSecurityTest, NoProcessOfAJobOutlivesItAndItsCgroupCarriesItsMemory) {
  CommandOutput r = InHome(
      "bmastest1",
      {"run", "--mem", "300M", "--gpus", "1", "--cpus-per-gpu", "3", "--wait", "--", "sh", "-c",
       "echo cpus $SLURM_JOB_CPUS_PER_NODE; "
       "setsid sleep 3001 </dev/null >/dev/null 2>&1 & "
       "(sleep 3002 </dev/null >/dev/null 2>&1 &); "
       "cg=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup); echo \"cgroup $cg\"; "
       "cat /sys/fs/cgroup/memory$cg/memory.limit_in_bytes; "
       "n() { ps -o args | grep -c '^sleep 300[12]'; }; i=0; "
       "while [ $(n) != 2 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; n"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr("cgroup /bmas-job-"));
  EXPECT_THAT(r.out, ::testing::StartsWith("cpus 3\n"));
  EXPECT_THAT(r.out, HasSubstr(fmt::format("\n{}\n", 300 * 1024 * 1024)));
  EXPECT_THAT(r.out, ::testing::EndsWith("\n2\n")) << "both were running in the job";
  // Slurm says the job ended: the epilog has killed its cgroup, the detached ones with it.
  EXPECT_TRUE(
      Eventually([] { return NoTestSleeps(); }, std::chrono::seconds(30)));
}

// The agent dies while a job runs: the epilog, root, kills the job's cgroup by its name.
TEST_F(AgentSecurityTest, TheEpilogEndsAJobsProcessesWhenTheAgentIsDown) {
  const std::string id = StartJobThatDetaches();
  ASSERT_FALSE(id.empty());
  agent_->Signal(SIGKILL);
  ASSERT_TRUE(agent_->Wait(std::chrono::seconds(10)));
  ASSERT_EQ(InHome("bmastest1", {"cancel", id}).exit_code, 0);
  EXPECT_TRUE(
      Eventually([] { return NoTestSleeps(); }, std::chrono::seconds(30)));
}

// The agent hangs (stopped) while a job runs: the epilog's request to it gives up after its time
// limit (30 s), and the epilog ends the job's processes itself.
TEST_F(AgentSecurityTest, AHungAgentDoesNotHoldUpTheEpilog) {
  const std::string id = StartJobThatDetaches();
  ASSERT_FALSE(id.empty());
  agent_->Signal(SIGSTOP);
  ASSERT_EQ(InHome("bmastest1", {"cancel", id}).exit_code, 0);
  EXPECT_TRUE(
      Eventually([] { return NoTestSleeps(); }, std::chrono::seconds(90)));
  EXPECT_TRUE(Eventually([&] { return HooksLog().find("did not answer") != std::string::npos; },
                         std::chrono::seconds(30)))
      << HooksLog();
  agent_->Signal(SIGCONT);
}

// The agent's periodic reconcile pass runs only at its start: what these tests see is the
// epilog's own work (the pass would kill these holders sooner: lxd/gpu_sweep.h), or what the
// agent does on a workspace's start (lxd/workspace_starts.h).
class WithoutPeriodicPassTest : public AgentSecurityTest {
 protected:
  void SetUp() override {
    reconcile_interval_ = "3600";
    AgentSecurityTest::SetUp();
  }
};

TEST_F(WithoutPeriodicPassTest, AProcessThatHoldsAJobsGpuIsKilledBeforeTheUnplug) {
  // A stand-in for a CUDA process: holds the device open (O_PATH: the fake GPU has no driver
  // to open) until killed.
  const std::string hold = Home("bmastest1") + "/hold";
  Compile(R"(#define _GNU_SOURCE
             #include <fcntl.h>
             #include <unistd.h>
             int main(int argc, char** argv) {
               if (argc < 2 || open(argv[1], O_PATH) < 0) return 1;
               for (;;) pause();
             })",
          hold, "-static", "bmastest1");
  CommandOutput run = InHome("bmastest1", {"run", "--gpus", "1", "--", "sleep", "600"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string id = run.out.substr(0, run.out.find('\n'));
  ASSERT_TRUE(
      Eventually([&] { return DevicesIn("bmastest1").find("nvidia0") != std::string::npos; },
                 std::chrono::seconds(30)));
  // A session (not in the job's cgroup) takes hold of the job's GPU.
  auto holder = RunCommand(
      {"sh", "-c",
       fmt::format("cd {0} && setsid setpriv --reuid=bmastest1 --regid=bmastest1 --init-groups "
                   "{1} --config {2} --state-dir {3} workspace exec bmastest1 -- {0}/hold "
                   "/dev/nvidia0 </dev/null >/dev/null 2>&1 &",
                   Home("bmastest1"), SharedBinary(), config_, state_)});
  ASSERT_TRUE(holder && holder->exit_code == 0);
  ASSERT_TRUE(Eventually([&] { return !HostProcesses(hold + " /dev/nvidia0").empty(); },
                         std::chrono::seconds(30)));
  ASSERT_EQ(InHome("bmastest1", {"cancel", id}).exit_code, 0);
  EXPECT_TRUE(Eventually([&] { return DevicesIn("bmastest1").find("nvidia") == std::string::npos; },
                         std::chrono::seconds(30)));
  EXPECT_THAT(HostProcesses(hold + " /dev/nvidia0"), ::testing::IsEmpty());
  // The epilog writes its line after the unplug that the check above saw.
  EXPECT_TRUE(Eventually(
      [&] { return HooksLog().find("released 1 device(s)") != std::string::npos; },
      std::chrono::seconds(30)))
      << HooksLog();
}

// A user's stand-in for a CUDA program, static so that it runs in the workspace:
//   gpu probe DEV          prints how open(DEV, O_RDWR) ends: ENXIO when it reached the fake
//                          GPU's (absent) driver, EPERM when the device cgroup refused it
//   gpu nested-hold DEV    as under `unshare -Urpf`: a child in new user and pid namespaces
//                          holds DEV (O_PATH: the fake GPU has no driver to open) until killed
//   gpu receive SOCK MARK  the same, holding a device fd it accepts on SOCK (SCM_RIGHTS); MARK
//                          is written once it has it
//   gpu send DEV SOCK      opens DEV (O_PATH) and passes it to SOCK
//   gpu park SOCK MARK GO  as receive, but leaves the fd in flight (accepted, not received)
//                          until the file GO exists; MARK says "accepted", then "received"
//   gpu hold-for DEV S     holds DEV (O_PATH) for S seconds, then prints HELD
constexpr const char* kGpuTool = R"(#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
static struct sockaddr_un At(const char* path) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  strncpy(a.sun_path, path, sizeof a.sun_path - 1);
  return a;
}
static void Nest(void) {  // the caller goes on as pid 1 of a pid namespace of its own
  if (unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0 || fork() != 0) for (;;) pause();
}
int main(int argc, char** argv) {
  if (argc == 3 && !strcmp(argv[1], "probe")) {
    int fd = open(argv[2], O_RDWR);
    puts(fd >= 0 ? "OPEN" : errno == ENXIO ? "ENXIO" : errno == EPERM ? "EPERM" : strerror(errno));
    return 0;
  }
  if (argc == 3 && !strcmp(argv[1], "nested-hold")) {
    Nest();
    if (open(argv[2], O_PATH) < 0) return 1;
    for (;;) pause();
  }
  if (argc == 4 && !strcmp(argv[1], "hold-for")) {
    if (open(argv[2], O_PATH) < 0) return 1;
    sleep(atoi(argv[3]));
    puts("HELD");
    return 0;
  }
  if ((argc == 4 && !strcmp(argv[1], "receive")) || (argc == 5 && !strcmp(argv[1], "park"))) {
    Nest();
    struct sockaddr_un a = At(argv[2]);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    unlink(argv[2]);
    if (bind(s, (struct sockaddr*)&a, sizeof a) != 0 || listen(s, 1) != 0) return 1;
    int c = accept(s, 0, 0);
    if (argc == 5) {
      FILE* accepted = fopen(argv[3], "w");
      fputs("accepted\n", accepted);
      fclose(accepted);
      while (access(argv[4], F_OK) != 0) usleep(100000);
    }
    char byte, space[CMSG_SPACE(sizeof(int))];
    struct iovec io = {&byte, 1};
    struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = space,
                       .msg_controllen = sizeof space};
    if (recvmsg(c, &m, 0) != 1 || CMSG_FIRSTHDR(&m) == 0) return 1;
    close(c);
    close(s);
    FILE* mark = fopen(argv[3], "w");
    fputs("received\n", mark);
    fclose(mark);
    for (;;) pause();
  }
  if (argc == 4 && !strcmp(argv[1], "send")) {
    int fd = open(argv[2], O_PATH), s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = At(argv[3]);
    if (fd < 0 || connect(s, (struct sockaddr*)&a, sizeof a) != 0) return 1;
    char byte = 'x', space[CMSG_SPACE(sizeof(int))];
    struct iovec io = {&byte, 1};
    struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = space,
                       .msg_controllen = sizeof space};
    struct cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    return sendmsg(s, &m, 0) == 1 ? 0 : 1;
  }
  return 2;
})";

// A session of bmastest1's runs `args` in the workspace, in the background (its own session).
void StartSession(const std::string& home, const std::string& bmas, const std::string& config,
                  const std::string& state, const std::string& args) {
  auto started = RunCommand(
      {"sh", "-c",
       fmt::format("cd {0} && setsid setpriv --reuid=bmastest1 --regid=bmastest1 --init-groups "
                   "{1} --config {2} --state-dir {3} workspace exec bmastest1 -- {4} "
                   "</dev/null >/dev/null 2>&1 &",
                   home, bmas, config, state, args)});
  ASSERT_TRUE(started && started->exit_code == 0);
}

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// While a job runs, its GPU opens from the job's own processes and from nothing else in the
// workspace: the device cgroup of the workspace refuses it, the job's cgroup allows it.
TEST_F(AgentSecurityTest, OnlyTheJobsOwnCgroupCanOpenItsGpu) {
  const std::string home = Home("bmastest1"), gpu = home + "/gpu";
  Compile(kGpuTool, gpu, "-static", "bmastest1");
  for (const char* left : {"/probe-job", "/gpu.sock", "/received"}) fs::remove(home + left);
  CommandOutput run = InHome("bmastest1", {"run", "--gpus", "1", "--", "sh", "-c",
                                           gpu + " probe /dev/nvidia0 >probe-job; exec sleep 3006"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string id = run.out.substr(0, run.out.find('\n'));
  ASSERT_TRUE(Eventually([&] { return !ReadFileText(home + "/probe-job").empty(); },
                         std::chrono::seconds(30)))
      << HooksLog();
  EXPECT_EQ(ReadFileText(home + "/probe-job"), "ENXIO\n") << "the job reaches the GPU's driver";
  CommandOutput session =
      InHome("bmastest1", {"workspace", "exec", "bmastest1", "--", gpu, "probe", "/dev/nvidia0"});
  EXPECT_EQ(session.exit_code, 0) << session.err;
  EXPECT_EQ(session.out, "EPERM\n") << "a session of the same user, outside the job's cgroup";
  ASSERT_EQ(InHome("bmastest1", {"cancel", id}).exit_code, 0);
  EXPECT_TRUE(Eventually([] { return NoTestSleeps(); }, std::chrono::seconds(30)));
}

// A session holds the job's GPU from nested user and pid namespaces (`unshare -Urpf`), one
// with an fd of its own, one with the job's fd passed over a unix socket: at the job's end both
// are killed before the unplug, and the GPU's next job can use it.
TEST_F(WithoutPeriodicPassTest, AGpuHeldFromNestedNamespacesOrPassedOutIsTakenBackAtTheJobsEnd) {
  const std::string home = Home("bmastest1"), gpu = home + "/gpu";
  Compile(kGpuTool, gpu, "-static", "bmastest1");
  for (const char* left : {"/probe-job", "/gpu.sock", "/received"}) fs::remove(home + left);
  StartSession(home, SharedBinary(), config_, state_,
               fmt::format("{} receive {}/gpu.sock {}/received", gpu, home, home));
  ASSERT_TRUE(Eventually([&] { return fs::exists(home + "/gpu.sock"); }, std::chrono::seconds(30)));
  CommandOutput run = InHome(
      "bmastest1", {"run", "--gpus", "1", "--", "sh", "-c",
                    fmt::format("{0} send /dev/nvidia0 {1}/gpu.sock; exec sleep 3006", gpu, home)});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string id = run.out.substr(0, run.out.find('\n'));
  ASSERT_TRUE(Eventually([&] { return fs::exists(home + "/received"); }, std::chrono::seconds(30)))
      << HooksLog();
  StartSession(home, SharedBinary(), config_, state_, gpu + " nested-hold /dev/nvidia0");
  const std::string nested = gpu + " nested-hold /dev/nvidia0", receiver = gpu + " receive";
  // Two of each: the one that made the namespaces, and pid 1 inside them.
  ASSERT_TRUE(Eventually([&] { return HostProcesses(nested).size() == 2; },
                         std::chrono::seconds(30)));
  ASSERT_EQ(HostProcesses(receiver).size(), 2u);
  ASSERT_EQ(InHome("bmastest1", {"cancel", id}).exit_code, 0);
  ASSERT_TRUE(Eventually(
      [&] { return HooksLog().find("released 1 device(s)") != std::string::npos; },
      std::chrono::seconds(60)))
      << HooksLog();
  // The holders inside the namespaces are gone: each a zombie now, with no command line, beside
  // its parent, which holds nothing and pauses on.
  EXPECT_EQ(HostProcesses(nested).size(), 1u);
  EXPECT_EQ(HostProcesses(receiver).size(), 1u);
  CommandOutput next = InHome("bmastest1", {"run", "--gpus", "1", "--wait", "--", "sh", "-c",
                                            "for d in /dev/nvidia[0-9]*; do " + gpu + " probe $d; done"});
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_EQ(next.out, "ENXIO\n") << "the next job has its GPU";
}

// Issue 23.2's last gap: a job passes its GPU's fd over a unix socket to a session of its user
// (in nested namespaces), which leaves it in flight, unreceived, past the job's end. No process
// holds it at the release, so the epilog finds nothing. Once the session takes it, the agent's
// reconcile pass finds the GPU held outside the job it belongs to, and kills the holder. A job
// that holds its own GPU across many passes is left alone.
TEST_F(AgentSecurityTest, AGpuFdInFlightAtTheJobsEndIsTakenBackWhenItLands) {
  const std::string home = Home("bmastest1"), gpu = home + "/gpu";
  Compile(kGpuTool, gpu, "-static", "bmastest1");
  for (const char* left : {"/gpu.sock", "/parked", "/go", "/sent"}) fs::remove(home + left);
  StartSession(home, SharedBinary(), config_, state_,
               fmt::format("{0} park {1}/gpu.sock {1}/parked {1}/go", gpu, home));
  ASSERT_TRUE(Eventually([&] { return fs::exists(home + "/gpu.sock"); }, std::chrono::seconds(30)));
  CommandOutput run = InHome(
      "bmastest1",
      {"run", "--gpus", "1", "--", "sh", "-c",
       fmt::format("{0} send /dev/nvidia0 {1}/gpu.sock && echo >{1}/sent; exec sleep 3006", gpu,
                   home)});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string id = run.out.substr(0, run.out.find('\n'));
  ASSERT_TRUE(Eventually(
      [&] { return fs::exists(home + "/sent") && ReadFileText(home + "/parked") == "accepted\n"; },
      std::chrono::seconds(30)))
      << HooksLog();
  const std::string parked = gpu + " park";
  ASSERT_EQ(HostProcesses(parked).size(), 2u);
  ASSERT_EQ(InHome("bmastest1", {"cancel", id}).exit_code, 0);
  ASSERT_TRUE(Eventually(
      [&] { return HooksLog().find("released 1 device(s)") != std::string::npos; },
      std::chrono::seconds(60)))
      << HooksLog();
  EXPECT_EQ(HostProcesses(parked).size(), 2u) << "it held nothing the epilog could see";
  // The session takes the fd now: the GPU is held outside any job.
  std::ofstream(home + "/go") << "\n";
  EXPECT_TRUE(Eventually([&] { return HostProcesses(parked).size() == 1; },
                         std::chrono::seconds(20)))
      << agent_->StderrText();
  // The pass says so once the process let go of the GPU.
  EXPECT_TRUE(Eventually(
      [&] { return AgentMetrics().find("bmas_agent_gpu_uses_killed_total 1.0\n") != std::string::npos; },
      std::chrono::seconds(20)));
  EXPECT_THAT(agent_->StderrText(), HasSubstr("outside the job the GPU belongs to"));
  // The legitimate path: a job holds its own GPU for 3 s, several passes, and finishes.
  CommandOutput next = InHome("bmastest1", {"run", "--gpus", "1", "--wait", "--", gpu,
                                            "hold-for", "/dev/nvidia0", "3"});
  EXPECT_EQ(next.exit_code, 0) << next.err << agent_->StderrText();
  EXPECT_EQ(next.out, "HELD\n");
  EXPECT_THAT(AgentMetrics(), HasSubstr("bmas_agent_gpu_uses_killed_total 1.0\n"));
}

// A workspace restarted under a running job comes back in cgroups made anew, with no device
// program, and LXD plugs the job's GPU back in at its start: the agent sees the workspace's
// cgroup made (not its periodic pass, which runs only at its start here) and fences the GPU
// again, and a session of the user cannot open it (lxd/device_fence.h).
TEST_F(WithoutPeriodicPassTest, AWorkspaceRestartedUnderItsJobHasItsGpuFencedAgain) {
  const std::string home = Home("bmastest1"), gpu = home + "/gpu";
  Compile(kGpuTool, gpu, "-static", "bmastest1");
  // The job's own process runs on the host (a plain batch script), so it outlives the restart.
  const std::string script = home + "/hold.sh";
  std::ofstream(script) << "#!/bin/sh\nexec sleep 3006\n";
  chmod(script.c_str(), 0755);
  auto job = RunCommand({"setpriv", "--reuid=bmastest1", "--regid=bmastest1", "--init-groups",
                         "sbatch", "--parsable", "--gpus=1", "-D", home, "-o", "/dev/null", script},
                        {"SLURM_CONF=" + state_ + "/slurm/etc/slurm.conf"});
  ASSERT_TRUE(job && job->exit_code == 0) << (job ? job->out + job->err : job.error().message);
  const std::string id = job->out.substr(0, job->out.find_first_of(";\n"));
  ASSERT_TRUE(Eventually([&] { return HooksLog().find("bound ") != std::string::npos; },
                         std::chrono::seconds(30)))
      << HooksLog();
  auto probe = [&] {
    return InHome("bmastest1", {"workspace", "exec", "bmastest1", "--", gpu, "probe",
                                "/dev/nvidia0"})
        .out;
  };
  EXPECT_EQ(probe(), "EPERM\n") << "fenced by the prolog";
  for (const char* verb : {"stop", "start"}) {
    CommandOutput r = Bmas({"workspace", verb, "bmastest1"}, "", std::chrono::seconds(120));
    ASSERT_EQ(r.exit_code, 0) << verb << ": " << r.out << r.err;
  }
  ASSERT_THAT(DevicesIn("bmastest1"), HasSubstr("nvidia0")) << "LXD plugged it back in";
  EXPECT_TRUE(Eventually([&] { return probe() == "EPERM\n"; }, std::chrono::seconds(20)))
      << probe() << agent_->StderrText();
  EXPECT_THAT(agent_->StderrText(), HasSubstr("fenced the GPUs of"));
  auto cancel = RunCommand({"setpriv", "--reuid=bmastest1", "--regid=bmastest1", "--init-groups",
                            "scancel", id},
                           {"SLURM_CONF=" + state_ + "/slurm/etc/slurm.conf"});
  ASSERT_TRUE(cancel && cancel->exit_code == 0);
  EXPECT_TRUE(Eventually([] { return NoTestSleeps(); }, std::chrono::seconds(30)));
  EXPECT_TRUE(Eventually([&] { return DevicesIn("bmastest1").find("nvidia") == std::string::npos; },
                         std::chrono::seconds(30)))
      << DevicesIn("bmastest1");
}

// The store is root's (finding 8). A user sees their own usage through the agent, which takes
// who they are from the socket's credentials, and nobody else's.
TEST_F(AgentSecurityTest, AUserSeesTheirOwnUsageThroughTheAgentAndNoOneElses) {
  {
    auto store = OpenSqliteStore(StorePath(state_));
    ASSERT_TRUE(store) << store.error().message;
    const int64_t minute = std::time(nullptr) / 60;
    ASSERT_TRUE((*store)->RecordUsage({{minute, "bmastest1", "m", "http://127.0.0.1:1", 3, 111, 22},
                                       {minute, "bmastest2", "m", "http://127.0.0.1:1", 5, 999, 88}}));
  }
  CommandOutput table = InHome("bmastest1", {"usage"});
  CommandOutput mine = InHome("bmastest1", {"usage", "--json"});
  ASSERT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_THAT(mine.out, HasSubstr(R"("user":"bmastest1")"));
  EXPECT_THAT(mine.out, HasSubstr(R"("prompt_tokens":111)"));
  EXPECT_THAT(mine.out, Not(HasSubstr("bmastest2")));
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("bmastest1"));
  // Asking for another user's, or reading the store directly, fails and says why.
  CommandOutput other = InHome("bmastest1", {"usage", "--user", "bmastest2"});
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_THAT(other.err, HasSubstr("only root reads other users' usage"));
  EXPECT_THAT(other.out, Not(HasSubstr("999")));
  auto direct = RunCommand({"setpriv", "--reuid=bmastest1", "--regid=bmastest1", "--init-groups",
                            "cat", StorePath(state_)});
  ASSERT_TRUE(direct);
  EXPECT_NE(direct->exit_code, 0);
  // A forged usage request with another user's name in it changes nothing: there is no such
  // field, and the agent refuses the unknown key.
  const std::string socket = Socket();
  const std::string forged = R"({"op":"usage","job":0,"since":0,"user":"bmastest2"})";
  const std::string reply = AsUser("bmastest1", [&](int out) {
    const int fd = RawConnect(socket.c_str(), 30);
    if (fd < 0 || send(fd, forged.data(), forged.size(), 0) < 0) return;
    WriteReply(fd, out);
  });
  EXPECT_THAT(reply, HasSubstr("unknown key user"));
  // With the agent stopped, the error names the store and what would fix it.
  agent_->Stop(std::chrono::seconds(5));
  CommandOutput down = InHome("bmastest1", {"usage"});
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_THAT(down.err, HasSubstr("no agent answers"));
}

// A job's request may not ask for a login shell or a terminal: its command runs as its batch
// script does, whoever asks and whichever job they name.
TEST_F(AgentSecurityTest, AJobRequestForALoginOrATerminalIsRefused) {
  const std::string socket = Socket();
  for (const std::string request : {R"({"op":"exec","job":4242,"login":true})",
                                    R"({"op":"exec","job":4242,"rows":24,"cols":80})"}) {
    const std::string reply = AsUser("bmastest1", [&](int out) {
      const int fd = RawConnect(socket.c_str(), 30);
      if (fd < 0 || send(fd, request.data(), request.size(), 0) < 0) return;
      WriteReply(fd, out);
    });
    EXPECT_THAT(reply, HasSubstr("a job's command gets no login shell or terminal of its own"))
        << request;
  }
  // The agent goes on serving the user.
  CommandOutput session = InHome("bmastest1", {"workspace", "exec", "bmastest1", "--", "true"});
  EXPECT_EQ(session.exit_code, 0) << session.err;
}

// A student's own API keys, through the agent (the store is root's): create, list and revoke
// their own; never list or revoke another's.
TEST_F(AgentSecurityTest, AUserManagesTheirOwnKeysThroughTheAgentAndNoOneElses) {
  std::string others_id;
  {
    auto store = OpenSqliteStore(StorePath(state_));
    ASSERT_TRUE(store) << store.error().message;
    ASSERT_TRUE((*store)->AddUser("bmastest1", UserLimits{}));
    ASSERT_TRUE((*store)->AddUser("bmastest2", UserLimits{}));
    ASSERT_TRUE((*store)->CreateKey("bmastest2"));
    others_id = (*(*store)->ListKeys("bmastest2"))[0].id;
  }
  CommandOutput created = InHome("bmastest1", {"key", "create"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  ASSERT_THAT(created.out, ::testing::StartsWith("sk-bmas-"));
  const std::string key = created.out.substr(0, created.out.find('\n'));
  const std::string id = key.substr(8, key.find('-', 8) - 8);
  {
    auto store = OpenSqliteStore(StorePath(state_));
    ASSERT_TRUE(store);
    auto who = (*store)->Authenticate(key);
    ASSERT_TRUE(who && *who);
    EXPECT_EQ(**who, "bmastest1");
  }
  CommandOutput list = InHome("bmastest1", {"key", "list", "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("\"id\":\"" + id + "\""));
  EXPECT_THAT(list.out, Not(HasSubstr(others_id)));
  CommandOutput others = InHome("bmastest1", {"key", "list", "bmastest2"});
  EXPECT_EQ(others.exit_code, 2);
  EXPECT_THAT(others.err, HasSubstr("only root manages other users' keys"));
  CommandOutput steal = InHome("bmastest1", {"key", "revoke", others_id});
  EXPECT_EQ(steal.exit_code, 1);
  EXPECT_THAT(steal.err, HasSubstr("no active key"));
  CommandOutput revoke = InHome("bmastest1", {"key", "revoke", id});
  EXPECT_EQ(revoke.exit_code, 0) << revoke.err;
  EXPECT_THAT(InHome("bmastest1", {"key", "list"}).out, Not(HasSubstr(" -\n")));
  {
    auto store = OpenSqliteStore(StorePath(state_));
    ASSERT_TRUE(store);
    auto theirs = (*store)->ListKeys("bmastest2");
    ASSERT_TRUE(theirs);
    EXPECT_FALSE((*theirs)[0].revoked_at) << "another user's key stays";
  }
}

TEST_F(AgentSecurityTest, DeepJsonFromAUserIsRefusedAndTheAgentKeepsServing) {
  const std::string socket = Socket();
  const std::string deep(200 * 1024, '[');
  const std::string reply = AsUser("bmastest2", [&](int out) {
    const int fd = RawConnect(socket.c_str(), 30);
    if (fd < 0 || send(fd, deep.data(), deep.size(), 0) != static_cast<ssize_t>(deep.size())) {
      return;
    }
    WriteReply(fd, out);
  });
  EXPECT_THAT(reply, HasSubstr("nests at most"));
  ExpectTheAgentServes();
}

TEST_F(AgentSecurityTest, AUsersConnectionsAreCappedAndIdleOnesDroppedWhileOthersAreServed) {
  const std::string socket = Socket();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  // bmastest2 opens more connections than the cap and sends nothing; it tells the test when
  // they are open, then reports what each one got.
  std::string replies;
  std::thread user([&] {
    replies = AsUser("bmastest2", [&](int out) {
      int fds[kCapPerUid + 2];
      for (int& fd : fds) fd = RawConnect(socket.c_str(), 10 * kIoTimeoutSeconds);
      [[maybe_unused]] ssize_t w = write(ready[1], "x", 1);
      for (int fd : fds) WriteReply(fd, out);
    });
  });
  char byte;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  // bmastest1 is served meanwhile.
  ExpectTheAgentServes();
  user.join();
  close(ready[0]);
  close(ready[1]);
  std::vector<std::string> lines;
  std::istringstream in(replies);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kCapPerUid + 2)) << replies;
  int dropped = 0, refused = 0;
  for (const std::string& l : lines) {
    dropped += l == "EOF" ? 1 : 0;  // idle past the deadline: closed by the agent
    refused += l.find("too many connections to the agent") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(dropped, kCapPerUid) << replies;
  EXPECT_EQ(refused, 2) << replies;
  EXPECT_THAT(replies, Not(HasSubstr("TIMEOUT")));
  EXPECT_GE(MetricValue(AgentMetrics(), "bmas_agent_connections_over_cap_total").value_or(0), 2.0);
  ExpectTheAgentServes();
}

// The agent runs out of fds (its limit lowered to what it has open, so that every accept fails
// with EMFILE): it says so at most once per few seconds, keeps accepting, and serves everyone
// once fds are free again.
TEST_F(AgentSecurityTest, AnAgentOutOfFileDescriptorsBacksOffAndServesAgain) {
#if defined(BMAS_TEST_UNDER_ASAN)
  // The sanitizers' runtime opens files of its own (/proc/self/maps, to report), which fail at
  // the fd limit too; `make test` runs this.
  GTEST_SKIP() << "fd exhaustion under the sanitizers' runtime; runs in the normal build";
#endif
  rlimit normal{};
  ASSERT_EQ(prlimit(agent_->pid(), RLIMIT_NOFILE, nullptr, &normal), 0);
  const auto open_fds = std::distance(
      fs::directory_iterator(fmt::format("/proc/{}/fd", agent_->pid())), fs::directory_iterator());
  const rlimit exhausted{static_cast<rlim_t>(open_fds), normal.rlim_max};
  ASSERT_EQ(prlimit(agent_->pid(), RLIMIT_NOFILE, &exhausted, nullptr), 0);
  std::vector<int> waiting;
  for (int i = 0; i < 8; ++i) waiting.push_back(RawConnect(Socket().c_str(), 30));
  auto backing_off = [&] {
    const std::string log = agent_->StderrText();
    size_t lines = 0;
    for (size_t at = log.find("backing off"); at != std::string::npos;
         at = log.find("backing off", at + 1)) {
      ++lines;
    }
    return lines;
  };
  ASSERT_TRUE(Eventually([&] { return backing_off() >= 1; }, std::chrono::seconds(10)))
      << agent_->StderrText();
  // Two more seconds out of fds: some twenty failed accepts, and the log says it once.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_LE(backing_off(), 2u) << agent_->StderrText();
  ASSERT_EQ(prlimit(agent_->pid(), RLIMIT_NOFILE, &normal, nullptr), 0);
  ExpectTheAgentServes();
  for (int fd : waiting) {
    if (fd >= 0) close(fd);
  }
}

}  // namespace
}  // namespace bmas::testing
