#include "dashboard/node_health.h"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "dashboard/cluster_map.h"
#include "dashboard/views.h"

namespace bmas::dashboard {
namespace {

NodeInfo Node(const std::string& name, std::string state, std::vector<std::string> flags = {},
              std::string reason = "") {
  NodeInfo n;
  n.name = name;
  n.hostname = name;
  n.address = "10.200.0." + std::to_string(10 + std::stoi(name.substr(3)));
  n.gpus = 4;
  n.state = std::move(state);
  n.state_flags = std::move(flags);
  n.reason = std::move(reason);
  return n;
}

// An agent read at https://NODE:9400 that answered with four GPUs.
NodeTelemetry Answered(const std::string& node) {
  NodeTelemetry t{node, true, "", {}, "https://" + node + ":9400", true};
  for (int i = 0; i < 4; ++i) t.gpus.push_back({i, 5, 100, 81559, 0, ""});
  return t;
}

// An agent that did not answer: the dashboard knows only its address.
NodeTelemetry Unreachable(const std::string& address) {
  return NodeTelemetry{address, false, "the agent at " + address + ": timed out", {}, address,
                       false};
}

// The fault of issue 25: oss02's link is cut. Slurm marks it down as not responding and its
// agent does not answer; the page says both, with what brings it back.
TEST(NodeHealthTest, ANodeCutOffIsDownAndItsAgentUnreachable) {
  const NodeInfo n = Node("oss02", "down", {"NOT_RESPONDING"}, "Not responding");
  const std::vector<NodeTelemetry> agents = {Answered("oss01"), Unreachable("https://oss02:9400")};
  const NodeTelemetry* agent = AgentOf(agents, n);
  ASSERT_EQ(agent, &agents[1]);
  const NodeHealth h = DescribeNode(n, agent);
  EXPECT_EQ(h.status, "down");
  EXPECT_FALSE(h.responding);
  EXPECT_EQ(h.agent, "unreachable");
  EXPECT_EQ(h.agent_error, "the agent at https://oss02:9400: timed out");
  EXPECT_EQ(h.text,
            "down: Not responding. No job runs there; it serves again by itself once its slurmd "
            "answers (ReturnToService=2): check its network and slurmd; its agent does not "
            "answer (the agent at https://oss02:9400: timed out): check the node's network and "
            "its bmas agent");
  // sinfo's way of writing it says the same.
  EXPECT_EQ(DescribeNode(Node("oss02", "down*", {}, "Not responding"), agent).status, "down");
  EXPECT_FALSE(DescribeNode(Node("oss02", "down*"), agent).responding);
}

// Back on the network: Slurm's own state again (ReturnToService=2), and the agent's telemetry.
TEST(NodeHealthTest, ANodeBackServesWithItsAgentsTelemetry) {
  const std::vector<NodeTelemetry> agents = {Answered("oss01"), Answered("oss02")};
  const NodeInfo n = Node("oss02", "idle");
  const NodeHealth h = DescribeNode(n, AgentOf(agents, n));
  EXPECT_EQ(h.status, "up");
  EXPECT_TRUE(h.responding);
  EXPECT_EQ(h.agent, "ok");
  EXPECT_EQ(h.agent_error, "");
  EXPECT_EQ(h.text, "up: idle");
  EXPECT_EQ(DescribeNode(Node("oss02", "mixed"), &agents[1]).status, "up");
}

// Silent, but not for SlurmdTimeout yet: its jobs are still Slurm's, no new one starts.
TEST(NodeHealthTest, ANodeNotRespondingYetIsNotDown) {
  for (const NodeInfo& n : {Node("oss03", "allocated", {"NOT_RESPONDING"}),
                            Node("oss03", "idle*")}) {
    const NodeHealth h = DescribeNode(n, nullptr);
    EXPECT_EQ(h.status, "not_responding") << n.state;
    EXPECT_FALSE(h.responding);
    EXPECT_EQ(h.agent, "none");
    EXPECT_NE(h.text.find("marks it down after SlurmdTimeout"), std::string::npos) << h.text;
  }
}

// A drain is an admin's hold, lifted only by an admin: the text names the command.
TEST(NodeHealthTest, DrainedAndDrainingAreAnAdminsHold) {
  const NodeHealth drained = DescribeNode(Node("oss03", "idle", {"DRAIN"}, "maintenance"), nullptr);
  EXPECT_EQ(drained.status, "drained");
  EXPECT_TRUE(drained.responding);
  EXPECT_EQ(drained.text,
            "drained: maintenance. No new job starts there until `bmas node resume oss03`");
  const NodeHealth draining = DescribeNode(Node("oss01", "mixed", {"DRAIN"}), nullptr);
  EXPECT_EQ(draining.status, "draining");
  EXPECT_EQ(draining.text,
            "draining: held by an admin. No new job starts there until `bmas node resume "
            "oss01`; its jobs run on");
  // Down and drained: back by itself from the one, not from the other.
  const NodeHealth both =
      DescribeNode(Node("oss02", "down", {"DRAIN", "NOT_RESPONDING"}, "cable"), nullptr);
  EXPECT_EQ(both.status, "down");
  EXPECT_NE(both.text.find("then `bmas node resume oss02` (it is drained too)"),
            std::string::npos)
      << both.text;
}

TEST(NodeHealthTest, AnAgentThatAnswersWithoutTelemetrySaysWhy) {
  NodeTelemetry agent = Answered("oss01");
  agent.up = false;
  agent.gpus.clear();
  agent.error = "NVML: driver not loaded";
  const NodeHealth h = DescribeNode(Node("oss01", "idle"), &agent);
  EXPECT_EQ(h.status, "up");
  EXPECT_EQ(h.agent, "no_telemetry");
  EXPECT_EQ(h.text, "up: idle; its agent answers without GPU telemetry (NVML: driver not loaded)");
  EXPECT_EQ(DescribeNode(NodeInfo{}, &agent).status, "unknown");  // no Slurm
  EXPECT_EQ(DescribeNode(Node("oss01", "future"), nullptr).status, "unknown");
}

TEST(NodeHealthTest, AnAgentIsFoundByItsSampleOrTheHostItsAddressNames) {
  EXPECT_EQ(AgentHost("https://oss02:9400"), "oss02");
  EXPECT_EQ(AgentHost("https://10.200.0.12:9400/"), "10.200.0.12");
  EXPECT_EQ(AgentHost("127.0.0.1:38451"), "127.0.0.1");
  EXPECT_EQ(AgentHost("https://[::1]:9400"), "::1");
  EXPECT_EQ(AgentHost("oss02"), "");
  const NodeInfo n = Node("oss02", "down");
  // Dialled by address, silent: still oss02's.
  const std::vector<NodeTelemetry> by_address = {Unreachable("https://10.200.0.12:9400")};
  EXPECT_EQ(AgentOf(by_address, n), &by_address[0]);
  // A loopback agent is every local node's address: it names none of them.
  NodeInfo local = Node("oss02", "idle");
  local.address = "127.0.0.1";
  const std::vector<NodeTelemetry> loopback = {Unreachable("127.0.0.1:38451")};
  EXPECT_EQ(AgentOf(loopback, local), nullptr);
  // One that answered is its sample's node, whatever address it was read at.
  NodeTelemetry answered = Answered("oss03");
  answered.agent = "https://oss02:9400";
  EXPECT_EQ(AgentOf({answered}, n), nullptr);
  // One that answered without a sample (no driver) is known by its address.
  const std::vector<NodeTelemetry> driverless = {
      NodeTelemetry{"https://oss02:9400", false, "no NVML", {}, "https://oss02:9400", true}};
  EXPECT_EQ(DescribeNode(n, AgentOf(driverless, n)).agent, "no_telemetry");
  EXPECT_EQ(DescribeNode(n, nullptr).agent, "none");
}

// The map and /api/cluster: a down node's free GPUs are "down" (not an admin's "drained"), and
// the node carries its status, the agent's and the words.
TEST(NodeHealthTest, TheClusterViewShowsADownNodeAndItsAgent) {
  ClusterState s;
  s.slurm_reachable = true;
  s.nodes = {Node("oss01", "idle"), Node("oss02", "down", {"NOT_RESPONDING"}, "Not responding"),
             Node("oss03", "idle", {"DRAIN"}, "maintenance")};
  s.telemetry = {Answered("oss01"), Unreachable("https://oss02:9400"), Answered("oss03")};
  const auto map = BuildClusterMap(s);
  ASSERT_EQ(map.size(), 3u);
  EXPECT_EQ(map[1].gpus[0].state, "down");
  EXPECT_EQ(map[1].gpus[0].util, -1);
  EXPECT_FALSE(map[1].telemetry);
  EXPECT_EQ(map[2].gpus[0].state, "drained");
  EXPECT_EQ(map[0].gpus[0].mem_total_mb, 81559u);

  rapidjson::Document d;
  d.Parse(ClusterJson(s, Viewer{"alice", false}).c_str());
  ASSERT_FALSE(d.HasParseError());
  const auto& oss02 = d["nodes"][1];
  EXPECT_STREQ(oss02["name"].GetString(), "oss02");
  EXPECT_STREQ(oss02["state"].GetString(), "down");
  EXPECT_STREQ(oss02["status"].GetString(), "down");
  EXPECT_FALSE(oss02["responding"].GetBool());
  EXPECT_STREQ(oss02["agent"].GetString(), "unreachable");
  EXPECT_STREQ(oss02["agent_error"].GetString(), "the agent at https://oss02:9400: timed out");
  EXPECT_NE(std::string(oss02["status_text"].GetString()).find("down: Not responding"),
            std::string::npos);
  EXPECT_STREQ(oss02["gpus"][0]["state"].GetString(), "down");
  EXPECT_STREQ(d["nodes"][0]["status"].GetString(), "up");
  EXPECT_STREQ(d["nodes"][0]["agent"].GetString(), "ok");
  EXPECT_STREQ(d["nodes"][2]["status"].GetString(), "drained");
  EXPECT_EQ(d["totals"]["down"].GetInt(), 4);
  EXPECT_EQ(d["totals"]["drained"].GetInt(), 4);
  EXPECT_EQ(d["totals"]["idle"].GetInt(), 4);
}

}  // namespace
}  // namespace bmas::dashboard
