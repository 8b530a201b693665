// SlurmRestClient against a live slurmrestd (openapi/v0.0.38) with JWT authentication.
//
// The cluster comes from the environment; without it every test skips:
//   BMAS_TEST_SLURMRESTD        host:port of slurmrestd (e.g. 127.0.0.1:6820)
//   BMAS_TEST_SLURM_JWT_KEY     the cluster's AuthAltParameters=jwt_key file (readable here)
//   BMAS_TEST_SLURM_USER        Unix user the jobs run as
//   BMAS_TEST_SLURM_OTHER_USER  a second Unix user (only for the cross-user test)
//   BMAS_TEST_SLURM_PARTITION   partition to submit to (default: the cluster's default)
//   BMAS_TEST_SLURM_WORKDIR     job working directory, writable by both users and readable
//                               here (default: a fresh mode-1777 directory under /tmp)
// The cluster needs a node with at least 2 GPUs (GRES gpu).

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "slurm/jwt.h"
#include "common/process.h"
#include "slurm/rest_client.h"

namespace bmas {
namespace {

using std::chrono::steady_clock;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

class SlurmRestIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static bool local = false;  // the environment below is ours: a new cluster per test
    if (local || Env("BMAS_TEST_SLURMRESTD").empty()) {
      StartLocalCluster();
      local = !state_.empty();
    }
    address_ = Env("BMAS_TEST_SLURMRESTD");
    key_path_ = Env("BMAS_TEST_SLURM_JWT_KEY");
    user_ = Env("BMAS_TEST_SLURM_USER");
    if (address_.empty() || key_path_.empty() || user_.empty()) {
      GTEST_SKIP() << "no live slurmrestd: set BMAS_TEST_SLURMRESTD=host:port, "
                      "BMAS_TEST_SLURM_JWT_KEY=<jwt key file> and BMAS_TEST_SLURM_USER=<unix "
                      "user> (optionally BMAS_TEST_SLURM_OTHER_USER, BMAS_TEST_SLURM_PARTITION, "
                      "BMAS_TEST_SLURM_WORKDIR)";
    }
    workdir_ = Env("BMAS_TEST_SLURM_WORKDIR");
    if (workdir_.empty()) {
      std::string tmpl = "/tmp/bmas-slurm-rest-test-XXXXXX";
      ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
      workdir_ = tmpl;
      owns_workdir_ = true;
      ASSERT_EQ(chmod(workdir_.c_str(), 01777), 0);
    }
  }

  // Without a slurmrestd named in the environment, as root with Slurm installed: one of our own
  // (`bmas slurm up` in a fresh state dir, stopped in TearDown), and two test users.
  void StartLocalCluster() {
    const std::string bmas = Env("BMAS_BINARY");
    if (geteuid() != 0 || bmas.empty() || access("/usr/sbin/slurmctld", X_OK) != 0) return;
    std::string tmpl = "/tmp/bmas-slurm-rest-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    workdir_ = tmpl;
    owns_workdir_ = true;
    ASSERT_EQ(chmod(workdir_.c_str(), 01777), 0);
    state_ = workdir_ + "/state";
    auto up = RunCommand({bmas, "--state-dir", state_, "slurm", "up"});
    ASSERT_TRUE(up && up->exit_code == 0) << (up ? up->err : up.error().message);
    const std::string marker = "slurmrestd  http://";
    const size_t at = up->out.find(marker);
    ASSERT_NE(at, std::string::npos) << up->out;
    std::string address = up->out.substr(at + marker.size());
    address = address.substr(0, address.find('\n'));
    for (const char* user : {"bmastest1", "bmastest2"}) {
      if (getpwnam(user) == nullptr) {
        auto added = RunCommand({"useradd", "--create-home", user});
        ASSERT_TRUE(added && added->exit_code == 0);
      }
    }
    setenv("BMAS_TEST_SLURMRESTD", address.c_str(), 1);
    setenv("BMAS_TEST_SLURM_JWT_KEY", (state_ + "/slurm/etc/jwt_hs256.key").c_str(), 1);
    setenv("BMAS_TEST_SLURM_USER", "bmastest1", 1);
    setenv("BMAS_TEST_SLURM_OTHER_USER", "bmastest2", 1);
    setenv("BMAS_TEST_SLURM_WORKDIR", workdir_.c_str(), 1);
  }

