#include "daemon/up_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace bmas {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

using Args = std::vector<std::string>;

UpOptions Options() {
  UpOptions options;
  options.state_dir = "/s";
  options.self_exe = "/bin/bmas";
  return options;
}

// As root, with Slurm and LXD installed and neither running yet; else as a user, who can run
// neither (the plain processes' case).
UpFacts Facts(bool root) {
  UpFacts facts;
  facts.euid = root ? 0 : 1000;
  if (root) {
    facts.service_name = "bmas";
    facts.service_prefix = {"setpriv", "--reuid=bmas"};
  } else {
    facts.service_why_not = "not root";
    facts.slurm_why_not = facts.lxd_why_not = "needs root";
  }
  return facts;
}
UpFacts Bare() { return Facts(false); }
UpFacts Equipped() { return Facts(true); }

std::vector<std::string> Names(const UpPlan& plan) {
  std::vector<std::string> names;
  for (const UpPartPlan& p : plan.parts) names.push_back(p.name);
  return names;
}

const UpPartPlan& Part(const UpPlan& plan, const std::string& name) {
  for (const UpPartPlan& p : plan.parts) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no part " << name;
  static const UpPartPlan none;
  return none;
}

TEST(UpPlanTest, WithoutSlurmTheEnginesArePlainProcessesAndNothingWatchesSlurm) {
  const UpPlan plan = PlanUp(Options(), Bare());
  EXPECT_EQ(plan.slurm, UpSlurm::kCannot);
  EXPECT_EQ(plan.slurm_line, "  slurm      not started: needs root\n");
  EXPECT_FALSE(plan.slurm_runs);
  EXPECT_FALSE(plan.owns_slurm);
  EXPECT_FALSE(plan.elastic);
  EXPECT_EQ(plan.inference_why, "no Slurm runs here");
  EXPECT_THAT(plan.deploy, IsEmpty());
  EXPECT_THAT(Names(plan), ElementsAre("engine-0", "engine-1", "gateway", "dashboard"));
  EXPECT_EQ(plan.lxd, UpLxd::kCannot);
  EXPECT_EQ(plan.lxd_line, "  lxd        not started: needs root\n");
  EXPECT_THAT(Part(plan, "dashboard").trailing_args, ElementsAre("--no-slurm"));
  EXPECT_EQ(plan.notes,
            "  engines are plain processes: no Slurm runs here\n"
            "  engines and gateway run as uid 1000 (not root)\n");
  EXPECT_TRUE(plan.key_hint);
}

TEST(UpPlanTest, WithSlurmTheEnginesAreOneDeploymentThatTheControllerRuns) {
  UpOptions options = Options();
  options.config.up.engines = 3;
  const UpPlan plan = PlanUp(options, Equipped());
  EXPECT_EQ(plan.slurm, UpSlurm::kStart);
  EXPECT_TRUE(plan.owns_slurm);
  EXPECT_TRUE(plan.slurm_runs);
  EXPECT_TRUE(plan.elastic);
  const std::string& model = options.config.engine.model;
  EXPECT_EQ(plan.deploy,
            (Args{"setpriv", "--reuid=bmas", "/bin/bmas", "--state-dir", "/s", "inference",
                  "deploy", model, "--min", "1", "--max", "3", "--profile",
                  options.config.engine.profile, "--if-missing"}));
  EXPECT_THAT(Names(plan),
              ElementsAre("gateway", "controller", "slurm-mon", "agent", "dashboard"));
  // LXD comes up after the monitor, before the agent that needs it.
  EXPECT_EQ(plan.lxd, UpLxd::kStart);
  EXPECT_EQ(plan.lxd_at, 3u);
  EXPECT_TRUE(Part(plan, "agent").needs_lxd);
  // A fresh LXD gets the default workspace image before up says it is ready.
  EXPECT_TRUE(plan.default_image);
  EXPECT_THAT(Part(plan, "dashboard").trailing_args, IsEmpty());
  EXPECT_EQ(plan.notes, "  engines and gateway run as the bmas account\n");
}

