// Daemons that die on the test bed (issue 25, "Kill the controller's gateway and agent"): each
// runs as its systemd unit runs it, under BedCluster::AsUnit with that unit's Restart= and
// RestartSec=, and is killed with SIGKILL (a crash, the OOM killer).
// - mgs1's gateway, killed after a student's requests and before it wrote their usage to the
//   store (it flushes once a minute here): it comes back on its port, serves the student again,
//   and the store has every token of the requests it answered (its usage journal).
// - oss01's agent, killed while the student's GPU job runs there: it comes back and answers the
//   controller over TLS, the job runs on and ends as it would have.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "bed_cluster.h"
#include "common/process.h"
#include "net_bed.h"
#include "test_helpers.h"

namespace bmas::testbed {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kGpusPerNode = 4;
constexpr const char* kModel = "restart/assistant";

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string Unit(const std::string& name) {
  return std::string(BMAS_SOURCE_DIR) + "/packaging/systemd/" + name;
}

class RestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = BedClusterSkipReason(&bmas_); !why.empty()) GTEST_SKIP() << why;
    BedOptions options;
    options.name = "restart";
    options.nodes = 1;
    auto started = bed_.Start(options);
    ASSERT_TRUE(started) << started.error().message;
    cluster_ = std::make_unique<BedCluster>(bed_, bmas_);
    node_ = bed_.dir() + "/node";
    BedClusterOptions o;
    o.cluster_name = "restart";
    o.partition = "lab";
    o.gpus_per_node = kGpusPerNode;
    o.slurmrestd_port = 6820;
    o.extra_toml =
        std::string(kInferencePartitionsToml) + TelemetryToml(BMAS_FAKE_NVML_LIBRARY, node_);
    inventory_ = cluster_->WriteInventory(o);
    auto nvml = WriteFakeNvmlValues(bed_, kGpusPerNode, "restart");
    ASSERT_TRUE(nvml) << nvml.error().message;
    nvml_values_ = *nvml;

    auto init = cluster_->Init();
    ASSERT_TRUE(init) << init.error().message;
    auto daemons = cluster_->StartControllerDaemons();
    ASSERT_TRUE(daemons) << daemons.error().message;
    ASSERT_TRUE(BedCluster::EnsureServiceAccount());
    auto joined = cluster_->Join("oss01", BedCluster::Token(*init), false,
                                 {"BMAS_FAKE_NVML=" + nvml_values_});
    ASSERT_TRUE(joined) << joined.error().message;
    ASSERT_EQ(joined->exit_code, 0) << joined->err << joined->out;
    ASSERT_EQ(cluster_->WaitState("oss01", "idle"), "");
    student_ = bmas::testing::EnsureUnixUser("bmastest1");
  }

  void TearDown() override {
    if (bmas_.empty()) return;
    bed_.Stop();
    EXPECT_TRUE(bed_.Leftovers().empty()) << ::testing::PrintToString(bed_.Leftovers());
  }

  CommandOutput In(const std::string& host, const std::vector<std::string>& args,
                   const std::string& user = "") {
    std::vector<std::string> all = {"--config", inventory_};
    all.insert(all.end(), args.begin(), args.end());
    auto r = cluster_->Bmas(host, all, user);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  // The process that the unit shell `shell` runs now; 0 when none.
  pid_t UnitChild(pid_t shell) {
    auto r = bed_.Run("mgs1", {"pgrep", "-P", std::to_string(shell)});
    return r && r->exit_code == 0 ? std::atoi(r->out.c_str()) : 0;
  }

  NetBed bed_;
  std::unique_ptr<BedCluster> cluster_;
  std::string bmas_;
  std::string node_;
  std::string inventory_;
  std::string nvml_values_;
  std::string student_;
};