  // Cancels what the test left running and removes the working directory it made.
  void TearDown() override {
    for (const auto& [user, id] : submitted_) {
      SlurmRestClient client = ClientFor(user);
      auto job = client.Job(id);
      if (job && !IsFinal(job->state)) (void)client.Cancel(id);
    }
    if (!state_.empty()) {
      auto down = RunCommand({Env("BMAS_BINARY"), "--state-dir", state_, "slurm", "down"});
      EXPECT_TRUE(down && down->exit_code == 0) << (down ? down->err : down.error().message);
    }
    if (owns_workdir_) {
      std::error_code ec;
      std::filesystem::remove_all(workdir_, ec);
    }
  }

  // Submits as `client`'s user and remembers the job for TearDown.
  Result<int64_t> Submit(SlurmRestClient& client, const JobSpec& spec) {
    auto id = client.Submit(spec);
    if (id) submitted_.emplace_back(client.endpoint().user, *id);
    return id;
  }

  // A client acting as `user`, with a token minted from the cluster's key.
  SlurmRestClient ClientFor(const std::string& user) {
    auto endpoint = ParseRestAddress(address_);
    EXPECT_TRUE(endpoint) << endpoint.error().message;
    RestEndpoint e = endpoint ? *endpoint : RestEndpoint{};
    e.user = user;
    auto token = MintSlurmJwtFromKeyFile(
        key_path_, user, static_cast<int64_t>(Env::Default().UnixNow()), 600);
    EXPECT_TRUE(token) << token.error().message;
    if (token) e.token = *token;
    return SlurmRestClient(e, std::chrono::seconds(20));
  }