TEST(UpPlanTest, TheControllerNeedsTheGatewaysOperatorListenerAndSizesToLoad) {
  UpOptions options = Options();
  options.config.up.replica_port_base = 19000;
  options.config.up.replica_scale_down_idle_s = 120;
  options.config.up.replica_load_window_s = 30.5;
  const UpPlan plan = PlanUp(options, Equipped());
  const UpPartPlan& k = Part(plan, "controller");
  EXPECT_EQ(k.args, (Args{"setpriv", "--reuid=bmas", "/bin/bmas", "--state-dir", "/s",
                          "inference", "controller"}));
  ASSERT_EQ(k.links.size(), 1u);
  EXPECT_EQ(k.links[0].to, UpLinkTo::kGatewayMetrics);
  EXPECT_EQ(k.links[0].flag, "--gateway");
  EXPECT_TRUE(k.links[0].required);
  EXPECT_EQ(k.trailing_args,
            (Args{"--port-base", "19000", "--listen-host", "127.0.0.1", "--cancel-on-exit",
                  "--scale-down-idle", "120", "--load-window", "30.5", "--breach-settle", "30",
                  "--timetable-lead", "120"}));
  EXPECT_THAT(k.listeners, IsEmpty());
  EXPECT_TRUE(k.backend_key);
  EXPECT_TRUE(k.essential);
  EXPECT_EQ(k.fail_label, "inference controller");
  EXPECT_EQ(k.private_dir, "/s/replicas");
  EXPECT_EQ(k.shown, "(Slurm jobs)");
  EXPECT_THAT(k.what, HasSubstr("(min 1, max 2)"));
}

TEST(UpPlanTest, ASlurmThatDidNotStartIsPlannedWithout) {
  UpFacts facts = Equipped();
  facts.slurm_start_error = "slurmctld did not start";
  const UpPlan plan = PlanUp(Options(), facts);
  EXPECT_EQ(plan.slurm, UpSlurm::kCannot);
  EXPECT_EQ(plan.slurm_line, "  slurm      not started: slurmctld did not start\n");
  EXPECT_FALSE(plan.owns_slurm);
  EXPECT_FALSE(plan.elastic);
  // LXD still comes up, but with no Slurm there is no agent.
  EXPECT_EQ(plan.lxd, UpLxd::kStart);
  EXPECT_THAT(Names(plan), ElementsAre("engine-0", "engine-1", "gateway", "dashboard"));
}

TEST(UpPlanTest, ARunningSlurmIsAdoptedFromADeadUpOrLeftRunning) {
  UpFacts facts = Equipped();
  facts.slurm_running_url = "http://127.0.0.1:6820";
  facts.previous_pid = 4242;
  facts.previous_owns_slurm = true;
  UpPlan plan = PlanUp(Options(), facts);
  EXPECT_EQ(plan.slurm, UpSlurm::kAdopt);
  EXPECT_TRUE(plan.owns_slurm);
  EXPECT_EQ(plan.slurm_line,
            "  slurm      http://127.0.0.1:6820        local Slurm started by the last bmas up "
            "(pid 4242), which died; adopted: this one stops it\n");

  facts.previous_owns_slurm = false;
  plan = PlanUp(Options(), facts);
  EXPECT_EQ(plan.slurm, UpSlurm::kLeaveRunning);
  EXPECT_FALSE(plan.owns_slurm);
  EXPECT_TRUE(plan.slurm_runs);
  EXPECT_THAT(plan.slurm_line, HasSubstr("started by `bmas slurm up`; left running\n"));
}