TEST_F(RestartTest, AKilledGatewayComesBackOnItsPortAndLosesNoUsage) {
  ASSERT_EQ(In("mgs1", {"user", "add", student_}).exit_code, 0);
  CommandOutput key = In("mgs1", {"key", "create", student_});
  const size_t k = key.out.find("sk-bmas-");
  ASSERT_NE(k, std::string::npos) << key.out << key.err;
  const std::string api_key = key.out.substr(k, key.out.find_first_of(" \n", k) - k);
  CommandOutput deployed = In("mgs1", {"inference", "deploy", kModel, "--min", "1", "--max", "1",
                                       "--profile", "instant"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.err << deployed.out;
  // Usage goes to the store once a minute: what the student used before the kill is in the
  // gateway's memory and its usage journal only.
  auto inference = cluster_->StartInference({"--usage-flush-interval", "60"}, {"--interval", "0.5"},
                                            Unit("bmas-gateway.service"));
  ASSERT_TRUE(inference) << inference.error().message;
  const pid_t unit = inference->gateway.pid;

  const std::string body = fmt::format(
      R"({{"model":"{}","messages":[{{"role":"user","content":"hello there"}}],"max_tokens":7}})",
      kModel);
  // One chat completion as the student; its usage, or nullopt.
  auto ask = [&]() -> std::optional<std::pair<int64_t, int64_t>> {
    auto r = bed_.Run("mgs1",
                      {"curl", "-s", "-m", "20", "-H", "Authorization: Bearer " + api_key, "-H",
                       "Content-Type: application/json", "-d", body,
                       "http://10.200.0.1:8000/v1/chat/completions"},
                      student_);
    if (!r || r->out.find("\"object\":\"chat.completion\"") == std::string::npos) return {};
    rapidjson::Document d;
    d.Parse(r->out.c_str());
    if (d.HasParseError() || !d.HasMember("usage")) return {};
    return std::make_pair(d["usage"]["prompt_tokens"].GetInt64(),
                          d["usage"]["completion_tokens"].GetInt64());
  };
  std::optional<std::pair<int64_t, int64_t>> used;
  ASSERT_TRUE(WaitFor([&] { return (used = ask()).has_value(); }, unit, std::chrono::seconds(90)))
      << In("mgs1", {"inference", "list"}).out << bed_.LogTail("inference controller")
      << bed_.LogTail("gateway");
  int64_t requests = 0, prompt = 0, completion = 0;
  for (int i = 0; i < 6; ++i) {
    if (i > 0) used = ask();
    ASSERT_TRUE(used) << bed_.LogTail("gateway");
    ++requests;
    prompt += used->first;
    completion += used->second;
  }
  CommandOutput before = In("mgs1", {"usage", "--json"});
  EXPECT_EQ(before.out.find(student_), std::string::npos)
      << "usage reached the store before the kill: " << before.out;

  const pid_t first = UnitChild(unit);
  ASSERT_GT(first, 0);
  const auto killed = Clock::now();
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  std::optional<std::pair<int64_t, int64_t>> after;
  EXPECT_TRUE(WaitFor([&] { return (after = ask()).has_value(); }, unit, std::chrono::seconds(30)))
      << bed_.LogTail("gateway");
  const double back_ms = MsSince(killed);
  const pid_t second = UnitChild(unit);
  EXPECT_GT(second, 0);
  EXPECT_NE(second, first);
  std::printf("the gateway, killed, served the student again after %.0f ms (RestartSec=2)\n",
              back_ms);
  // The answer after the restart is in the store at the restarted gateway's first flush of a
  // minute from now; what came before it, at once, from the journal.
  std::string rows;
  EXPECT_TRUE(WaitFor(
      [&] {
        rows = In("mgs1", {"usage", "--json", "--user", student_}).out;
        rapidjson::Document d;
        d.Parse(rows.c_str());
        if (d.HasParseError() || !d.IsArray()) return false;
        int64_t n = 0, p = 0, c = 0;
        for (const auto& row : d.GetArray()) {
          n += row["requests"].GetInt64();
          p += row["prompt_tokens"].GetInt64();
          c += row["completion_tokens"].GetInt64();
        }
        return n == requests && p == prompt && c == completion;
      },
      0, std::chrono::seconds(10)))
      << "the store: " << rows << "\nwanted " << requests << " requests, " << prompt << " + "
      << completion << " tokens\n"
      << bed_.LogTail("gateway");
  EXPECT_NE(bed_.LogTail("gateway", 40).find("starting it again in 2 s"), std::string::npos);
}

TEST_F(RestartTest, AKilledAgentComesBackAndTheJobOnItsNodeRunsOn) {
  // The join started oss01's agent as a plain process; run it as its unit (and the join's
  // drop-in, which gives it the join's config and state dir) runs it.
  const std::vector<std::string> agent = {bmas_, "--config", node_ + "/etc-bmas/bmas.toml",
                                          "--state-dir", node_ + "/bmas-state", "agent"};
  auto joins = bed_.Run("oss01", {"pkill", "-TERM", "-f", "bmas-state agent$"});
  ASSERT_TRUE(joins && joins->exit_code == 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto r = bed_.Run("oss01", {"pgrep", "-f", "bmas-state agent$"});
        return r && r->exit_code != 0;
      },
      0, std::chrono::seconds(10)));
  auto unit = BedCluster::AsUnit(Unit("bmas-agent.service"), agent);
  ASSERT_TRUE(unit) << unit.error().message;
  auto supervised = bed_.StartDaemon("oss01", "agent oss01", "sh", *unit,
                                     {"BMAS_FAKE_NVML=" + nvml_values_});
  ASSERT_TRUE(supervised) << supervised.error().message;
  auto answers = [&] {
    CommandOutput got = In("mgs1", {"agent", "get", "https://oss01:9400"});
    return got.exit_code == 0 && got.out.find("GPU-restart-3") != std::string::npos;
  };
  ASSERT_TRUE(WaitFor(answers, supervised->pid, std::chrono::seconds(30)))
      << bed_.LogTail("agent oss01");

  // The student's 2-GPU job on oss01.
  CommandOutput run = In("mgs1", {"run", "--gpus", "2", "--", "sh", "-c", "sleep 6; echo done"},
                         student_);
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  std::string id = run.out.substr(0, run.out.find('\n'));
  ASSERT_FALSE(id.empty()) << run.out;
  ASSERT_TRUE(WaitFor([&] { return bed_.Job(id)["JobState"] == "RUNNING"; }, 0,
                      std::chrono::seconds(30)))
      << ::testing::PrintToString(bed_.Job(id));

  const pid_t first = UnitChild(supervised->pid);
  ASSERT_GT(first, 0);
  const auto killed = Clock::now();
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  EXPECT_TRUE(WaitFor(answers, supervised->pid, std::chrono::seconds(30)))
      << bed_.LogTail("agent oss01");
  const double back_ms = MsSince(killed);
  EXPECT_NE(UnitChild(supervised->pid), first);
  std::printf("the agent, killed, answered the controller again after %.0f ms (RestartSec=2)\n",
              back_ms);
  EXPECT_EQ(bed_.Job(id)["JobState"], "RUNNING") << "the agent's death ended the job";
  std::map<std::string, std::string> job;
  EXPECT_TRUE(WaitFor(
      [&] {
        job = bed_.Job(id);
        return job["JobState"] != "RUNNING" && job["JobState"] != "COMPLETING";
      },
      0, std::chrono::seconds(30)));
  EXPECT_EQ(job["JobState"], "COMPLETED") << ::testing::PrintToString(job);
  EXPECT_EQ(job["ExitCode"], "0:0") << ::testing::PrintToString(job);
}

}  // namespace
}  // namespace bmas::testbed