  JobSpec Spec(const std::string& name, const std::string& body) {
    JobSpec s;
    s.name = name;
    s.partition = Env("BMAS_TEST_SLURM_PARTITION");
    s.nodes = 1;
    s.tasks = 1;
    s.time_limit_minutes = 5;
    s.cwd = workdir_;
    s.stdout_path = workdir_ + "/%x-%j.out";
    s.environment = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}};
    s.script = "#!/bin/bash\n" + body;
    return s;
  }

  // Polls the job until `done` holds or `timeout` passes; returns the last state seen.
  template <typename Done>
  std::optional<JobInfo> WaitFor(SlurmRestClient& client, int64_t id, Done done,
                                 std::chrono::seconds timeout = std::chrono::seconds(60)) {
    const auto until = steady_clock::now() + timeout;
    std::optional<JobInfo> last;
    while (steady_clock::now() < until) {
      auto job = client.Job(id);
      if (!job) {
        ADD_FAILURE() << "job " << id << ": " << job.error().message;
        return last;
      }
      last = *job;
      if (done(*last)) return last;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "job " << id << " still " << (last ? JobStateName(last->state) : "unknown") << " after "
                  << timeout.count() << " s";
    return last;
  }

  static std::string ReadFile(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  std::string address_;
  std::string key_path_;
  std::string user_;
  std::string workdir_;
  bool owns_workdir_ = false;
  std::string state_;  // the state dir of the local cluster this test started, if any
  std::vector<std::pair<std::string, int64_t>> submitted_;
};

bool Final(const JobInfo& j) { return IsFinal(j.state); }
bool Running(const JobInfo& j) { return j.state == JobState::kRunning || IsFinal(j.state); }

TEST_F(SlurmRestIntegrationTest, Ping) {
  SlurmRestClient client = ClientFor(user_);
  auto release = client.Ping();
  ASSERT_TRUE(release) << release.error().message;
  EXPECT_FALSE(release->empty());
}

TEST_F(SlurmRestIntegrationTest, TwoGpuJobRunsAsTheUserOnOneNode) {
  SlurmRestClient client = ClientFor(user_);
  JobSpec spec = Spec("rest-gpu2",
                      "echo \"CVD=$CUDA_VISIBLE_DEVICES\"\n"
                      "echo \"USER=$(id -un)\"\n"
                      "sleep 2\n");
  spec.gres = "gpu:2";
  auto id = Submit(client, spec);
  ASSERT_TRUE(id) << id.error().message;

  auto running = WaitFor(client, *id, Running);
  ASSERT_TRUE(running.has_value());
  ASSERT_EQ(running->state, JobState::kRunning)
      << "finished before it was seen running: " << running->reason;
  EXPECT_EQ(running->gpus, 2);
  ASSERT_EQ(running->gpu_alloc.size(), 1u);
  EXPECT_EQ(running->gpu_alloc[0].node, running->nodes.at(0));
  EXPECT_EQ(running->gpu_alloc[0].indexes.size(), 2u);
  EXPECT_GT(running->start_time, 0);

  auto jobs = client.Jobs();
  ASSERT_TRUE(jobs) << jobs.error().message;
  bool listed = false;
  for (const JobInfo& j : *jobs) listed = listed || j.id == *id;
  EXPECT_TRUE(listed) << "job " << *id << " missing from /jobs";

  auto done = WaitFor(client, *id, Final);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->state, JobState::kCompleted) << done->reason;
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_EQ(done->user, user_);
  EXPECT_EQ(done->name, "rest-gpu2");
  ASSERT_EQ(done->nodes.size(), 1u);
  EXPECT_EQ(done->gpus, 2);
  EXPECT_GE(done->end_time, done->start_time);
  EXPECT_EQ(done->stdout_path, workdir_ + "/rest-gpu2-" + std::to_string(*id) + ".out");

  const std::string out = ReadFile(done->stdout_path);
  EXPECT_NE(out.find("USER=" + user_ + "\n"), std::string::npos) << out;
  const size_t cvd = out.find("CVD=");
  ASSERT_NE(cvd, std::string::npos) << out;
  const std::string devices = out.substr(cvd + 4, out.find('\n', cvd) - cvd - 4);
  EXPECT_EQ(std::count(devices.begin(), devices.end(), ','), 1) << "two GPUs: " << devices;
}

TEST_F(SlurmRestIntegrationTest, GpusPerNodeAcrossTwoNodes) {
  SlurmRestClient client = ClientFor(user_);
  auto nodes = client.Nodes();
  ASSERT_TRUE(nodes) << nodes.error().message;
  if (std::count_if(nodes->begin(), nodes->end(), [](const NodeInfo& n) { return n.gpus > 0; }) <
      2) {
    GTEST_SKIP() << "needs two nodes with GPUs";
  }
  JobSpec spec =
      Spec("rest-2x1", "srun bash -c 'echo \"$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES\"'\n");
  spec.nodes = 2;
  spec.tasks = 2;
  spec.tasks_per_node = 1;
  spec.gpus_per_node = 1;
  auto id = Submit(client, spec);
  ASSERT_TRUE(id) << id.error().message;
  auto done = WaitFor(client, *id, Final);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->state, JobState::kCompleted) << done->reason;
  ASSERT_EQ(done->nodes.size(), 2u);
  EXPECT_EQ(done->gpus, 2);
  const std::string out = ReadFile(done->stdout_path);
  for (const std::string& node : done->nodes) {
    EXPECT_NE(out.find(node + " "), std::string::npos) << node << " missing from:\n" << out;
  }
}

TEST_F(SlurmRestIntegrationTest, ExitCodeOfAFailedJob) {
  SlurmRestClient client = ClientFor(user_);
  auto id = Submit(client, Spec("rest-exit3", "exit 3\n"));
  ASSERT_TRUE(id) << id.error().message;
  auto done = WaitFor(client, *id, Final);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->state, JobState::kFailed);
  EXPECT_EQ(done->exit_code, 3);
  EXPECT_EQ(done->exit_signal, 0);
}

