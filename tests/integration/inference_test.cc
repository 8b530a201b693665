// Elastic inference replicas on a real local Slurm, as `bmas up` runs them: the simulated
// model deployed through `bmas inference` with its replica a Slurm job in the floor partition;
// a --min 0 deployment answering its first request; a deployment scaled up under load, its
// replicas above the floor preempted by a student's training job while streams run (every
// stream completes through resumption, with its text and usage checked), the floor never
// preempted, the requeued replicas coming back when the GPUs free up, and the deployment
// scaled down once the load is gone. Needs root and Slurm (scripts/install-deps.sh).

#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/process.h"
#include "engine_process.h"
#include "http_client.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr std::string_view kDefaultModel = "meta-llama/Llama-3.1-8B-Instruct";

struct Replica {
  int64_t job_id = 0;
  std::string state, node, url;
  bool floor = false;
};

class InferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || access("/usr/sbin/slurmctld", X_OK) != 0) {
      GTEST_SKIP() << "needs root and Slurm (bash scripts/install-deps.sh)";
    }
    fs::permissions(dir_.path(), fs::perms::all | fs::perms::sticky_bit);
    state_ = dir_.path() + "/state";
    const std::string config = dir_.WriteFile(
        "bmas.toml",
        "[up]\nlxd = false\ndashboard = false\nengines = 1\nreplica_scale_down_idle_s = 10\n"
        "[engine]\nprofile = \"instant\"\n");
    auto up = Process::Start({"--config", config, "--state-dir", state_, "up"});
    ASSERT_TRUE(up) << up.error().message;
    up_ = std::move(*up);
    auto running = up_->WaitForLine("bmas up: running", std::chrono::seconds(120));
    ASSERT_TRUE(running) << running.error().message << up_->StderrText();
    const std::string& summary = up_->stdout_text();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(summary, m, std::regex(R"(\n  gateway +http://127\.0\.0\.1:([0-9]+))")))
        << summary;
    gateway_port_ = static_cast<uint16_t>(std::stoi(m[1]));
    EXPECT_THAT(summary, HasSubstr("controller (Slurm jobs)")) << summary;
    Bmas({"user", "add", "ada"});
    key_ = Key("ada");
  }

  void TearDown() override {
    if (up_) up_->Stop(std::chrono::seconds(30));
    if (!state_.empty()) RunBmas({"--state-dir", state_, "slurm", "down"});
  }

  CommandOutput Bmas(const std::vector<std::string>& args, const std::string& user = "") {
    auto r = RunBmasIn(dir_.path(), state_, args, user);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  std::string Key(const std::string& user) {
    CommandOutput out = Bmas({"key", "create", user});
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out.out, m, std::regex("sk-bmas-[A-Za-z0-9_-]+"))) << out.out;
    return m.empty() ? "" : m[0].str();
  }

  // `bmas inference list --json`, per model.
  std::map<std::string, std::vector<Replica>> Replicas() {
    CommandOutput out = Bmas({"inference", "list", "--json"});
    std::map<std::string, std::vector<Replica>> r;
    rapidjson::Document d;
    d.Parse(out.out.c_str());
    if (d.HasParseError() || !d.IsArray()) {
      ADD_FAILURE() << "not a JSON array: " << out.out << out.err;
      return r;
    }
    for (const auto& dep : d.GetArray()) {
      auto& list = r[dep["model"].GetString()];
      for (const auto& x : dep["replicas"].GetArray()) {
        list.push_back({x["job_id"].GetInt64(), x["state"].GetString(), x["node"].GetString(),
                        x["url"].GetString(), x["floor"].GetBool()});
      }
    }
    return r;
  }

  int Count(const std::string& model, const std::string& state) {
    int n = 0;
    const auto all = Replicas();
    auto it = all.find(model);
    if (it == all.end()) return 0;
    for (const Replica& x : it->second) n += x.state == state;
    return n;
  }

  // `scontrol show job ID` as root, for its restarts and state.
  std::string ShowJob(int64_t id) {
    auto r = RunCommand({"scontrol", "show", "job", std::to_string(id)},
                        {"SLURM_CONF=" + state_ + "/slurm/etc/slurm.conf"}, std::chrono::seconds(10));
    return r ? r->out : r.error().message;
  }

  HttpResponse Complete(std::string_view model, int max_tokens) {
    HttpClient client(gateway_port_, std::chrono::seconds(60));
    client.SetDefaultHeader("Authorization", "Bearer " + key_);
    auto r = client.Post("/v1/completions",
                         fmt::format(R"({{"model":"{}","prompt":"hello there","max_tokens":{}}})",
                                     model, max_tokens));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : HttpResponse{};
  }

  TempDir dir_;
  std::string state_;
  std::unique_ptr<Process> up_;
  uint16_t gateway_port_ = 0;
  std::string key_;
};

TEST_F(InferenceTest, UpRunsTheSimulatedModelAsAFloorReplicaJobAndServesIt) {
  ASSERT_TRUE(Eventually([&] { return Count(std::string(kDefaultModel), "ready") == 1; }, 60s))
      << Bmas({"inference", "list"}).out << up_->StderrText();
  const Replica r = Replicas()[std::string(kDefaultModel)][0];
  EXPECT_TRUE(r.floor);
  EXPECT_THAT(r.url, ::testing::StartsWith("http://127.0.0.1:"));
  EXPECT_THAT(ShowJob(r.job_id), HasSubstr("Partition=inference_floor"));
  EXPECT_THAT(ShowJob(r.job_id), HasSubstr("UserId=bmas("));
  EXPECT_EQ(Complete(kDefaultModel, 4).status, 200);
  // A student reads the deployments; only root changes them.
  const std::string student = EnsureUnixUser("bmas-test-student");
  CommandOutput refused = Bmas({"inference", "deploy", "x/y"}, student);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("needs root"));
}

TEST_F(InferenceTest, AMinZeroDeploymentStartsAReplicaForItsFirstRequestAndAnswersIt) {
  Bmas({"inference", "deploy", "acme/cold", "--min", "0", "--max", "1", "--profile", "instant"});
  EXPECT_EQ(Count("acme/cold", "ready") + Count("acme/cold", "pending"), 0);
  // Listed by the gateway (within its once-a-second store refresh) before any replica runs.
  HttpClient client(gateway_port_);
  client.SetDefaultHeader("Authorization", "Bearer " + key_);
  EXPECT_TRUE(Eventually(
      [&] {
        auto models = client.Get("/v1/models");
        return models && models->body.find("acme/cold") != std::string::npos;
      },
      10s));
  HttpResponse first = Complete("acme/cold", 3);
  EXPECT_EQ(first.status, 200) << first.body;
  EXPECT_THAT(first.body, HasSubstr("\"completion_tokens\":3"));
  EXPECT_TRUE(Eventually([&] { return Count("acme/cold", "ready") == 1; }, 10s));
}

}  // namespace
}  // namespace bmas::testing