TEST(UpPlanTest, ASlurmNotAskedForIsStillUsedWhenOneRuns) {
  UpOptions options = Options();
  options.config.up.slurm = false;
  UpFacts facts = Equipped();
  UpPlan plan = PlanUp(options, facts);
  EXPECT_EQ(plan.slurm, UpSlurm::kNone);
  EXPECT_EQ(plan.slurm_line, "");
  EXPECT_FALSE(plan.slurm_runs);
  EXPECT_FALSE(plan.elastic);

  facts.slurm_running_url = "http://127.0.0.1:6820";
  plan = PlanUp(options, facts);
  EXPECT_EQ(plan.slurm, UpSlurm::kNone);
  EXPECT_FALSE(plan.owns_slurm);
  EXPECT_TRUE(plan.elastic);
  EXPECT_THAT(Names(plan),
              ElementsAre("gateway", "controller", "slurm-mon", "agent", "dashboard"));
}

TEST(UpPlanTest, ProcessEnginesTakeTheBasePortPlusTheirIndex) {
  UpOptions options = Options();
  options.config.up.inference = "processes";
  options.config.up.engines = 3;
  options.config.up.engine_base_port = 9000;
  options.config.engine.host = "0.0.0.0";
  const UpPlan plan = PlanUp(options, Equipped());
  EXPECT_FALSE(plan.elastic);
  EXPECT_EQ(plan.inference_why, "[up] inference = \"processes\"");
  EXPECT_THAT(Names(plan),
              ElementsAre("engine-0", "engine-1", "engine-2", "gateway", "slurm-mon", "agent",
                          "dashboard"));
  for (int i = 0; i < 3; ++i) {
    const UpPartPlan& e = plan.parts[i];
    EXPECT_EQ(e.args, (Args{"setpriv", "--reuid=bmas", "/bin/bmas", "--state-dir", "/s",
                            "engine"}));
    ASSERT_EQ(e.listeners.size(), 1u);
    EXPECT_EQ(e.listeners[0].flag, "--port");
    EXPECT_EQ(e.listeners[0].host, "0.0.0.0");
    EXPECT_EQ(e.listeners[0].port, 9000 + i);
    EXPECT_EQ(e.port_flag, "--port");
    EXPECT_EQ(e.log, "/s/logs/engine-" + std::to_string(i) + ".log");
    EXPECT_TRUE(e.backend_key);
    EXPECT_TRUE(e.essential);
  }
  options.config.up.engine_base_port = 0;
  EXPECT_EQ(PlanUp(options, Equipped()).parts[1].listeners[0].port, 0) << "any free port";
}

TEST(UpPlanTest, TheGatewayListsTheEnginesAndHoldsItsOperatorListener) {
  UpOptions options = Options();
  options.config.gateway.host = "0.0.0.0";
  options.config.gateway.port = 8000;
  options.config.gateway.metrics_listen = "127.0.0.1:9100";
  UpPlan plan = PlanUp(options, Bare());
  const UpPartPlan& g = Part(plan, "gateway");
  EXPECT_EQ(g.args, (Args{"/bin/bmas", "--state-dir", "/s", "gateway"}));
  ASSERT_EQ(g.listeners.size(), 2u);
  EXPECT_EQ(g.listeners[0].flag, "--port");
  EXPECT_EQ(g.listeners[0].host, "0.0.0.0");
  EXPECT_EQ(g.listeners[0].port, 8000);
  EXPECT_EQ(g.listeners[1].flag, "--metrics-listen");
  EXPECT_EQ(g.listeners[1].host, "127.0.0.1");
  EXPECT_EQ(g.listeners[1].port, 9100);
  EXPECT_TRUE(g.listeners[1].pass_host);
  ASSERT_EQ(g.links.size(), 1u);
  EXPECT_EQ(g.links[0].to, UpLinkTo::kEngines);
  EXPECT_EQ(g.links[0].flag, "--backend");
  EXPECT_EQ(g.scrape, UpScrape::kMetricsUrl);

  options.config.gateway.metrics_listen = "nowhere";
  plan = PlanUp(options, Bare());
  EXPECT_THAT(Part(plan, "gateway").listeners[1].error,
              HasSubstr("gateway: metrics_listen \"nowhere\" is not host:port"));
}

