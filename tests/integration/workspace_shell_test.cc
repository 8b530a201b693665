// A student's interactive shell in their workspace, through the agent: a terminal of the
// workspace's own (tty, job control, ^C, window size), a login environment, a working
// directory that exists, and sshd's ForceCommand landing them there over `ssh -tt`.
// Needs root, LXD and Slurm (the agent checks jobs with Slurm), like the workspace tests.

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <pwd.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "lxd_workspace_fixture.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// A program run on a terminal of the test's (forkpty), typed at and read from.
class Terminal {
 public:
  Terminal(const std::vector<std::string>& argv, unsigned short rows, unsigned short cols) {
    winsize size{};
    size.ws_row = rows;
    size.ws_col = cols;
    pid_ = forkpty(&master_, nullptr, nullptr, &size);
    if (pid_ == 0) {
      std::vector<char*> a;
      for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      execvp(a[0], a.data());
      _exit(127);
    }
  }
  ~Terminal() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }

  bool started() const { return pid_ > 0 && master_ >= 0; }

  void Type(const std::string& text) {
    ASSERT_EQ(write(master_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }

  // Reads until `needle` has come (true) or `timeout` passed or the terminal closed (false).
  bool WaitFor(const std::string& needle, std::chrono::seconds timeout = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (output_.find(needle, seen_) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !ReadSome(static_cast<int>(left.count()))) return false;
    }
    seen_ = output_.find(needle, seen_) + needle.size();
    return true;
  }

  void Resize(unsigned short rows, unsigned short cols) {
    winsize size{};
    size.ws_row = rows;
    size.ws_col = cols;
    ioctl(master_, TIOCSWINSZ, &size);
  }

  // Reads to the end and returns the exit code (-1 when it did not end within `timeout`).
  int Wait(std::chrono::seconds timeout = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline && ReadSome(1000)) {
    }
    for (int i = 0; i < 100; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      usleep(100'000);
    }
    return -1;
  }

  const std::string& output() const { return output_; }

 private:
  bool ReadSome(int timeout_ms) {
    pollfd p{master_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[4096];
    const ssize_t n = read(master_, buf, sizeof buf);
    if (n <= 0) return false;  // EIO: the program and its children closed the terminal
    output_.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int master_ = -1;
  bool exited_ = false;
  std::string output_;
  size_t seen_ = 0;
};

bool PortOpen(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool open = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return open;
}

// sshd in the foreground, its log in `log`; killed when this goes.
class Sshd {
 public:
  Sshd(const std::string& config, const std::string& log) {
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 2);
      execl("/usr/sbin/sshd", "/usr/sbin/sshd", "-D", "-e", "-f", config.c_str(), nullptr);
      _exit(127);
    }
  }
  ~Sshd() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class WorkspaceShellTest : public WorkspaceJobsTest {
 protected:
  // Debian's sshd on a spare loopback port, with a key for bmastest1 (in the group
  // bmasstudents, its account unlocked), and `extra` at the end of its config.
  void StartSshd(const std::string& extra) {
    ssh_dir_ = dir_ + "/ssh";
    fs::create_directories(ssh_dir_);
    chmod(dir_.c_str(), 0755);
    for (const char* key : {"host_key", "student_key"}) {
      auto made = RunCommand({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                              ssh_dir_ + "/" + key});
      ASSERT_TRUE(made && made->exit_code == 0);
    }
    const passwd* pw = getpwnam("bmastest1");
    ASSERT_EQ(chown((ssh_dir_ + "/student_key").c_str(), pw->pw_uid, pw->pw_gid), 0);
    fs::copy_file(ssh_dir_ + "/student_key.pub", ssh_dir_ + "/authorized_keys");
    chmod(ssh_dir_.c_str(), 0755);
    chmod((ssh_dir_ + "/authorized_keys").c_str(), 0644);
    // A group for the students, as a cluster's admin would have; and sshd refuses a locked
    // account ("!" in the shadow file, as useradd leaves it).
    ASSERT_TRUE(RunCommand({"groupadd", "-f", "bmasstudents"}));
    ASSERT_TRUE(RunCommand({"usermod", "-a", "-G", "bmasstudents", "bmastest1"}));
    ASSERT_TRUE(RunCommand({"usermod", "-p", "*", "bmastest1"}));
    port_ = FreeTcpPort();
    std::ofstream(ssh_dir_ + "/sshd_config")
        << "Port " << port_ << "\nListenAddress 127.0.0.1\nHostKey " << ssh_dir_
        << "/host_key\nAuthorizedKeysFile " << ssh_dir_
        << "/authorized_keys\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
           "UsePAM no\nPidFile none\nStrictModes no\n"
        << extra;
    fs::create_directories("/run/sshd");  // its privilege separation directory
    sshd_log_ = ssh_dir_ + "/sshd.log";
    sshd_ = std::make_unique<Sshd>(ssh_dir_ + "/sshd_config", sshd_log_);
    ASSERT_TRUE(Eventually([&] { return PortOpen(port_); }, std::chrono::seconds(10)))
        << ReadFile(sshd_log_);
  }

  // `ssh -tt` to the test's sshd as `user`.
  std::vector<std::string> Ssh(const std::string& user) {
    return {"setpriv", "--reuid=" + user, "--regid=" + user, "--init-groups", "ssh", "-tt",
            "-p", std::to_string(port_), "-i", ssh_dir_ + "/student_key", "-o",
            "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o",
            "LogLevel=ERROR", user + "@127.0.0.1"};
  }

  static std::string Hostname() {
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    return name;
  }

  void TearDown() override {
    sshd_.reset();
    WorkspaceJobsTest::TearDown();
  }

  std::string ssh_dir_, sshd_log_;
  int port_ = 0;
  std::unique_ptr<Sshd> sshd_;

  // `bmas workspace shell` as `user`, from `cwd`, with only TERM and LANG in the environment.
  std::vector<std::string> ShellAs(const std::string& user, const std::string& cwd) {
    return {"env", "-i", "TERM=vt220", "LANG=C.UTF-8", "PATH=/usr/bin:/bin", "setpriv",
            "--reuid=" + user, "--regid=" + user, "--init-groups", "sh", "-c",
            "cd \"$0\" && exec \"$@\"", cwd, SharedBinary(), "--config", config_, "--state-dir",
            state_, "workspace", "shell"};
  }
};

TEST_F(WorkspaceShellTest, AStudentsShellHasATerminalALoginEnvironmentAndJobControl) {
  Terminal t(ShellAs("bmastest1", Home("bmastest1")), 24, 80);
  ASSERT_TRUE(t.started());
  // The workspace's own terminal, the login environment, the home as the directory.
  t.Type("echo \"<$(tty)|$TERM|$HOME|$USER|$SHELL|$PATH|$LANG|$(pwd)|$(hostname)>\"\n");
  const passwd* pw = getpwnam("bmastest1");
  const std::string home = Home("bmastest1");
  ASSERT_TRUE(t.WaitFor(fmt::format("|vt220|{}|bmastest1|", home))) << t.output();
  ASSERT_TRUE(t.WaitFor(fmt::format("|C.UTF-8|{}|ws-bmastest1>", home))) << t.output();
  EXPECT_THAT(t.output(), HasSubstr("</dev/pts/")) << t.output();
  EXPECT_THAT(t.output(), HasSubstr("|/usr/local/bin:/usr/bin:/bin")) << t.output();
  EXPECT_THAT(t.output(), Not(HasSubstr("not a tty")));
  EXPECT_THAT(t.output(), Not(HasSubstr("getcwd")));
  // The terminal is the user's, as login(1) leaves one.
  t.Type("stat -c 'owner=%u' $(tty)\n");
  EXPECT_TRUE(t.WaitFor(fmt::format("owner={}", pw->pw_uid))) << t.output();
  // Job control is on, and ^C reaches the foreground command inside, not bmas.
  t.Type("case $- in *m*) echo job-control-on;; esac\n");
  EXPECT_TRUE(t.WaitFor("job-control-on")) << t.output();
  t.Type("sleep 53\n");
  sleep(1);
  t.Type("\x03");
  t.Type("echo after-interrupt-$?\n");
  EXPECT_TRUE(t.WaitFor("after-interrupt-130", std::chrono::seconds(15))) << t.output();
  // The window size follows the outer terminal's.
  t.Type("stty size\n");
  EXPECT_TRUE(t.WaitFor("24 80")) << t.output();
  t.Resize(41, 123);
  sleep(1);
  t.Type("stty size\n");
  EXPECT_TRUE(t.WaitFor("41 123")) << t.output();
  t.Type("exit 6\n");
  EXPECT_EQ(t.Wait(), 6) << t.output();
}

// The workspace's /dev is its root's to change, and the agent (root) opens its /dev/ptmx. A
// symlink there out to a host file is resolved inside the workspace, never on the host; a node
// that is not the terminal multiplexer (a FIFO) is refused at once, with the reason.
TEST_F(WorkspaceShellTest, AWorkspacesDevPtmxCannotLeadTheAgentOut) {
  auto as_root_inside = [&](const std::string& script) {
    auto r = RunCommand({"lxc", "exec", "ws-bmastest1", "--", "sh", "-c", script},
                        {"LXD_DIR=" + dir_ + "/lxd"});
    EXPECT_TRUE(r && r->exit_code == 0) << (r ? r->out + r->err : r.error().message);
  };
  // A host FIFO: had the agent followed the link on the host, it would have opened it and failed
  // to make a terminal of it.
  chmod(dir_.c_str(), 0755);
  const std::string host_fifo = dir_ + "/host-fifo";
  ASSERT_EQ(mkfifo(host_fifo.c_str(), 0666), 0);
  as_root_inside("umount /dev/ptmx 2>/dev/null; rm -f /dev/ptmx && ln -s " + host_fifo +
                 " /dev/ptmx");
  {
    Terminal t(ShellAs("bmastest1", Home("bmastest1")), 24, 80);
    ASSERT_TRUE(t.started());
    t.Type("echo \"tty=<$(tty)>\"; exit 3\n");
    EXPECT_EQ(t.Wait(), 3) << t.output();
    EXPECT_THAT(t.output(), HasSubstr("tty=</dev/pts/"));
  }
  // Both multiplexers replaced by FIFOs: no terminal, and a clear refusal, not a hang.
  as_root_inside("rm -f /dev/ptmx && mkfifo /dev/ptmx && mount -t tmpfs none /dev/pts && "
                 "mkfifo /dev/pts/ptmx");
  Terminal t(ShellAs("bmastest1", Home("bmastest1")), 24, 80);
  ASSERT_TRUE(t.started());
  EXPECT_NE(t.Wait(std::chrono::seconds(20)), 0) << t.output();
  EXPECT_THAT(t.output(), HasSubstr("the workspace has no terminals (/dev/ptmx: not the terminal "
                                    "multiplexer; /dev/pts/ptmx: not the terminal multiplexer)"));
}

// From a directory the workspace also has (/tmp), the shell starts there; from one it lacks, in
// the home. Never a working directory that does not exist.
TEST_F(WorkspaceShellTest, TheWorkingDirectoryAlwaysExists) {
  const std::string outside = dir_ + "/not-in-the-workspace";
  fs::create_directories(outside);
  chmod(dir_.c_str(), 0755);
  chmod(outside.c_str(), 0777);
  for (const auto& [from, expected] :
       std::vector<std::pair<std::string, std::string>>{{"/tmp", "/tmp"},
                                                        {outside, Home("bmastest1")}}) {
    Terminal t(ShellAs("bmastest1", from), 24, 80);
    ASSERT_TRUE(t.started());
    t.Type("echo \"cwd=<$(pwd)>\"; exit\n");
    EXPECT_EQ(t.Wait(), 0) << t.output();
    EXPECT_THAT(t.output(), HasSubstr("cwd=<" + expected + ">")) << from;
    EXPECT_THAT(t.output(), Not(HasSubstr("getcwd")));
  }
  // `workspace exec` and a job's command do the same (the agent's rule is shared).
  auto exec = RunCommand({"setpriv", "--reuid=bmastest1", "--regid=bmastest1", "--init-groups",
                          "sh", "-c", "cd \"$0\" && exec \"$@\"", outside, SharedBinary(),
                          "--config", config_, "--state-dir", state_, "workspace", "exec",
                          "bmastest1", "--", "pwd"});
  ASSERT_TRUE(exec);
  EXPECT_EQ(exec->out, Home("bmastest1") + "\n") << exec->err;
}

// What a student types after logging in: sshd's `Match Group ... ForceCommand bmas workspace
// shell` puts them in their workspace, on a terminal, with `ssh -tt`. Debian's sshd, started by
// the test on a spare loopback port.
TEST_F(WorkspaceShellTest, SshWithForceCommandLandsInTheWorkspaceOnATerminal) {
  if (access("/usr/sbin/sshd", X_OK) != 0) GTEST_SKIP() << "needs openssh-server";
  StartSshd("Match Group bmasstudents\n  ForceCommand " + SharedBinary() + " --config " +
            config_ + " --state-dir " + state_ + " workspace shell\n");
  Terminal t(Ssh("bmastest1"), 30, 100);
  ASSERT_TRUE(t.started());
  t.Type("echo \"at=<$(hostname)|$(id -un)|$(tty)|$(stty size)|$(pwd)>\"; exit 3\n");
  EXPECT_EQ(t.Wait(), 3) << t.output() << ReadFile(sshd_log_);
  EXPECT_THAT(t.output(), HasSubstr("at=<ws-bmastest1|bmastest1|/dev/pts/")) << t.output();
  EXPECT_THAT(t.output(), HasSubstr(fmt::format("|30 100|{}>", Home("bmastest1"))))
      << t.output();
}

// `ssh host CMD` (and scp, rsync, which are that underneath) under the ForceCommand: sshd puts
// CMD in $SSH_ORIGINAL_COMMAND, and it runs in the workspace as the student, without a terminal,
// with its output and exit code passed back, and its stdin streamed in. Before, the command was
// ignored and a login shell read stdin instead: no output, exit 0, and scp hung.
TEST_F(WorkspaceShellTest, SshWithACommandRunsItInTheWorkspaceUnderTheForceCommand) {
  if (access("/usr/sbin/sshd", X_OK) != 0) GTEST_SKIP() << "needs openssh-server";
  StartSshd("Match Group bmasstudents\n  ForceCommand " + SharedBinary() + " --config " +
            config_ + " --state-dir " + state_ +
            " workspace shell\n  PermitUserRC no\n  DisableForwarding yes\n");
  std::vector<std::string> ssh = Ssh("bmastest1");
  ssh.erase(std::find(ssh.begin(), ssh.end(), "-tt"));  // no terminal asked for
  std::vector<std::string> run = ssh;
  run.push_back("echo hi; echo \"at=<$(hostname)|$(id -un)|$(tty 2>&1)>\"; exit 3");
  auto r = RunCommand(run, {}, std::chrono::seconds(60));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 3) << r->out << r->err << ReadFile(sshd_log_);
  EXPECT_THAT(r->out, HasSubstr("hi\n"));
  EXPECT_THAT(r->out, HasSubstr("at=<ws-bmastest1|bmastest1|not a tty>")) << r->out;
  // What scp and rsync do: a byte stream into a file of the workspace, through stdin.
  const std::string home = Home("bmastest1");
  const std::string source = dir_ + "/to-copy.txt";
  std::ofstream(source) << "copied over ssh\n";
  chmod(source.c_str(), 0644);
  std::remove((home + "/copied.txt").c_str());
  std::string script = "exec \"$@\" < \"$0\"";
  std::vector<std::string> copy = {"sh", "-c", script, source};
  copy.insert(copy.end(), ssh.begin(), ssh.end());
  copy.push_back("cat > copied.txt && echo copied-in-$(hostname)");
  r = RunCommand(copy, {}, std::chrono::seconds(60));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 0) << r->out << r->err;
  EXPECT_THAT(r->out, HasSubstr("copied-in-ws-bmastest1"));
  EXPECT_EQ(ReadFile(home + "/copied.txt"), "copied over ssh\n");
  struct stat st {};
  ASSERT_EQ(stat((home + "/copied.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, getpwnam("bmastest1")->pw_uid);
  // A login without a command still lands in the interactive shell.
  Terminal t(Ssh("bmastest1"), 24, 80);
  ASSERT_TRUE(t.started());
  t.Type("echo \"in=<$(hostname)>\"; exit 4\n");
  EXPECT_EQ(t.Wait(), 4) << t.output();
  EXPECT_THAT(t.output(), HasSubstr("in=<ws-bmastest1>"));
}

// A fresh student, from login to a GPU job's output, typing only the README's "For users"
// commands in an ssh session on the login node. Their `bmas` finds the cluster through the
// config alone (here $BMAS_CONFIG, which sshd sets, in place of /etc/bmas/bmas.toml).
TEST_F(WorkspaceShellTest, AStudentFollowsTheReadmeFromLoginToAGpuJob) {
  if (access("/usr/sbin/sshd", X_OK) != 0) GTEST_SKIP() << "needs openssh-server";
  const std::string cluster_config = dir_ + "/cluster.toml";
  std::ofstream(cluster_config) << "state_dir = \"" << state_ << "\"\n" << ReadFile(config_);
  chmod(cluster_config.c_str(), 0644);
  {
    auto added = RunCommand({std::getenv("BMAS_BINARY"), "--config", cluster_config, "user",
                             "add", "bmastest1"});
    ASSERT_TRUE(added && added->exit_code == 0) << (added ? added->err : "");
  }
  StartSshd("SetEnv BMAS_CONFIG=" + cluster_config + "\n");
  Terminal t(Ssh("bmastest1"), 40, 120);
  ASSERT_TRUE(t.started());
  // Where `make install` would have put bmas: the test's copy stands in for it.
  t.Type("bmas() { " + SharedBinary() + " \"$@\"; }; echo logged-in-$(hostname)\n");
  ASSERT_TRUE(t.WaitFor("logged-in-" + Hostname())) << t.output();
  t.Type("bmas workspace shell\n");
  t.Type("echo inside-$(hostname)-$(whoami); exit\n");
  ASSERT_TRUE(t.WaitFor("inside-ws-bmastest1-bmastest1")) << t.output();
  // What is typed while the workspace's shell ends goes to it (and is lost), as with ssh:
  // type again until the login node's shell answers.
  bool back = false;
  for (int i = 0; i < 10 && !back; ++i) {
    t.Type("echo back-$((40+2))\n");
    back = t.WaitFor("back-42", std::chrono::seconds(2));
  }
  ASSERT_TRUE(back) << t.output();
  t.Type("cd /tmp && bmas run --gpus 1 --wait -- sh -c 'echo job-sees $(ls /dev/nvidia[0-9]*)'\n");
  ASSERT_TRUE(t.WaitFor("job-sees /dev/nvidia", std::chrono::seconds(60))) << t.output();
  t.Type("bmas run --gpus 1 --wait -- sleep 287\n");
  ASSERT_TRUE(t.WaitFor("submitted", std::chrono::seconds(30))) << t.output();
  sleep(2);
  t.Type("\x03");
  ASSERT_TRUE(t.WaitFor("interrupted: cancelled job", std::chrono::seconds(30))) << t.output();
  t.Type("bmas jobs; bmas usage; echo usage-exit-$?\n");
  ASSERT_TRUE(t.WaitFor("usage-exit-0", std::chrono::seconds(30))) << t.output();
  t.Type("bmas key create; bmas key list; echo keys-exit-$?\n");
  ASSERT_TRUE(t.WaitFor("sk-bmas-", std::chrono::seconds(30))) << t.output();
  ASSERT_TRUE(t.WaitFor("keys-exit-0", std::chrono::seconds(30))) << t.output();
  t.Type("exit\n");
  EXPECT_EQ(t.Wait(), 0) << t.output() << ReadFile(sshd_log_);
}

}  // namespace
}  // namespace bmas::testing