TEST_F(SlurmRestIntegrationTest, CancelARunningJob) {
  SlurmRestClient client = ClientFor(user_);
  auto id = Submit(client, Spec("rest-cancel", "sleep 300\n"));
  ASSERT_TRUE(id) << id.error().message;
  auto running = WaitFor(client, *id, Running);
  ASSERT_TRUE(running.has_value());
  ASSERT_EQ(running->state, JobState::kRunning);

  ASSERT_TRUE(client.Cancel(*id)) << "cancel failed";
  auto done = WaitFor(client, *id, Final, std::chrono::seconds(30));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->state, JobState::kCancelled);
}

TEST_F(SlurmRestIntegrationTest, AnotherUserCannotCancel) {
  const std::string other = Env("BMAS_TEST_SLURM_OTHER_USER");
  if (other.empty()) GTEST_SKIP() << "set BMAS_TEST_SLURM_OTHER_USER to a second Unix user";
  SlurmRestClient owner = ClientFor(user_);
  SlurmRestClient intruder = ClientFor(other);
  auto id = Submit(owner, Spec("rest-mine", "sleep 300\n"));
  ASSERT_TRUE(id) << id.error().message;
  auto running = WaitFor(owner, *id, Running);
  ASSERT_TRUE(running.has_value());

  auto denied = intruder.Cancel(*id);
  ASSERT_FALSE(denied) << other << " cancelled " << user_ << "'s job";
  EXPECT_EQ(denied.error().code, ErrorCode::kPermissionDenied) << denied.error().message;
  EXPECT_NE(denied.error().message.find("denied"), std::string::npos) << denied.error().message;

  auto still = owner.Job(*id);
  ASSERT_TRUE(still) << still.error().message;
  EXPECT_EQ(still->state, JobState::kRunning);
  EXPECT_TRUE(owner.Cancel(*id));
}

TEST_F(SlurmRestIntegrationTest, TokenFromAnotherKeyIsRefused) {
  auto endpoint = ParseRestAddress(address_);
  ASSERT_TRUE(endpoint);
  endpoint->user = user_;
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  endpoint->token = *MintSlurmJwt("not the cluster's key, 32 bytes!", user_, now, 600);
  SlurmRestClient client(*endpoint, std::chrono::seconds(20));
  // slurmrestd answers a rejected token exactly as it answers when slurmctld is down.
  auto jobs = client.Jobs();
  ASSERT_FALSE(jobs);
  EXPECT_EQ(jobs.error().code, ErrorCode::kUnavailable) << jobs.error().message;
  EXPECT_NE(jobs.error().message.find("jwt_key"), std::string::npos) << jobs.error().message;
  auto id = client.Submit(Spec("rest-badkey", "true\n"));
  ASSERT_FALSE(id) << "submitted job " << *id << " with a token from another key";
}

TEST_F(SlurmRestIntegrationTest, NodesReportGpus) {
  SlurmRestClient client = ClientFor(user_);
  auto nodes = client.Nodes();
  ASSERT_TRUE(nodes) << nodes.error().message;
  ASSERT_FALSE(nodes->empty());
  int gpus = 0;
  for (const NodeInfo& n : *nodes) {
    EXPECT_FALSE(n.name.empty());
    EXPECT_GT(n.cpus, 0) << n.name;
    gpus += n.gpus;
  }
  EXPECT_GE(gpus, 2);
}

TEST_F(SlurmRestIntegrationTest, UnknownJobIsNotFound) {
  SlurmRestClient client = ClientFor(user_);
  auto job = client.Job(999999999);
  ASSERT_FALSE(job);
  EXPECT_EQ(job.error().code, ErrorCode::kNotFound) << job.error().message;
}

}  // namespace
}  // namespace bmas
