#include "agent/agent.h"
#include "agent/agent_spawn.h"

#include <gtest/gtest.h>

namespace bmas {
namespace {

TEST(AgentTest, OnlyAProcessInTheJobsOwnCgroupIsPartOfIt) {
  // cgroup v1 (hybrid) as slurmd writes it for a local node, and cgroup v2.
  const std::string v1 =
      "12:memory:/slurm_oss01/uid_1003/job_6820001/step_batch/user/task_0\n"
      "11:devices:/slurm_oss01/uid_1003/job_6820001/step_batch\n"
      "1:name=systemd:/\n0::/\n";
  EXPECT_TRUE(InSlurmJobCgroup(v1, 6820001));
  EXPECT_FALSE(InSlurmJobCgroup(v1, 682000));  // a prefix of the id is another job
  EXPECT_FALSE(InSlurmJobCgroup(v1, 6820002));
  const std::string v2 = "0::/system.slice/oss01_slurmstepd.scope/job_77/step_batch/user/task_0\n";
  EXPECT_TRUE(InSlurmJobCgroup(v2, 77));
  EXPECT_FALSE(InSlurmJobCgroup("0::/user.slice/user-1003.slice/session-4.scope\n", 77));
}

}  // namespace
}  // namespace bmas

namespace bmas {
namespace {

TEST(LoginEnvironmentTest, KeepsTheCallersTerminalAndLocaleOnlyAndSetsTheLoginVariables) {
  const std::vector<std::string> env = LoginEnvironment(
      {"TERM=screen", "LANG=de_DE.UTF-8", "LC_TIME=C", "TZ=Europe/Berlin", "EDITOR=vim",
       "PATH=/home/u/bin", "HOME=/elsewhere", "SSH_AUTH_SOCK=/tmp/x", "COLORTERM=truecolor"},
      "u", "/home/u", "/bin/bash", /*terminal=*/true);
  EXPECT_EQ(env, (std::vector<std::string>{
                     "TERM=screen", "LANG=de_DE.UTF-8", "LC_TIME=C", "TZ=Europe/Berlin",
                     "COLORTERM=truecolor", "HOME=/home/u", "USER=u", "LOGNAME=u",
                     "SHELL=/bin/bash",
                     "PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"}));
}

TEST(LoginEnvironmentTest, ATerminalWithoutTermGetsOneAndATermPathIsDropped) {
  auto term_of = [](const std::vector<std::string>& env) {
    for (const std::string& e : env) {
      if (e.starts_with("TERM=")) return e;
    }
    return std::string("<none>");
  };
  EXPECT_EQ(term_of(LoginEnvironment({}, "u", "/home/u", "/bin/sh", true)),
            "TERM=xterm-256color");
  EXPECT_EQ(term_of(LoginEnvironment({}, "u", "/home/u", "/bin/sh", false)), "<none>");
  EXPECT_EQ(term_of(LoginEnvironment({"TERM=../../tmp/evil"}, "u", "/home/u", "/bin/sh", true)),
            "TERM=xterm-256color");
}

TEST(LoginShellsTest, TheAccountsShellFirstThenBashThenSh) {
  EXPECT_EQ(LoginShells("/usr/bin/zsh"),
            (std::vector<std::string>{"/usr/bin/zsh", "/bin/bash", "/bin/sh"}));
  EXPECT_EQ(LoginShells("/bin/sh"), (std::vector<std::string>{"/bin/sh", "/bin/bash"}));
  EXPECT_EQ(LoginShells("/usr/sbin/nologin"),
            (std::vector<std::string>{"/bin/bash", "/bin/sh"}));
  EXPECT_EQ(LoginShells(""), (std::vector<std::string>{"/bin/bash", "/bin/sh"}));
}

}  // namespace
}  // namespace bmas