TEST(UpPlanTest, NoEnginesMeansNoGatewayAndNoController) {
  UpOptions options = Options();
  options.config.up.engines = 0;
  const UpPlan plan = PlanUp(options, Equipped());
  EXPECT_FALSE(plan.elastic);
  EXPECT_THAT(plan.deploy, IsEmpty());
  EXPECT_THAT(Names(plan), ElementsAre("slurm-mon", "agent", "dashboard"));
  EXPECT_EQ(plan.notes, "");
  EXPECT_FALSE(plan.key_hint);
}

TEST(UpPlanTest, WithoutAGatewayTheEnginesRunAsProcessesAlone) {
  UpOptions options = Options();
  options.config.up.gateway = false;
  const UpPlan plan = PlanUp(options, Equipped());
  EXPECT_FALSE(plan.elastic);
  EXPECT_EQ(plan.inference_why, "");
  EXPECT_THAT(Names(plan), ElementsAre("engine-0", "engine-1", "slurm-mon", "agent", "dashboard"));
  EXPECT_EQ(plan.notes, "  engines and gateway run as the bmas account\n");
  EXPECT_FALSE(plan.key_hint);
}

TEST(UpPlanTest, HelpersRunAsUpOnLoopbackAndArePrometheusTargets) {
  UpOptions options = Options();
  options.config.source = "/etc/x.toml";
  options.config.up.slurm_monitor_port = 9200;
  const UpPlan plan = PlanUp(options, Equipped());
  const UpPartPlan& m = Part(plan, "slurm-mon");
  EXPECT_EQ(m.args, (Args{"/bin/bmas", "--state-dir", "/s", "--config", "/etc/x.toml", "slurm",
                          "monitor"}));
  ASSERT_EQ(m.listeners.size(), 1u);
  EXPECT_EQ(m.listeners[0].host, "127.0.0.1");
  EXPECT_EQ(m.listeners[0].port, 9200);
  EXPECT_EQ(m.log, "/s/logs/slurm-monitor.log");
  EXPECT_FALSE(m.essential);
  EXPECT_FALSE(m.backend_key);
  EXPECT_EQ(m.scrape, UpScrape::kUrl);
  const UpPartPlan& a = Part(plan, "agent");
  EXPECT_EQ(a.args, (Args{"/bin/bmas", "--state-dir", "/s", "--config", "/etc/x.toml", "agent"}));
  EXPECT_EQ(a.listeners[0].flag, "--metrics-port");
  EXPECT_EQ(a.listeners[0].port, 0);
  EXPECT_EQ(a.port_flag, "--metrics-port");
  EXPECT_EQ(a.scrape, UpScrape::kUrl);
}

