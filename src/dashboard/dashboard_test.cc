#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>

#include "dashboard/cluster_map.h"
#include "dashboard/history.h"
#include "dashboard/queue_reason.h"
#include "dashboard/sessions.h"
#include "dashboard/sources.h"
#include "dashboard/views.h"

namespace bmas::dashboard {
namespace {

constexpr int64_t kNow = 1'800'000'000;

NodeInfo Node(const std::string& name, int gpus, std::string state = "idle") {
  NodeInfo n;
  n.name = name;
  n.gpus = gpus;
  n.state = std::move(state);
  return n;
}

JobInfo Running(int64_t id, const std::string& user, const std::string& node,
                std::vector<int> gpus, int limit_min = 60, int64_t started = kNow - 600) {
  JobInfo j;
  j.id = id;
  j.user = user;
  j.name = "train";
  j.partition = "lab";
  j.state = JobState::kRunning;
  j.reason = "None";
  j.nodes = {node};
  j.gpus = static_cast<int>(gpus.size());
  j.gpu_alloc = {NodeGpus{node, "", std::move(gpus)}};
  j.start_time = started;
  j.submit_time = started;
  j.time_limit_minutes = limit_min;
  return j;
}

JobInfo Pending(int64_t id, const std::string& user, int gpus, int64_t submitted = kNow - 60) {
  JobInfo j;
  j.id = id;
  j.user = user;
  j.name = "wait";
  j.partition = "lab";
  j.state = JobState::kPending;
  j.reason = "Resources";
  j.gpus = gpus;
  j.submit_time = submitted;
  return j;
}

// Three nodes of four GPUs: alice trains on two of oss01's, a replica holds one of oss02's,
// oss03 is drained.
ClusterState ThreeNodes() {
  ClusterState s;
  s.now = kNow;
  s.slurm_reachable = true;
  s.nodes = {Node("oss01", 4, "mixed"), Node("oss02", 4, "mixed"), Node("oss03", 4, "idle")};
  s.nodes[2].state_flags = {"DRAIN"};
  s.jobs.push_back(Running(10, "alice", "oss01", {1, 2}));
  JobInfo replica = Running(11, "bmas", "oss02", {0});
  replica.partition = "inference";
  replica.name = "bmas-inference-sim";
  s.jobs.push_back(replica);
  s.users = {User{"alice", {}, 0, false}, User{"bob", {}, 0, false}, User{"root", {}, 0, true}};
  return s;
}

rapidjson::Document Json(const std::string& text) {
  rapidjson::Document d;
  d.Parse(text.c_str());
  EXPECT_FALSE(d.HasParseError()) << text;
  return d;
}

TEST(ClusterMapTest, EachGpuIsHeldByItsJobReplicaDrainOrNoOne) {
  ClusterState s = ThreeNodes();
  s.telemetry = {NodeTelemetry{"oss01", true, "", {{1, 97, 1000, 80000, 10, "alice"}}}};
  auto map = BuildClusterMap(s);
  ASSERT_EQ(map.size(), 3u);
  EXPECT_EQ(map[0].gpus[0].state, "idle");
  EXPECT_EQ(map[0].gpus[1].state, "training");
  EXPECT_EQ(map[0].gpus[1].job_id, 10);
  EXPECT_EQ(map[0].gpus[1].user, "alice");
  EXPECT_EQ(map[0].gpus[1].util, 97);
  EXPECT_EQ(map[0].gpus[2].util, -1);  // the agent did not report it
  EXPECT_TRUE(map[0].telemetry);
  EXPECT_EQ(map[1].gpus[0].state, "inference");
  EXPECT_EQ(map[2].gpus[3].state, "drained");
}

TEST(ClusterMapTest, ResearchNodesAreReservedAndAJobWithoutIndexesTakesFreeGpus) {
  ClusterState s = ThreeNodes();
  s.mode = slurm::Mode{true, {"bob"}, {"oss02"}, "2026-11-24T14:00:00"};
  JobInfo j = Running(12, "bob", "oss02", {});
  j.gpu_alloc.clear();
  j.gpus = 2;
  s.jobs.push_back(j);
  auto map = BuildClusterMap(s);
  EXPECT_EQ(map[1].gpus[0].state, "inference");
  EXPECT_EQ(map[1].gpus[1].job_id, 12);
  EXPECT_EQ(map[1].gpus[2].job_id, 12);
  EXPECT_EQ(map[1].gpus[3].state, "reserved");
}

// oss02 of examples/cluster-local-mig.toml: 13 gpu gres, 2 whole GPUs and 11 slices. A job on
// two 1g.10gb slices holds the cells of its gres indexes, marked as slices; the queue says so.
TEST(ClusterMapTest, ASliceJobsCellsSayTheyAreSlices) {
  ClusterState s;
  s.now = kNow;
  s.slurm_reachable = true;
  s.nodes = {Node("oss02", 13, "mixed")};
  JobInfo j = Running(20, "alice", "oss02", {4, 5});
  j.gpu_type = "1g.10gb";
  j.gpu_alloc[0].type = "1g.10gb";
  s.jobs.push_back(j);
  s.jobs.push_back(Running(21, "alice", "oss02", {0}));
  s.users = {User{"alice", {}, 0, false}};
  auto map = BuildClusterMap(s);
  ASSERT_EQ(map[0].gpus.size(), 13u);
  EXPECT_EQ(map[0].gpus[4].slice, "1g.10gb");
  EXPECT_EQ(map[0].gpus[5].job_id, 20);
  EXPECT_EQ(map[0].gpus[0].slice, "");
  EXPECT_EQ(map[0].gpus[0].job_id, 21);
  const Viewer alice{"alice", false};
  EXPECT_NE(ClusterJson(s, alice).find("\"slice\":\"1g.10gb\""), std::string::npos);
  EXPECT_NE(QueueJson(s, alice).find("\"gpus\":2,\"slice\":\"1g.10gb\""), std::string::npos);
}

// oss03 of examples/cluster-local-shared.toml: GPU 2 is shared, and two jobs hold shards of it.
// Its cell names the first and counts both; the queue gives each job's shards.
TEST(ClusterMapTest, ASharedGpusCellCountsTheJobsOnItsShards) {
  ClusterState s;
  s.now = kNow;
  s.slurm_reachable = true;
  s.nodes = {Node("oss03", 4, "mixed")};
  for (int64_t id : {30, 31}) {
    JobInfo j = Running(id, "alice", "oss03", {});
    j.gpus = 0;
    j.gpu_alloc.clear();
    j.shards = id == 30 ? 1 : 2;
    j.shard_alloc = {NodeGpus{"oss03", "", {2}}};
    s.jobs.push_back(j);
  }
  s.users = {User{"alice", {}, 0, false}};
  auto map = BuildClusterMap(s);
  ASSERT_EQ(map[0].gpus.size(), 4u);
  EXPECT_EQ(map[0].gpus[2].job_id, 30);
  EXPECT_EQ(map[0].gpus[2].sharers, 2);
  EXPECT_EQ(map[0].gpus[2].shards, 3);
  EXPECT_EQ(map[0].gpus[0].job_id, 0);
  const Viewer alice{"alice", false};
  EXPECT_NE(ClusterJson(s, alice).find("\"shards\":3,\"sharers\":2"), std::string::npos);
  EXPECT_NE(QueueJson(s, alice).find("\"gpus\":0,\"slice\":\"\",\"shards\":2"), std::string::npos);
}

// A GPU whose layout follows demand is one Slurm node per layout; those not active now (DOWN,
// drained as standby) are no machines and are left off the map.
TEST(ClusterMapTest, StandbyLayoutNodesAreLeftOff) {
  ClusterState s;
  s.now = kNow;
  s.slurm_reachable = true;
  s.nodes = {Node("oss01", 3, "idle"), Node("oss01-gpu3-0", 1, "drained"),
             Node("oss01-gpu3-1", 7, "idle")};
  s.nodes[1].state_flags = {"DRAIN"};
  s.nodes[1].reason = "bmas: standby MIG layout (bmas slurm relayout makes it active)";
  auto map = BuildClusterMap(s);
  ASSERT_EQ(map.size(), 2u);
  EXPECT_EQ(map[0].name, "oss01");
  EXPECT_EQ(map[1].name, "oss01-gpu3-1");
  EXPECT_EQ(map[1].gpus.size(), 7u);
}

TEST(ViewsTest, AUserSeesOthersGpusButNotWhoseAndAnAdminSeesAll) {
  const ClusterState s = ThreeNodes();
  auto bob = Json(ClusterJson(s, Viewer{"bob", false}));
  const auto& held = bob["nodes"][0]["gpus"][1];
  EXPECT_STREQ(held["state"].GetString(), "training");
  EXPECT_STREQ(held["user"].GetString(), "");
  EXPECT_EQ(held["job_id"].GetInt64(), 0);
  EXPECT_EQ(bob["totals"]["training"].GetInt(), 2);
  EXPECT_EQ(bob["totals"]["drained"].GetInt(), 4);
  auto alice = Json(ClusterJson(s, Viewer{"alice", false}));
  EXPECT_STREQ(alice["nodes"][0]["gpus"][1]["user"].GetString(), "alice");
  EXPECT_TRUE(alice["nodes"][0]["gpus"][1]["mine"].GetBool());
  auto root = Json(ClusterJson(s, Viewer{"root", true}));
  EXPECT_EQ(root["nodes"][0]["gpus"][2]["job_id"].GetInt64(), 10);
}

TEST(ViewsTest, AnotherUsersDetailsAreRefusedUnlessAdmin) {
  const ClusterState s = ThreeNodes();
  auto refused = UserJson(s, Viewer{"bob", false}, "alice");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(refused.error().message.find("only an admin"), std::string::npos);
  EXPECT_TRUE(UserJson(s, Viewer{"bob", false}, "bob"));
  auto alice = UserJson(s, Viewer{"root", true}, "alice");
  ASSERT_TRUE(alice);
  EXPECT_EQ(Json(*alice)["jobs"].Size(), 1u);
  auto missing = UserJson(s, Viewer{"root", true}, "nobody");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  // Users: one row for a user, every row for an admin; totals for both.
  EXPECT_EQ(Json(UsersJson(s, Viewer{"bob", false}))["users"].Size(), 1u);
  EXPECT_EQ(Json(UsersJson(s, Viewer{"root", true}))["users"].Size(), 4u);  // + the replica's
}

TEST(ViewsTest, WastedGpuHoursCountEachJobOnce) {
  ClusterState s = ThreeNodes();
  s.idle = {IdleRecord{10, "alice", "lab", "warn", kNow - 3600, kNow - 7200, 2, 7200, "idle"},
            IdleRecord{10, "alice", "lab", "cancel", kNow, kNow - 7200, 2, 14400, "idle"}};
  auto users = Json(UsersJson(s, Viewer{"alice", false}));
  EXPECT_DOUBLE_EQ(users["users"][0]["wasted_gpu_hours_30d"].GetDouble(), 4.0);
  auto queue = Json(QueueJson(s, Viewer{"alice", false}));
  EXPECT_STREQ(queue["running"][0]["idle"]["kind"].GetString(), "cancel");
}

TEST(QueueReasonTest, SaysWhatItWaitsForAndWhenItCouldStart) {
  ClusterState s = ThreeNodes();
  // 5 free GPUs (oss01: 0 and 3; oss02: 1-3); alice's 2 end in 50 min.
  JobInfo big = Pending(20, "bob", 9);  // more than the 8 GPUs that are not drained
  EXPECT_EQ(PendingExplanation(big, s, kNow), "waiting for 9 GPUs on whole nodes; no estimate: "
                                              "the GPUs it needs are held by jobs without a time "
                                              "limit, or reserved, drained or down");
  JobInfo six = Pending(21, "bob", 6);
  s.jobs.push_back(six);
  EXPECT_EQ(EstimateStartSeconds(six, s, kNow), 50 * 60);
  EXPECT_EQ(PendingExplanation(six, s, kNow),
            "waiting for 6 GPUs on whole nodes; about 50 min (when running jobs reach their time "
            "limits)");
  // A job submitted after it waits for it too.
  JobInfo one = Pending(22, "carol", 1, kNow - 30);
  EXPECT_EQ(EstimateStartSeconds(one, s, kNow), 50 * 60);
  JobInfo early = Pending(23, "carol", 1, kNow - 3600);
  EXPECT_EQ(EstimateStartSeconds(early, s, kNow), 0);
  s.mode = slurm::Mode{true, {"alice"}, {"oss01", "oss02"}, "2026-11-24T14:00:00"};
  EXPECT_EQ(PendingExplanation(Pending(24, "bob", 1), s, kNow).rfind(
                "waiting for 1 GPU; nodes oss[01-02] are reserved for research by alice since "
                "2026-11-24T14:00:00 (until lab mode); ",
                0),
            0u);
  JobInfo held = Pending(25, "bob", 1);
  held.reason = "QOSMaxGRESPerUser";
  EXPECT_EQ(EstimateStartSeconds(held, s, kNow), std::nullopt);
}

TEST(SessionsTest, ExpireAreBoundedAndEndWithTheirUser) {
  auto user = [](const std::optional<Sessions::Session>& s) {
    return s ? std::optional<std::string>(s->user) : std::nullopt;
  };
  Sessions sessions(3600, 2);
  sessions.Create("t1", "alice", "k1", 100);
  EXPECT_EQ(user(sessions.Find("t1", 100 + 3599)), "alice");
  EXPECT_EQ(sessions.Find("t1", 100 + 3600), std::nullopt);
  EXPECT_EQ(sessions.size(), 0u);
  sessions.Create("a", "alice", "k1", 0);
  sessions.Create("b", "bob", "k2", 10);
  sessions.Create("c", "carol", "k3", 20);  // the first to expire goes
  EXPECT_EQ(sessions.Find("a", 30), std::nullopt);
  EXPECT_EQ(user(sessions.Find("c", 30)), "carol");
  sessions.RemoveUser("bob");
  EXPECT_EQ(sessions.Find("b", 30), std::nullopt);
  sessions.Remove("c");
  EXPECT_EQ(sessions.size(), 0u);
  // One user signing in again and again pushes out only their own oldest sessions.
  Sessions capped(3600, 100, 2);
  capped.Create("bob1", "bob", "kb", 0);
  capped.Create("m1", "mallory", "km", 1);
  capped.Create("m2", "mallory", "km", 2);
  capped.Create("m3", "mallory", "km", 3);
  EXPECT_EQ(capped.Find("m1", 4), std::nullopt);
  EXPECT_EQ(user(capped.Find("m3", 4)), "mallory");
  EXPECT_EQ(user(capped.Find("bob1", 4)), "bob");
  EXPECT_EQ(CookieValue("a=1; bmas_session=xyz; c=3", "bmas_session"), "xyz");
  EXPECT_EQ(CookieValue("xbmas_session=1", "bmas_session"), "");
  EXPECT_EQ(CookieValue("", "bmas_session"), "");
}

TEST(SessionsTest, ARevokedKeyEndsTheSessionsSignedInWithIt) {
  Sessions sessions(3600, 100);
  sessions.Create("s1", "alice", "k1", 0);
  sessions.Create("s2", "alice", "k1", 1);
  sessions.Create("s3", "alice", "k2", 2);  // her other key
  sessions.Create("s4", "bob", "k3", 3);
  sessions.RemoveKey("k1");
  EXPECT_EQ(sessions.Find("s1", 4), std::nullopt);
  EXPECT_EQ(sessions.Find("s2", 4), std::nullopt);
  ASSERT_TRUE(sessions.Find("s3", 4));
  EXPECT_EQ(sessions.Find("s3", 4)->key_id, "k2");
  EXPECT_EQ(sessions.Find("s4", 4)->user, "bob");
}

TEST(HistoryTest, TtftP95IsTakenOverTheIntervalOnly) {
  LatencyHistogram before{{0.1, 0.5, 1.0}, {100, 0, 0, 0}, 100, 5};
  LatencyHistogram after{{0.1, 0.5, 1.0}, {100, 0, 10, 0}, 110, 12};
  EXPECT_NEAR(QuantileBetween(before, after, 0.95), 0.975, 1e-9);  // all 10 new in (0.5, 1]
  EXPECT_EQ(QuantileBetween(after, after, 0.95), -1);
  LatencyHistogram restarted{{0.1, 0.5, 1.0}, {0, 2, 0, 0}, 2, 0.4};
  EXPECT_NEAR(QuantileBetween(after, restarted, 0.5), 0.3, 1e-9);
  LatencyHistogram slow{{0.1, 0.5, 1.0}, {0, 0, 0, 4}, 4, 20};
  EXPECT_EQ(QuantileBetween({}, slow, 0.95), 1.0);

  ClusterState s = ThreeNodes();
  s.jobs.push_back(Pending(30, "bob", 1));
  s.gateway.queued = {{"sim", 3}};
  s.gateway.ttft = after;
  HistoryPoint p = MakeHistoryPoint(s, before);
  EXPECT_EQ(p.gpus_training, 2);
  EXPECT_EQ(p.gpus_inference, 1);
  EXPECT_EQ(p.gpus_idle, 5);
  EXPECT_EQ(p.queue, 4);
  std::vector<HistoryPoint> h;
  for (int i = 0; i < 5; ++i) AppendHistory(h, HistoryPoint{i}, 3);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h.front().t, 2);
}

TEST(SourcesTest, TwoGatewaysLoadsMergeSoAReplicaIsIdleOnlyWhenIdleInBoth) {
  auto one = ParseGatewayLoad(
      R"({"queued":{"sim":2},"oldest_wait_s":{"sim":0.5},"backends":[)"
      R"({"url":"http://a","models":["sim"],"healthy":true,"draining":true,"in_flight":0,"capacity":8},)"
      R"({"url":"http://b","models":["sim"],"healthy":false,"draining":false,"in_flight":1,"capacity":4}],)"
      R"("ttft_s":{"count":1,"sum":0.2,"bounds":[0.1,0.5],"counts":[0,1,0]}})");
  auto two = ParseGatewayLoad(
      R"({"queued":{"sim":1,"other":4},"oldest_wait_s":{"sim":2.5},"backends":[)"
      R"({"url":"http://a","models":["sim"],"healthy":true,"draining":false,"in_flight":2,"capacity":8},)"
      R"({"url":"http://b","models":["sim"],"healthy":true,"draining":false,"in_flight":0,"capacity":6}],)"
      R"("ttft_s":{"count":2,"sum":0.3,"bounds":[0.1,0.5],"counts":[2,0,0]}})");
  auto odd = ParseGatewayLoad(R"({"ttft_s":{"count":1,"sum":1,"bounds":[1],"counts":[0,1]}})");
  ASSERT_TRUE(one && two && odd);
  const GatewayLoad m = MergeGatewayLoads({*one, *two, *odd});
  EXPECT_TRUE(m.reachable);
  EXPECT_EQ(m.queued.at("sim"), 3);
  EXPECT_EQ(m.queued.at("other"), 4);
  EXPECT_DOUBLE_EQ(m.oldest_wait_s.at("sim"), 2.5);
  ASSERT_EQ(m.backends.size(), 2u);
  // Drained in one gateway, still sending in the other: not idle anywhere yet.
  EXPECT_FALSE(m.backends[0].draining);
  EXPECT_EQ(m.backends[0].in_flight, 2);
  EXPECT_TRUE(m.backends[1].healthy);
  EXPECT_EQ(m.backends[1].in_flight, 1);
  EXPECT_EQ(m.backends[1].capacity, 6);
  // The histograms add; one with other bounds is left out.
  EXPECT_EQ(m.ttft.count, 3u);
  EXPECT_EQ(m.ttft.counts, (std::vector<uint64_t>{2, 1, 0}));
  EXPECT_FALSE(MergeGatewayLoads({}).reachable);
}

TEST(SourcesTest, ReadTheGatewaysLoadAndAnAgentsGpus) {
  auto load = ParseGatewayLoad(
      R"({"queued":{"sim":2},"backends":[{"url":"http://a","models":["sim"],"healthy":true,)"
      R"("draining":false,"in_flight":3,"capacity":8,"kv_usage":0.5}],)"
      R"("ttft_s":{"count":1,"sum":0.2,"bounds":[0.1,0.5],"counts":[0,1,0]}})");
  ASSERT_TRUE(load);
  EXPECT_EQ(load->queued.at("sim"), 2);
  ASSERT_EQ(load->backends.size(), 1u);
  EXPECT_EQ(load->backends[0].in_flight, 3);
  EXPECT_EQ(load->ttft.counts.size(), 3u);
  EXPECT_FALSE(ParseGatewayLoad("<html>"));
  // A histogram whose counts do not match its bounds is dropped, not misread.
  auto odd = ParseGatewayLoad(R"({"ttft_s":{"bounds":[1],"counts":[1]},"backends":7})");
  ASSERT_TRUE(odd);
  EXPECT_TRUE(odd->ttft.counts.empty());
  EXPECT_TRUE(odd->backends.empty());
  // Counts that would overflow a sum are clamped (the fuzzer found the overflow).
  auto huge = ParseGatewayLoad(R"({"queued":{"a":2000000000,"b":2000000000,"c":-5}})");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->queued.at("a"), 1 << 24);
  EXPECT_EQ(huge->queued.at("c"), 0);
  ClusterState s;
  s.gateway = *huge;
  EXPECT_EQ(MakeHistoryPoint(s, {}).queue, 2 << 24);

  auto gpus = ParseAgentGpus(
      R"({"up":true,"error":"","sample":{"node":"oss01","gpus":[{"index":2,"util":55,)"
      R"("mem_used_mb":10,"mem_total_mb":80,"job_id":7,"user":"alice"}]}})",
      "http://127.0.0.1:1");
  ASSERT_TRUE(gpus);
  EXPECT_EQ(gpus->node, "oss01");
  ASSERT_EQ(gpus->gpus.size(), 1u);
  EXPECT_EQ(gpus->gpus[0].util, 55u);
  EXPECT_EQ(gpus->gpus[0].job_id, 7);
  auto none = ParseAgentGpus(R"({"up":false,"error":"no driver","sample":null})", "n1");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->up);
  EXPECT_EQ(none->error, "no driver");
}

}  // namespace
}  // namespace bmas::dashboard
