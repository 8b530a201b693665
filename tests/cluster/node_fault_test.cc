// Issue 25, faults on the test bed: a node that drops off the network in the middle of jobs.
// The cluster is set up as an admin sets one up (bmas cluster init, slurmctld and slurmrestd in
// mgs1, `bmas node join` in oss01..oss03, whose agents serve their GPUs' telemetry over TLS),
// with SlurmdTimeout shortened to 5 s, and the dashboard runs in mgs1 reading every agent.
// Two jobs run across two nodes each, both on oss02, one submitted with --requeue and one with
// --no-requeue. oss02's link is cut at the bridge: slurmctld marks it DOWN once it has been
// silent for SlurmdTimeout, the --requeue job goes back to the queue and the other fails with
// NODE_FAIL, `bmas node list` shows oss02 down to a student, and so does the dashboard (Slurm's
// state, its GPUs down, its agent unreachable). The link comes back: oss02 returns to service
// by itself (ReturnToService=2, no admin step), the requeued job runs there again, and the
// dashboard shows it up with its GPUs' telemetry. The same with oss03's own interface taken
// down and up.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "bed_cluster.h"
#include "bed_dashboard.h"
#include "net_bed.h"
#include "slurm/local_cluster.h"
#include "test_helpers.h"

namespace bmas::testbed {
namespace {

using bmas::testing::At;
using bmas::testing::EnsureUnixUser;
using bmas::testing::Int;
using bmas::testing::Str;
using Clock = std::chrono::steady_clock;

constexpr const char* kUser = "bmas-fault-user";
// What the bed's slurm.conf gives a silent node (a real cluster keeps Slurm's 300 s).
constexpr int kSlurmdTimeoutS = 5;
constexpr auto kPatience = std::chrono::seconds(120);  // a limit for waits, not a measure
constexpr int kGpusPerNode = 4;
constexpr int64_t kGpuMib = 81559;  // what fake NVML says each GPU has
const std::vector<std::string> kNodes = {"oss01", "oss02", "oss03"};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

class NodeFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string bmas;
    if (std::string why = BedClusterSkipReason(&bmas); !why.empty()) GTEST_SKIP() << why;
    BedOptions options;
    options.name = "node-fault";
    options.nodes = static_cast<int>(kNodes.size());
    auto started = bed_.Start(options);
    ASSERT_TRUE(started) << started.error().message;
    cluster_ = std::make_unique<BedCluster>(bed_, bmas);
    const std::string node = bed_.dir() + "/node";
    BedClusterOptions o;
    o.cluster_name = "fault";
    o.gpus_per_node = kGpusPerNode;
    o.slurmrestd_port = 6820;
    o.extra_toml = TelemetryToml(BMAS_FAKE_NVML_LIBRARY, node);
    cluster_->WriteInventory(o);
    auto written = WriteFakeNvmlValues(bed_, kGpusPerNode, "fault", kGpuMib, 3);
    ASSERT_TRUE(written) << written.error().message;
    const std::string nvml = *written;

    auto init = cluster_->Init();
    ASSERT_TRUE(init) << init.error().message;
    // bmas writes Slurm's SlurmdTimeout of 300 s; the bed's is short, so that a cut node goes
    // down in seconds. ReturnToService=2 is bmas's own.
    auto timeout = bed_.Run(
        "mgs1", {"sed", "-i", fmt::format("s/^SlurmdTimeout=.*/SlurmdTimeout={}/", kSlurmdTimeoutS),
                 "/etc/slurm/slurm.conf"});
    ASSERT_TRUE(timeout && timeout->exit_code == 0) << (timeout ? timeout->err : "");
    auto conf = bed_.Run("mgs1", {"grep", "-E", "^(SlurmdTimeout|ReturnToService)=",
                                  "/etc/slurm/slurm.conf"});
    ASSERT_TRUE(conf);
    ASSERT_EQ(conf->out, fmt::format("SlurmdTimeout={}\nReturnToService=2\n", kSlurmdTimeoutS));
    auto daemons = cluster_->StartControllerDaemons();
    ASSERT_TRUE(daemons) << daemons.error().message;
    ASSERT_TRUE(BedCluster::EnsureServiceAccount());  // a join hands it the node's replica key
    for (const std::string& n : kNodes) {
      auto joined = cluster_->Join(n, BedCluster::Token(*init), false, {"BMAS_FAKE_NVML=" + nvml});
      ASSERT_TRUE(joined) << joined.error().message;
      ASSERT_EQ(joined->exit_code, 0) << n << ": " << joined->err << joined->out;
    }
    for (const std::string& n : kNodes) ASSERT_EQ(cluster_->WaitState(n, "idle"), "") << n;
    user_ = EnsureUnixUser(kUser);
    dashboard_ = std::make_unique<BedDashboard>(bed_, *cluster_, bmas);
  }