// A real cluster's controller: slurmctld and slurmrestd are the system's (bmas cluster init, the
// Debian package's units), so up starts no Slurm of its own and drives that one.
TEST(UpPlanTest, WithSlurmOffUpDrivesTheClustersOwnSlurmAndStartsNoFrontForIt) {
  UpOptions options = Options();
  options.config.up.slurm = false;
  options.config.source = "/etc/bmas/bmas.toml";
  UpFacts facts = Equipped();
  facts.cluster_slurm = "https://mgs1:6821";
  facts.slurmrestd_https = "https://mgs1:6821";
  facts.replica_ca = true;
  const UpPlan plan = PlanUp(options, facts);
  EXPECT_EQ(plan.slurm, UpSlurm::kCluster);
  EXPECT_TRUE(plan.slurm_runs);
  EXPECT_FALSE(plan.owns_slurm);
  EXPECT_TRUE(plan.elastic);
  EXPECT_EQ(plan.slurm_line,
            "  slurm      https://mgs1:6821            the cluster's Slurm ([cluster.slurm] "
            "slurmrestd of /etc/bmas/bmas.toml); up neither starts nor stops it\n");
  EXPECT_THAT(Names(plan),
              ElementsAre("gateway", "controller", "slurm-mon", "agent", "dashboard"));
  EXPECT_THAT(Part(plan, "dashboard").trailing_args, IsEmpty());
  EXPECT_THAT(plan.deploy, Contains("deploy"));
  // Every part reads the cluster from the same config.
  EXPECT_THAT(Part(plan, "controller").args, Contains("/etc/bmas/bmas.toml"));
  // Its replicas run on the nodes: on their addresses, over TLS with each node's replica
  // certificate.
  const Args& ctl = Part(plan, "controller").trailing_args;
  EXPECT_EQ(Args(ctl.begin(), ctl.begin() + 6),
            (Args{"--port-base", "18100", "--listen-host", "0.0.0.0", "--replica-tls", "/etc/bmas"}))
      << ::testing::PrintToString(ctl);
  // Without the replica CA (no `cluster init` here) the replicas serve plain HTTP.
  facts.replica_ca = false;
  EXPECT_THAT(Part(PlanUp(options, facts), "controller").trailing_args,
              Not(Contains("--replica-tls")));
  facts.replica_ca = true;

  // A local Slurm that runs in the state dir still comes first.
  facts.slurm_running_url = "http://127.0.0.1:6820";
  EXPECT_EQ(PlanUp(options, facts).slurm, UpSlurm::kNone);
  // [up] slurm = true: up starts its own, as before.
  facts.slurm_running_url.clear();
  options.config.up.slurm = true;
  EXPECT_EQ(PlanUp(options, facts).slurm, UpSlurm::kStart);
}

TEST(UpPlanTest, AnHttpsSlurmrestdGetsATlsFrontBeforeTheNodesAgent) {
  UpOptions options = Options();
  UpFacts facts = Equipped();
  EXPECT_THAT(Names(PlanUp(options, facts)), Not(Contains("tls-front")));

  facts.slurmrestd_https = "https://10.0.0.1:6821";
  UpPlan plan = PlanUp(options, facts);
  EXPECT_THAT(Names(plan), ElementsAre("gateway", "controller", "slurm-mon", "tls-front", "agent",
                                       "dashboard"));
  const UpPartPlan& front = Part(plan, "tls-front");
  EXPECT_EQ(front.args, (Args{"/bin/bmas", "--state-dir", "/s", "slurm", "tls-front",
                              "--listen", "10.0.0.1:6821"}));
  ASSERT_EQ(front.links.size(), 1u);
  EXPECT_EQ(front.links[0].to, UpLinkTo::kSlurmRest);
  EXPECT_EQ(front.links[0].flag, "--backend");
  EXPECT_TRUE(front.links[0].required);
  EXPECT_TRUE(front.listeners.empty());  // it binds its own port, then drops to nobody
  EXPECT_EQ(front.shown, "https://10.0.0.1:6821");
  EXPECT_EQ(front.log, "/s/logs/tls-front.log");
  EXPECT_FALSE(front.essential);
  EXPECT_EQ(plan.lxd_at, 4u);

  // A name: every address, the certificate for the name.
  facts.slurmrestd_https = "https://mgs1:7000/";
  EXPECT_EQ(Part(PlanUp(options, facts), "tls-front").args,
            (Args{"/bin/bmas", "--state-dir", "/s", "slurm", "tls-front", "--listen",
                  "0.0.0.0:7000", "--name", "mgs1"}));
  facts.slurmrestd_https = "https://[fd00::1]:6821";
  EXPECT_EQ(Part(PlanUp(options, facts), "tls-front").args.back(), "[fd00::1]:6821");

  // No Slurm here: nothing to front.
  UpFacts bare = Bare();
  bare.slurmrestd_https = "https://10.0.0.1:6821";
  EXPECT_THAT(Names(PlanUp(options, bare)), Not(Contains("tls-front")));
}

