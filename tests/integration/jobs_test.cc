// `bmas run`, `jobs`, `job show`, `cancel` and `logs` against a real local Slurm that each test
// starts with `bmas slurm up` in its own state dir and stops at its end. Needs root and
// Slurm's packages; the MPI test needs OpenMPI (scripts/install-deps.sh installs them all).

#include <pwd.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/process.h"
#include "engine_process.h"
#include "http_client.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class JobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || access("/usr/sbin/slurmctld", X_OK) != 0) {
      GTEST_SKIP() << "needs root and Slurm (bash scripts/install-deps.sh)";
    }
    // Jobs write their output in the directory they start in: the test's, open to all.
    fs::permissions(dir_.path(), fs::perms::all | fs::perms::sticky_bit);
    state_ = dir_.path() + "/state";
    std::vector<std::string> args = {"--state-dir", state_, "slurm", "up"};
    if (!inventory_.empty()) args.insert(args.end(), {"--cluster", inventory_});
    auto up = RunBmas(args, {}, std::chrono::seconds(120));
    ASSERT_TRUE(up && up->status.Success()) << (up ? up->err : up.error().message);
  }

  void TearDown() override {
    if (!state_.empty()) RunBmas({"--state-dir", state_, "slurm", "down"});
  }

  // `bmas --state-dir STATE ARGS...` in the test's directory, as `user` ("" = root).
  CommandOutput Bmas(const std::vector<std::string>& args, const std::string& user = "",
                     std::chrono::seconds timeout = std::chrono::seconds(60)) {
    std::vector<std::string> argv;
    if (!user.empty()) {
      argv = {"setpriv", "--reuid=" + user, "--regid=" + user, "--init-groups"};
    }
    argv.push_back("sh");
    argv.push_back("-c");
    argv.push_back("cd \"$0\" && exec \"$@\"");
    argv.push_back(dir_.path());
    argv.push_back(user.empty() ? std::string(std::getenv("BMAS_BINARY")) : SharedBinary());
    argv.push_back("--state-dir");
    argv.push_back(state_);
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv, {}, timeout);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  // A copy of the binary other users can run: the build tree may sit in a private directory
  // (a fresh clone under mktemp's 0700 directory, say).
  std::string SharedBinary() {
    const std::string copy = dir_.path() + "/bmas";
    if (!fs::exists(copy)) {
      fs::copy_file(std::getenv("BMAS_BINARY"), copy);
      fs::permissions(copy, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
    }
    return copy;
  }

  rapidjson::Document Job(const std::string& id) {
    CommandOutput r = Bmas({"job", "show", id, "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ParseJson(r.out);
  }

  // Waits until job `id` is in `state` (up to `timeout`).
  bool WaitForState(const std::string& id, const std::string& state,
                    std::chrono::seconds timeout) {
    return Eventually([&] { return Str(At(Job(id), "state")) == state; }, timeout);
  }

  static std::string Trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  // A Unix account for tests that need two users; made once per machine.
  static std::string User(const std::string& name) {
    if (getpwnam(name.c_str()) == nullptr) {
      auto r = RunCommand({"useradd", "--create-home", name});
      EXPECT_TRUE(r && r->exit_code == 0) << (r ? r->err : r.error().message);
    }
    return name;
  }

  TempDir dir_;
  std::string state_;
  std::string inventory_;  // "" = the built-in one
};

TEST_F(JobsTest, TwoGpusLandOnOneNodeAndWaitReturnsTheJobsExitCode) {
  CommandOutput r = Bmas({"run", "--gpus", "2", "--wait", "--", "sh", "-c",
                          "echo $(hostname) $CUDA_VISIBLE_DEVICES $NNODES; exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  std::istringstream words(r.out);
  std::string host, gpus, nnodes;
  words >> host >> gpus >> nnodes;
  EXPECT_THAT(host, ::testing::StartsWith("oss0"));
  EXPECT_EQ(gpus, "0,1");
  EXPECT_EQ(nnodes, "1");
}

TEST_F(JobsTest, EightGpusSpanTwoNodesWithFourEach) {
  CommandOutput r = Bmas({"run", "--gpus", "8", "--wait", "--", "sh", "-c",
                          "echo $(hostname) $CUDA_VISIBLE_DEVICES $NODE_RANK $MASTER_ADDR"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_THAT(lines[0], ::testing::EndsWith("0,1,2,3 0 oss01"));
  EXPECT_THAT(lines[1], ::testing::EndsWith("0,1,2,3 1 oss01"));

  CommandOutput jobs = Bmas({"jobs", "--json"});
  rapidjson::Document rows = ParseJson(jobs.out);
  ASSERT_TRUE(rows.IsArray() && rows.Size() == 1) << jobs.out;
  EXPECT_EQ(Int(At(At(rows, 0), "gpus")), 8);
  EXPECT_EQ(At(At(rows, 0), "nodes").Size(), 2u);
  EXPECT_EQ(Str(At(At(rows, 0), "state")), "COMPLETED");
}

TEST_F(JobsTest, MpiAllreduceAcrossThreeNodesGivesTheSumOnEveryRank) {
  if (access("/usr/bin/mpicc", X_OK) != 0) GTEST_SKIP() << "needs OpenMPI (mpicc)";
  const std::string source = dir_.path() + "/allreduce.c";
  {
    std::ofstream out(source);
    out << "#include <mpi.h>\n#include <stdio.h>\n"
           "int main(int argc, char** argv) {\n"
           "  MPI_Init(&argc, &argv);\n  int rank, size, sum = 0;\n"
           "  MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n  MPI_Comm_size(MPI_COMM_WORLD, &size);\n"
           "  int value = rank + 1;\n"
           "  MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);\n"
           "  printf(\"rank %d of %d: sum %d\\n\", rank, size, sum);\n"
           "  MPI_Finalize();\n  return 0;\n}\n";
  }
  auto cc = RunCommand({"mpicc", "-o", dir_.path() + "/allreduce", source});
  ASSERT_TRUE(cc && cc->exit_code == 0) << (cc ? cc->err : cc.error().message);
  CommandOutput r =
      Bmas({"run", "--nodes", "3", "--launcher", "mpi", "--wait", "--", dir_.path() + "/allreduce"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(r.out, HasSubstr(fmt::format("rank {} of 3: sum 6", rank)));
  }
}

TEST_F(JobsTest, UsersCancelAndReadOnlyTheirOwnJobs) {
  const std::string alice = User("bmastest1"), bob = User("bmastest2");
  CommandOutput run = Bmas({"run", "--", "sleep", "60"}, alice);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string id = Trim(run.out);
  EXPECT_EQ(Str(At(Job(id), "user")), alice);

  CommandOutput denied = Bmas({"cancel", id}, bob);
  EXPECT_EQ(denied.exit_code, 2);
  EXPECT_THAT(denied.err, HasSubstr("belongs to " + alice));
  EXPECT_EQ(Bmas({"logs", id}, bob).exit_code, 2);
  CommandOutput others = Bmas({"run", "--user", alice, "--", "true"}, bob);
  EXPECT_EQ(others.exit_code, 2);
  EXPECT_THAT(others.err, HasSubstr("only root"));

  CommandOutput cancelled = Bmas({"cancel", id}, alice);
  EXPECT_EQ(cancelled.exit_code, 0) << cancelled.err;
  EXPECT_TRUE(WaitForState(id, "CANCELLED", std::chrono::seconds(20)));
  // Again: it says the job had already ended; an id Slurm never gave says there is none.
  CommandOutput again = Bmas({"cancel", id}, alice);
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_THAT(again.err, HasSubstr("had already ended (CANCELLED"));
  CommandOutput none = Bmas({"logs", "999999"}, alice);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.err, HasSubstr("there is no job 999999"));
}

// Ctrl-C of `bmas run --wait` cancels the job, as srun does, and says so; with --detach it
// leaves the job running (issue 15). Both as the job's user.
TEST_F(JobsTest, CtrlCOfRunWaitCancelsTheJobUnlessDetached) {
  const std::string alice = User("bmastest1");
  auto interrupted_run = [&](const std::string& flags) {
    const std::string script = fmt::format(
        "cd \"$0\" && \"$1\" --state-dir \"$2\" run --wait {} -- sleep 291 & p=$!; "
        "sleep 4; kill -INT $p; wait $p; echo rc=$?",
        flags);
    auto r = RunCommand({"setpriv", "--reuid=" + alice, "--regid=" + alice, "--init-groups", "sh",
                         "-c", script, dir_.path(), SharedBinary(), state_},
                        {}, std::chrono::seconds(60));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  };
  auto job_of = [](const std::string& err) {
    std::smatch m;
    return std::regex_search(err, m, std::regex("job ([0-9]+) submitted")) ? m[1].str() : "";
  };
  CommandOutput cancelled = interrupted_run("");
  EXPECT_THAT(cancelled.out, HasSubstr("rc=130"));
  EXPECT_THAT(cancelled.err, HasSubstr("interrupted: cancelled job"));
  const std::string first = job_of(cancelled.err);
  ASSERT_FALSE(first.empty()) << cancelled.err;
  EXPECT_TRUE(WaitForState(first, "CANCELLED", std::chrono::seconds(20)));

  CommandOutput detached = interrupted_run("--detach");
  EXPECT_THAT(detached.out, HasSubstr("rc=130"));
  EXPECT_THAT(detached.err, HasSubstr("runs on (--detach)"));
  const std::string second = job_of(detached.err);
  ASSERT_FALSE(second.empty()) << detached.err;
  EXPECT_EQ(Str(At(Job(second), "state")), "RUNNING");
  EXPECT_EQ(Bmas({"cancel", second}, alice).exit_code, 0);
  // Nothing of either job outlives the test (a stray sleep would outlive the cluster too).
  EXPECT_TRUE(WaitForState(second, "CANCELLED", std::chrono::seconds(20)));
  EXPECT_TRUE(Eventually(
      [] {
        auto r = RunCommand({"pgrep", "-f", "^sleep 291$"});
        return r && r->exit_code == 1;
      },
      std::chrono::seconds(20)));
}

// Slurm would open the output file as the user and fail the job at launch (exit 181,
// JobLaunchFailure) with nothing on the terminal; bmas run says so before submitting.
TEST_F(JobsTest, ARunFromADirectoryTheUserCannotWriteIsRefusedBeforeSubmitting) {
  const std::string alice = User("bmastest1");
  auto r = RunCommand({"setpriv", "--reuid=" + alice, "--regid=" + alice, "--init-groups", "sh",
                       "-c", "cd / && exec \"$0\" --state-dir \"$1\" run -- true",
                       SharedBinary(), state_});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("you cannot write / (Permission denied)"));
  EXPECT_THAT(r->err, HasSubstr("your home is"));
  EXPECT_EQ(Bmas({"jobs", "--json"}).out, "[]\n");
}

TEST_F(JobsTest, ARequestThatCannotFitSaysWhatWould) {
  CommandOutput r = Bmas({"run", "--gpus", "6", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("ask for 4 or 8 GPUs"));
  r = Bmas({"run", "--gpus", "13", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("12 GPUs in all"));
  EXPECT_EQ(Bmas({"jobs", "--json"}).out, "[]\n");  // nothing was submitted
}

// `bmas jobs` says why a job waits in plain words (issue 15); --json keeps Slurm's reason too.
TEST_F(JobsTest, APendingJobsReasonIsInPlainWords) {
  const std::string all = Trim(Bmas({"run", "--gpus", "12", "--", "sleep", "120"}).out);
  ASSERT_TRUE(WaitForState(all, "RUNNING", std::chrono::seconds(20)));
  const std::string waiting = Trim(Bmas({"run", "--gpus", "4", "--", "true"}).out);
  ASSERT_FALSE(waiting.empty());
  EXPECT_TRUE(Eventually([&] { return Str(At(Job(waiting), "reason")) == "Resources"; },
                         std::chrono::seconds(15)))
      << Str(At(Job(waiting), "reason"));
  EXPECT_EQ(Str(At(Job(waiting), "reason_text")), "waiting for free GPUs");
  EXPECT_EQ(Str(At(Job(all), "reason_text")), "");  // running: Slurm says None

  CommandOutput table = Bmas({"jobs"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, ::testing::StartsWith("ID "));
  EXPECT_THAT(table.out, HasSubstr(" REASON\n"));
  EXPECT_THAT(table.out,
              ::testing::ContainsRegex(waiting + " .* PENDING .* waiting for free GPUs\n"));
  EXPECT_THAT(Bmas({"job", "show", waiting}).out,
              HasSubstr("PENDING: waiting for free GPUs [Resources]"));
  EXPECT_EQ(Bmas({"cancel", all}).exit_code, 0);
  EXPECT_EQ(Bmas({"cancel", waiting}).exit_code, 0);
}

TEST_F(JobsTest, TrainingPreemptsInferenceWhichIsRequeuedAndCompletesLater) {
  // An inference replica holds every GPU until it is preempted; on its second run it ends.
  CommandOutput inference =
      Bmas({"run", "--partition", "inference", "--gpus", "12", "--name", "replica", "--", "sh",
            "-c", "if [ \"${SLURM_RESTART_COUNT:-0}\" -gt 0 ]; then exit 0; fi; sleep 300"});
  ASSERT_EQ(inference.exit_code, 0) << inference.err;
  const std::string replica = Trim(inference.out);
  ASSERT_TRUE(WaitForState(replica, "RUNNING", std::chrono::seconds(20)));

  CommandOutput training =
      Bmas({"run", "--partition", "training", "--gpus", "4", "--wait", "--", "echo", "trained"});
  EXPECT_EQ(training.exit_code, 0) << training.err;
  EXPECT_EQ(training.out, "trained\n");

  // Requeued (Slurm lets it start again once its credential expires) and then completed.
  EXPECT_TRUE(WaitForState(replica, "COMPLETED", std::chrono::seconds(180)))
      << Str(At(Job(replica), "state"));
  EXPECT_GE(Int(At(Job(replica), "restart_count")), 1);
}

TEST_F(JobsTest, ResearchModeKeepsOtherUsersOffTheReservedNodesAndLabModeLetsThemBack) {
  const std::string alice = User("bmastest1"), bob = User("bmastest2");
  CommandOutput research = Bmas({"mode", "research", "--users", alice, "--nodes", "oss[01-02]"});
  ASSERT_EQ(research.exit_code, 0) << research.err;
  rapidjson::Document mode = ParseJson(Bmas({"mode", "--json"}).out);
  EXPECT_EQ(Str(At(mode, "mode")), "research");
  EXPECT_EQ(Str(At(At(mode, "users"), 0)), alice);
  EXPECT_EQ(At(mode, "nodes").Size(), 2u);
  EXPECT_EQ(Bmas({"mode", "lab"}, bob).exit_code, 2);  // only root switches
  // A second set of users replaces the first, and says so; --add keeps both.
  CommandOutput replace = Bmas({"mode", "research", "--users", bob, "--nodes", "oss01"});
  ASSERT_EQ(replace.exit_code, 0) << replace.err;
  EXPECT_THAT(replace.out, HasSubstr("this replaces " + alice + " on oss[01-02]"));
  CommandOutput add = Bmas({"mode", "research", "--add", "--users", alice, "--nodes", "oss02"});
  ASSERT_EQ(add.exit_code, 0) << add.err;
  EXPECT_THAT(add.out, HasSubstr(bob + "," + alice + " own oss[01-02]"));
  mode = ParseJson(Bmas({"mode", "--json"}).out);
  EXPECT_EQ(At(mode, "users").Size(), 2u);
  ASSERT_EQ(Bmas({"mode", "research", "--users", alice, "--nodes", "oss[01-02]"}).exit_code, 0);

  // Bob's first 4-GPU job takes the one shared node; his second waits.
  const std::string first = Trim(Bmas({"run", "--gpus", "4", "--", "sleep", "60"}, bob).out);
  const std::string second = Trim(Bmas({"run", "--gpus", "4", "--", "sleep", "60"}, bob).out);
  ASSERT_TRUE(WaitForState(first, "RUNNING", std::chrono::seconds(20)));
  EXPECT_EQ(Str(At(At(Job(first), "nodes"), 0)), "oss03");
  // Alice's jobs go to her nodes, even while Bob's wait.
  CommandOutput mine = Bmas({"run", "--gpus", "4", "--wait", "--", "hostname"}, alice);
  EXPECT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_THAT(mine.out, ::testing::AnyOf("oss01\n", "oss02\n"));
  EXPECT_EQ(Str(At(Job(second), "state")), "PENDING");

  // Lab mode: Bob's waiting job starts on a node that was reserved.
  CommandOutput lab = Bmas({"mode", "lab"});
  ASSERT_EQ(lab.exit_code, 0) << lab.err;
  EXPECT_EQ(Str(At(ParseJson(Bmas({"mode", "--json"}).out), "mode")), "lab");
  ASSERT_TRUE(WaitForState(second, "RUNNING", std::chrono::seconds(30)));
  EXPECT_THAT(Str(At(At(Job(second), "nodes"), 0)), ::testing::AnyOf("oss01", "oss02"));
}

TEST_F(JobsTest, UpsMonitorShowsGpusHeldPerUserAndRecordsFinishedJobsForUsage) {
  // `bmas up` beside the running cluster leaves it alone and starts `bmas slurm monitor`.
  const std::string config = dir_.WriteFile("bmas.toml", "[up]\nlxd = false\n");
  auto up = Process::Start({"--config", config, "--state-dir", state_, "up", "--engines", "0"});
  ASSERT_TRUE(up) << up.error().message;
  auto running = (*up)->WaitForLine("bmas up: running", std::chrono::seconds(30));
  ASSERT_TRUE(running) << running.error().message << (*up)->StderrText();
  const std::string& summary = (*up)->stdout_text();
  const size_t at = summary.find("\n  slurm-mon ");
  ASSERT_NE(at, std::string::npos) << summary;
  const std::string line = summary.substr(at + 1, summary.find('\n', at + 1) - at - 1);
  ASSERT_THAT(line, HasSubstr("/metrics"));
  HttpClient metrics(PortOfUrl(line.substr(line.find("http://"))));
  metrics.SetDefaultHeader("Authorization", OperatorBearerOf(state_));
  auto value = [&](std::string_view series) {
    auto r = metrics.Get("/metrics");
    return r ? MetricValue(r->body, series) : std::nullopt;
  };

  const std::string alice = User("bmastest1");
  const std::string held = Trim(Bmas({"run", "--gpus", "3", "--", "sleep", "60"}, alice).out);
  ASSERT_FALSE(held.empty());
  EXPECT_TRUE(Eventually(
      [&] { return value("bmas_slurm_gpus_held{user=\"bmastest1\",partition=\"lab\"}") == 3; },
      std::chrono::seconds(20)));
  EXPECT_EQ(value("bmas_mode{mode=\"lab\"}"), 1);
  EXPECT_EQ(value("bmas_slurm_gpus{state=\"allocated\"}"), 3);
  ASSERT_EQ(Bmas({"cancel", held}, alice).exit_code, 0);

  // A finished job reaches the store with its GPUs and times; usage shows its GPU-hours.
  CommandOutput done = Bmas({"run", "--gpus", "2", "--wait", "--", "sleep", "2"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  rapidjson::Document usage;
  EXPECT_TRUE(Eventually(
      [&] {
        usage = ParseJson(Bmas({"usage", "--jobs", "--json"}).out);
        return usage.IsArray() && usage.Size() == 2;
      },
      std::chrono::seconds(20)));
  ASSERT_TRUE(usage.IsArray() && usage.Size() == 2);
  EXPECT_EQ(Str(At(At(usage, 0), "user")), "bmastest1");
  EXPECT_EQ(Int(At(At(usage, 0), "jobs")), 1);
  EXPECT_EQ(Str(At(At(usage, 1), "user")), "root");
  EXPECT_EQ(Int(At(At(usage, 1), "jobs")), 1);
  // Two GPUs for about two seconds (Slurm's times are whole seconds).
  EXPECT_GE(Int(At(At(usage, 1), "gpu_seconds")), 2);
  EXPECT_LE(Int(At(At(usage, 1), "gpu_seconds")), 2 * 10);
  EXPECT_THAT(Bmas({"usage"}).out, HasSubstr("GPU_HOURS"));
  EXPECT_GE(value("bmas_slurm_jobs_recorded_total").value_or(0), 2);
}

// Lab-mode guardrails: with accounting, the local cluster starts MariaDB and slurmdbd, and
// the lab partition's QOS caps the GPUs one user holds at once.
class GuardrailTest : public JobsTest {
 protected:
  void SetUp() override {
    // Accounts made before the cluster starts get their Slurm associations from `slurm up`.
    alice_ = User("bmastest1");
    bob_ = User("bmastest2");
    inventory_ = dir_.WriteFile("cluster.toml", R"toml(
[cluster]
controller = { name = "localhost", address = "127.0.0.1" }
[cluster.slurm]
cluster_name = "bmas-guard"
local = true
accounting = true
[[cluster.nodes]]
names = "oss[01-03]"
address = "127.0.0.1"
cpus = 8
memory_gb = 16
[cluster.nodes.gpus]
count = 4
type = "h100"
memory_gb = 80
[[cluster.partitions]]
name = "lab"
default = true
max_gpus_per_user = 4
[[cluster.partitions]]
name = "training"
)toml");
    JobsTest::SetUp();
  }

  std::string alice_, bob_;
};

TEST_F(GuardrailTest, LabCapsGpusPerUserAndBmasRunRefusesEarly) {
  const std::string held = Trim(Bmas({"run", "--gpus", "3", "--", "sleep", "60"}, alice_).out);
  ASSERT_FALSE(held.empty());
  ASSERT_TRUE(WaitForState(held, "RUNNING", std::chrono::seconds(30)));

  // Over the cap with what she holds: refused before Slurm sees it, saying what would fit.
  CommandOutput more = Bmas({"run", "--gpus", "2", "--", "true"}, alice_);
  EXPECT_EQ(more.exit_code, 1);
  EXPECT_THAT(more.err, HasSubstr("at most 4 GPU(s) at once"));
  EXPECT_THAT(more.err, HasSubstr("ask for at most 1"));
  // A job that alone exceeds the cap: refused, pointing at another partition.
  CommandOutput big = Bmas({"run", "--gpus", "8", "--", "true"}, alice_);
  EXPECT_EQ(big.exit_code, 2);
  EXPECT_THAT(big.err, HasSubstr("--partition training"));
  // Within the cap, and other users, and other partitions, are not disturbed.
  EXPECT_EQ(Bmas({"run", "--gpus", "1", "--wait", "--", "true"}, alice_).exit_code, 0);
  EXPECT_EQ(Bmas({"run", "--gpus", "4", "--wait", "--", "true"}, bob_).exit_code, 0);
  EXPECT_EQ(
      Bmas({"run", "--gpus", "8", "--partition", "training", "--wait", "--", "true"}, alice_)
          .exit_code,
      0);

  // Slurm enforces the cap itself (the partition QOS): plain sbatch past it waits.
  auto sbatch = RunCommand({"setpriv", "--reuid=" + alice_, "--regid=" + alice_, "--init-groups",
                            "sbatch", "--parsable", "-D", dir_.path(), "-p", "lab", "--gpus=2",
                            "--wrap", "true"},
                           {"SLURM_CONF=" + state_ + "/slurm/etc/slurm.conf"},
                           std::chrono::seconds(30));
  ASSERT_TRUE(sbatch && sbatch->exit_code == 0) << (sbatch ? sbatch->err : "");
  const std::string waiting = Trim(sbatch->out);
  EXPECT_TRUE(Eventually([&] { return Str(At(Job(waiting), "reason")) == "QOSMaxGRESPerUser"; },
                         std::chrono::seconds(15)));
  EXPECT_EQ(Str(At(Job(waiting), "state")), "PENDING");
}

// Issue 26: GPUs whose MIG layout follows demand, on examples/cluster-local-flex.toml: GPU 3 of
// oss01 and oss02 is a group of layout nodes, whole at the start. Whole-GPU jobs fill the hosts'
// other GPUs; students' notebooks on 1g.10gb slices and a fine-tune on two 3g.40gb slices are
// accepted though no GPU has such slices yet, and wait. One pass of the policy gives each idle
// GPU 3 the layout that serves them; they start. The whole-GPU jobs run on untouched, no node
// is left drained, a student may not change layouts, and a GPU with a job is never changed.
class MigRelayoutTest : public JobsTest {
 protected:
  void SetUp() override {
    inventory_ = std::string(BMAS_SOURCE_DIR) + "/examples/cluster-local-flex.toml";
    JobsTest::SetUp();
  }
  std::string Submit(const std::vector<std::string>& gpus, const std::string& user) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), gpus.begin(), gpus.end());
    for (const char* a : {"--", "sleep", "600"}) args.push_back(a);
    CommandOutput r = Bmas(args, user);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Trim(r.out);
  }
  std::string Sinfo(const std::string& format = "%N %T") {
    auto r = RunCommand({"sinfo", "-h", "-N", "-p", "lab", "-o", format},
                        {"SLURM_CONF=" + state_ + "/slurm/etc/slurm.conf"});
    return r ? r->out : r.error().message;
  }
  // Nodes drained for another reason than being a standby layout (DOWN and drained, with no
  // slurmd): what must never be left.
  std::string Drained() {
    std::istringstream lines(Sinfo("%N|%T|%E"));
    std::string out;
    for (std::string line; std::getline(lines, line);) {
      if (line.find("drain") != std::string::npos &&
          line.find("|bmas: standby MIG layout") == std::string::npos) {
        out += line + "\n";
      }
    }
    return out;
  }
};

TEST_F(MigRelayoutTest, WaitingSliceJobsGetAGpuReLaidWhileOtherJobsRunOnAndNoNodeIsDrained) {
  const std::string alice = User("bmastest1"), bob = User("bmastest2");
  const std::string whole1 = Submit({"--gpus", "3"}, alice);
  const std::string whole2 = Submit({"--gpus", "3"}, bob);
  ASSERT_TRUE(WaitForState(whole1, "RUNNING", std::chrono::seconds(30)));
  ASSERT_TRUE(WaitForState(whole2, "RUNNING", std::chrono::seconds(30)));

  std::vector<std::string> slices = {Submit({"--gpus", "1g.10gb"}, alice),
                                     Submit({"--gpus", "1g.10gb"}, bob),
                                     Submit({"--gpus", "1g.10gb"}, alice)};
  slices.push_back(Submit({"--gpus", "2x3g.40gb"}, bob));
  for (const std::string& id : slices) {
    ASSERT_FALSE(id.empty());
    EXPECT_EQ(Str(At(Job(id), "state")), "PENDING") << id;
  }

  CommandOutput refused = Bmas({"slurm", "relayout", "--auto", "--min-wait", "0"}, alice);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("run it as root"));

  CommandOutput r = Bmas({"slurm", "relayout", "--auto", "--min-wait", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("oss01-gpu3: whole -> 1g.10gb + 1g.10gb"));
  EXPECT_THAT(r.out, HasSubstr("oss02-gpu3: whole -> 3g.40gb + 3g.40gb"));
  EXPECT_THAT(r.out, HasSubstr("schedulable"));
  for (const std::string& id : slices) {
    EXPECT_TRUE(WaitForState(id, "RUNNING", std::chrono::seconds(30))) << id << "\n" << Sinfo();
  }
  // The jobs on the hosts' other GPUs ran on: never stopped, never requeued.
  for (const std::string& id : {whole1, whole2}) {
    rapidjson::Document job = Job(id);
    EXPECT_EQ(Str(At(job, "state")), "RUNNING") << id;
    EXPECT_EQ(At(job, "restart_count").GetInt(), 0) << id;
  }
  // No node is left drained: the old layouts' nodes are standby (DOWN and drained, no slurmd),
  // the hosts and the new layouts' nodes in use.
  EXPECT_EQ(Drained(), "") << Sinfo("%N|%T|%E");
  const std::string nodes = Sinfo();
  EXPECT_THAT(nodes, HasSubstr("oss01-gpu3-0 drained")) << nodes;
  EXPECT_THAT(nodes, HasSubstr("oss01-gpu3-1 mixed")) << nodes;
  EXPECT_THAT(nodes, HasSubstr("oss02-gpu3-3 mixed")) << nodes;

  // A GPU with a job is never re-partitioned.
  CommandOutput busy = Bmas({"slurm", "relayout", "oss01-gpu3", "whole"});
  EXPECT_EQ(busy.exit_code, 1);
  EXPECT_THAT(busy.err, HasSubstr("holds job"));
  EXPECT_EQ(Drained(), "") << Sinfo("%N|%T|%E");
}

// The layout reaches the GPU through NVML's own calls (the fake library here, whose GPUs are
// the host's four H100s): GPU 3 is split, then made whole again; a process on it that Slurm does
// not know of makes NVML refuse, and the old layout serves on, its node not drained.
TEST_F(MigRelayoutTest, TheLayoutIsAppliedThroughNvmlAndAProcessOnTheGpuStopsIt) {
  TempDir nvml_dir;
  const std::string values = nvml_dir.path() + "/nvml.txt";
  const auto write = [&](const std::string& gpu3_extra) {
    std::ofstream out(values);
    for (int g = 0; g < 4; ++g) {
      out << "uuid=GPU-" << g << " name=NVIDIA_H100_80GB_HBM3 util=0 mem_used_mib=0 "
          << "mem_total_mib=81559 mig=0 cc=9.0" << (g == 3 ? gpu3_extra : "") << "\n";
    }
  };
  const auto read = [&] {
    std::ifstream in(values);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  write("");
  setenv("BMAS_FAKE_NVML", values.c_str(), 1);
  CommandOutput split = Bmas({"slurm", "relayout", "oss01-gpu3", "3g.40gb+2g.20gb+2x1g.10gb",
                              "--nvml-library", BMAS_FAKE_NVML_LIBRARY});
  ASSERT_EQ(split.exit_code, 0) << split.out << split.err;
  std::string gpus = read();
  EXPECT_THAT(gpus, HasSubstr("uuid=GPU-3 name=NVIDIA_H100_80GB_HBM3 util=0 mem_used_mib=0 "
                              "mem_total_mib=81559 mig=1"));
  // Where core/mig.h places them: 3g.40gb at memory slice 4, 2g.20gb at 0, the 1g at 2 and 3.
  EXPECT_THAT(gpus, HasSubstr("gi=1 ci=0 profile=3g.40gb start=4"));
  EXPECT_THAT(gpus, HasSubstr("gi=2 ci=0 profile=2g.20gb start=0"));
  EXPECT_THAT(gpus, HasSubstr("gi=4 ci=0 profile=1g.10gb start=3"));
  EXPECT_THAT(gpus, HasSubstr("uuid=GPU-0 name=NVIDIA_H100_80GB_HBM3 util=0 mem_used_mib=0 "
                              "mem_total_mib=81559 mig=0"));
  EXPECT_THAT(Sinfo(), HasSubstr("oss01-gpu3-2 idle"));

  CommandOutput whole = Bmas({"slurm", "relayout", "oss01-gpu3", "whole", "--nvml-library",
                              BMAS_FAKE_NVML_LIBRARY});
  ASSERT_EQ(whole.exit_code, 0) << whole.out << whole.err;
  EXPECT_THAT(read(), Not(HasSubstr("mig uuid=")));

  // A process Slurm knows nothing of (someone's stray CUDA context, say).
  write(" pids=31337");
  CommandOutput refused = Bmas({"slurm", "relayout", "oss01-gpu3", "7x1g.10gb", "--nvml-library",
                                BMAS_FAKE_NVML_LIBRARY});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("GPU 3 has 1 process(es) (pid 31337)"));
  EXPECT_THAT(Sinfo(), HasSubstr("oss01-gpu3-0 idle"));
  EXPECT_EQ(Drained(), "") << Sinfo("%N|%T|%E");
  unsetenv("BMAS_FAKE_NVML");
}

}  // namespace
}  // namespace bmas::testing