  void TearDown() override {
    if (!cluster_) return;
    bed_.Stop();
    EXPECT_EQ(bed_.Leftovers(), std::vector<std::string>{});
  }

  // Waits until `done` holds; how long that took, or a negative duration when it never did.
  template <typename F>
  Clock::duration Until(F done) {
    const auto t0 = Clock::now();
    return WaitFor(done, 0, kPatience) ? Clock::now() - t0 : Clock::duration(-1);
  }

  bool Down(const std::string& node) { return bed_.NodeState(node).starts_with("down"); }
  // Back in service: answering and taking jobs (idle, or running the requeued one).
  bool Serving(const std::string& node) {
    const std::string s = bed_.NodeState(node);
    return !s.empty() && !s.starts_with("down") && s.find('*') == std::string::npos &&
           s.find("drain") == std::string::npos;
  }

  std::string JobState(const std::string& id) { return bed_.Job(id)["JobState"]; }

  // `bmas node list --json` in mgs1 as the student, through the controller's slurmrestd.
  std::string NodeList() {
    auto r = cluster_->Bmas("mgs1", {"--config", cluster_->inventory(), "node", "list", "--json"},
                            user_);
    if (!r) return r.error().message;
    EXPECT_EQ(r->exit_code, 0) << r->err;
    return r->out;
  }

  // The dashboard's map as the student reads it (/api/cluster, what its Cluster page draws),
  // until `shown` holds of it or kPatience passes; the last answer when it never does.
  template <typename F>
  std::string UntilShown(F shown) {
    std::string raw;
    const bool ok = WaitFor(
        [&] {
          auto map = dashboard_->Map(user_, key_, raw);
          return shown(map);
        },
        0, kPatience);
    return ok ? "" : raw + "\n" + dashboard_->LogTail();
  }

  // The dashboard shows `node` down: Slurm's state, its GPUs down and without telemetry, and
  // its agent unreachable.
  static bool ShownDown(const rapidjson::Value& map, const std::string& node) {
    const rapidjson::Value& n = MapNode(map, node);
    if (!Str(At(n, "state")).starts_with("down") || Str(At(n, "status")) != "down" ||
        Str(At(n, "agent")) != "unreachable" || !At(n, "telemetry").IsFalse()) {
      return false;
    }
    const rapidjson::Value& gpus = At(n, "gpus");
    if (!gpus.IsArray() || gpus.Size() != kGpusPerNode) return false;
    for (const rapidjson::Value& g : gpus.GetArray()) {
      if (Str(At(g, "state")) != "down" || !At(g, "util").IsNull()) return false;
    }
    return true;
  }

  // The dashboard shows `node` up: in service, its agent answering, each GPU's telemetry.
  static bool ShownServing(const rapidjson::Value& map, const std::string& node) {
    const rapidjson::Value& n = MapNode(map, node);
    if (Str(At(n, "status")) != "up" || Str(At(n, "agent")) != "ok" ||
        !At(n, "telemetry").IsTrue() || !At(n, "responding").IsTrue()) {
      return false;
    }
    const rapidjson::Value& gpus = At(n, "gpus");
    if (!gpus.IsArray() || gpus.Size() != kGpusPerNode) return false;
    for (const rapidjson::Value& g : gpus.GetArray()) {
      if (Str(At(g, "state")) == "down" || Int(At(g, "mem_total_mb")) != kGpuMib ||
          !At(g, "util").IsInt()) {
        return false;
      }
    }
    return true;
  }