TEST(UpPlanTest, TheDashboardTakesAnyPortOnItsListenHostAndLinksWhatStarted) {
  UpOptions options = Options();
  options.config.dashboard.listen = "0.0.0.0:8080";
  UpPlan plan = PlanUp(options, Equipped());
  const UpPartPlan& d = plan.parts.back();
  EXPECT_EQ(d.name, "dashboard");
  EXPECT_EQ(d.args, (Args{"setpriv", "--reuid=bmas", "/bin/bmas", "--state-dir", "/s",
                          "dashboard"}));
  ASSERT_EQ(d.listeners.size(), 1u);
  EXPECT_EQ(d.listeners[0].host, "0.0.0.0");
  EXPECT_EQ(d.listeners[0].port, 0) << "any free port, as before";
  ASSERT_EQ(d.links.size(), 2u);
  EXPECT_EQ(d.links[0].to, UpLinkTo::kGatewayMetrics);
  EXPECT_FALSE(d.links[0].required);
  EXPECT_EQ(d.links[1].to, UpLinkTo::kAgent);
  EXPECT_FALSE(d.essential);

  options.config.dashboard.listen = "8080";
  plan = PlanUp(options, Equipped());
  EXPECT_THAT(plan.parts.back().listeners[0].error,
              HasSubstr("[dashboard] listen: \"8080\" is not host:port"));

  options.config.up.dashboard = false;
  EXPECT_THAT(Names(PlanUp(options, Equipped())), ::testing::Not(::testing::Contains("dashboard")));
}

TEST(UpPlanTest, LxdNotAskedForMeansNoAgent) {
  UpOptions options = Options();
  options.config.up.lxd = false;
  const UpPlan plan = PlanUp(options, Equipped());
  EXPECT_EQ(plan.lxd, UpLxd::kNone);
  EXPECT_EQ(plan.lxd_line, "");
  EXPECT_FALSE(plan.default_image);
  EXPECT_THAT(Names(plan), ElementsAre("gateway", "controller", "slurm-mon", "dashboard"));
}

TEST(UpPlanTest, TheDefaultImageComesOnlyWithAnLxdUpStartsAndWhenAskedFor) {
  UpOptions options = Options();
  options.config.up.image = false;
  EXPECT_FALSE(PlanUp(options, Equipped()).default_image);
  UpFacts facts = Equipped();
  facts.lxd_why_not = "needs root";
  EXPECT_FALSE(PlanUp(Options(), facts).default_image);
}

TEST(UpPlanTest, ADeadUpsLxdIsThisOnesOnlyWhenItOwnedIt) {
  UpFacts facts = Equipped();
  EXPECT_FALSE(PlanUp(Options(), facts).previous_owns_lxd);
  facts.previous_pid = 7;
  facts.previous_owns_lxd = true;
  EXPECT_TRUE(PlanUp(Options(), facts).previous_owns_lxd);
}

TEST(UpPlanTest, RootWritesTheClustersConfigOnlyOnTheDefaultStateDirWithNoConfig) {
  UpFacts facts = Equipped();
  facts.default_state_dir = true;
  UpOptions options = Options();
  EXPECT_TRUE(PlanUp(options, facts).write_system_config);
  facts.system_config_exists = true;
  EXPECT_FALSE(PlanUp(options, facts).write_system_config) << "an admin's is kept";
  facts.system_config_exists = false;
  facts.default_state_dir = false;
  EXPECT_FALSE(PlanUp(options, facts).write_system_config);
  facts.default_state_dir = true;
  options.config.source = "/etc/x.toml";
  EXPECT_FALSE(PlanUp(options, facts).write_system_config);
  options.config.source = "";
  facts.euid = 1000;
  EXPECT_FALSE(PlanUp(options, facts).write_system_config);
}

TEST(UpPlanTest, PartsGetTheEnginesShutdownTimeAndFiveSecondsToStop) {
  UpOptions options = Options();
  options.config.engine.shutdown_timeout_s = 12;
  EXPECT_EQ(PlanUp(options, Bare()).stop_grace, std::chrono::seconds(17));
}

}  // namespace
}  // namespace bmas