  NetBed bed_;
  std::unique_ptr<BedCluster> cluster_;
  std::unique_ptr<BedDashboard> dashboard_;
  std::string user_;
  std::string key_;  // the student's API key
};

TEST_F(NodeFaultTest, ANodeCutOffGoesDownItsJobsRequeueOrFailAndItServesAgainWhenItsLinkIsBack) {
  // The dashboard in mgs1, reading every node's agent; the student signs in with their key and
  // sees every node up, with its GPUs' telemetry.
  auto key = dashboard_->KeyFor(user_);
  ASSERT_TRUE(key) << key.error().message;
  key_ = *key;
  auto dashboard = dashboard_->Start(kNodes);
  ASSERT_TRUE(dashboard) << dashboard.error().message;
  ASSERT_EQ(UntilShown([&](const rapidjson::Value& map) {
              return std::all_of(kNodes.begin(), kNodes.end(),
                                 [&](const std::string& n) { return ShownServing(map, n); });
            }),
            "");

  const std::vector<std::string> common = {"-N2", "--mem=64", "--chdir=/tmp", "-o", "/dev/null"};
  auto job = [&](const std::string& nodes, const std::string& policy) {
    std::vector<std::string> args = common;
    // The batch step outlives a failed srun (whose step may notice the lost node before
    // slurmctld does, and would end the job FAILED first): what is tested is Slurm's policy for
    // a job whose node went down.
    args.insert(args.end(), {"-w", nodes, policy, "--wrap", "srun sleep 600; sleep 600"});
    auto id = bed_.Submit(args, user_);
    EXPECT_TRUE(id) << id.error().message;
    return id ? *id : std::string();
  };
  const std::string requeued = job("oss01,oss02", "--requeue");
  const std::string failed = job("oss02,oss03", "--no-requeue");
  ASSERT_FALSE(requeued.empty());
  ASSERT_FALSE(failed.empty());
  ASSERT_GE(Seconds(Until([&] {
              return JobState(requeued) == "RUNNING" && JobState(failed) == "RUNNING";
            })),
            0)
      << JobState(requeued) << " " << JobState(failed) << "\n"
      << bed_.LogTail("slurmctld");

  // The cable pulled at the switch: oss02's processes run on and reach no one.
  ASSERT_TRUE(bed_.CutLink("oss02"));
  const auto down = Until([&] { return Down("oss02"); });
  ASSERT_GE(Seconds(down), 0) << "oss02 is " << bed_.NodeState("oss02") << "\n"
                              << bed_.LogTail("slurmctld");
  std::printf("oss02 cut at the bridge: DOWN after %.1f s (SlurmdTimeout=%d)\n", Seconds(down),
              kSlurmdTimeoutS);
  ASSERT_GE(Seconds(Until([&] { return JobState(failed) == "NODE_FAIL"; })), 0)
      << bed_.Job(failed)["JobState"];
  // Requeued: back in the queue (it asked for oss02 by name, so it waits for it).
  ASSERT_GE(Seconds(Until([&] {
              auto j = bed_.Job(requeued);
              return j["Restarts"] == "1" && j["JobState"] == "PENDING";
            })),
            0)
      << JobState(requeued) << " Restarts=" << bed_.Job(requeued)["Restarts"];

  // What bmas shows a student: oss02 down, with Slurm's reason.
  const std::string list = NodeList();
  const std::string oss02 = list.substr(list.find("\"name\":\"oss02\""));
  const std::string row = oss02.substr(0, oss02.find('}'));
  EXPECT_NE(row.find("\"state\":\"down"), std::string::npos) << list;
  EXPECT_NE(row.find("Not responding"), std::string::npos) << list;
  EXPECT_NE(list.find("\"name\":\"oss01\""), std::string::npos) << list;

  // What the dashboard shows the student: oss02 down with Slurm's reason, its GPUs down, its
  // agent unreachable, and what brings it back; the other nodes serve, with their telemetry.
  std::string map_text;
  ASSERT_EQ(UntilShown([&](const rapidjson::Value& map) {
              return ShownDown(map, "oss02") && ShownServing(map, "oss01") &&
                     ShownServing(map, "oss03");
            }),
            "");
  {
    auto map = dashboard_->Map(user_, key_, map_text);
    const rapidjson::Value& n = MapNode(map, "oss02");
    EXPECT_EQ(Str(At(n, "reason")), "Not responding") << map_text;
    EXPECT_TRUE(At(n, "responding").IsFalse()) << map_text;
    EXPECT_NE(Str(At(n, "agent_error")), "") << map_text;
    EXPECT_TRUE(Str(At(n, "status_text")).starts_with("down: Not responding.")) << map_text;
    EXPECT_NE(Str(At(n, "status_text")).find("its agent does not answer"), std::string::npos)
        << map_text;
    EXPECT_EQ(Int(At(At(map, "totals"), "down")), kGpusPerNode) << map_text;
    std::printf("the dashboard's oss02: %s\n", Str(At(n, "status_text")).c_str());
  }

  // The link back: oss02 serves again with no admin step, and the requeued job runs there.
  ASSERT_TRUE(bed_.RestoreLink("oss02"));
  const auto back = Until([&] { return Serving("oss02"); });
  ASSERT_GE(Seconds(back), 0) << "oss02 is " << bed_.NodeState("oss02") << "\n"
                              << bed_.LogTail("slurmctld");
  std::printf("oss02's link restored: serving again after %.1f s\n", Seconds(back));
  ASSERT_GE(Seconds(Until([&] { return JobState(requeued) == "RUNNING"; })), 0)
      << JobState(requeued) << "\n"
      << bed_.LogTail("slurmctld");
  EXPECT_EQ(bed_.Job(requeued)["NodeList"], "oss[01-02]");
  EXPECT_EQ(JobState(failed), "NODE_FAIL");  // it stays failed
  const std::string listed = NodeList();
  const std::string again = listed.substr(listed.find("\"name\":\"oss02\""));
  EXPECT_EQ(again.substr(0, again.find('}')).find("\"state\":\"down"), std::string::npos)
      << listed;
  // And the dashboard shows it up again, its agent answering with its GPUs' telemetry.
  EXPECT_EQ(UntilShown([&](const rapidjson::Value& map) { return ShownServing(map, "oss02"); }),
            "");

  // The node's own interface down and up (no job there): down, then back by itself, and a
  // student's step runs on it.
  ASSERT_TRUE(bed_.CutLink("oss03", LinkEnd::kHost));
  ASSERT_GE(Seconds(Until([&] { return Down("oss03"); })), 0) << bed_.NodeState("oss03");
  EXPECT_EQ(UntilShown([&](const rapidjson::Value& map) { return ShownDown(map, "oss03"); }), "");
  ASSERT_TRUE(bed_.RestoreLink("oss03", LinkEnd::kHost));
  ASSERT_GE(Seconds(Until([&] { return Serving("oss03"); })), 0) << bed_.NodeState("oss03");
  EXPECT_EQ(UntilShown([&](const rapidjson::Value& map) { return ShownServing(map, "oss03"); }),
            "");
  auto step = bed_.Run("mgs1", {"srun", "-w", "oss03", "--mem=64", "hostname"}, user_,
                       std::chrono::seconds(60));
  ASSERT_TRUE(step) << step.error().message;
  EXPECT_EQ(step->exit_code, 0) << step->err;
  EXPECT_EQ(step->out, "oss03\n");
}

}  // namespace
}  // namespace bmas::testbed
