// README "Deploying on a real cluster", performed on the test bed (issue 25): on mgs1 as root,
// `bmas cluster init` with the cluster's inventory, munged, slurmctld and slurmrestd as the
// system would run them, and the join service; `bmas node join TOKEN` on oss01..oss03; a
// student (a non-root account the test makes) on the login node mgs1 runs an 8-GPU job across
// two nodes with `bmas run` and sees each node's four GPUs and its rank; the controller reads
// every node's agent over TLS (`bmas agent get`), and the dashboard on mgs1 shows the student
// all twelve GPUs with their telemetry; `bmas node list`; a node drained and resumed; the
// controller's gateway and inference controller as their units run them (the `bmas` account),
// a deployment whose replica runs on a node as that account and serves TLS with the node's
// replica certificate, and a student's chat completion through the gateway to it; the student's
// workspace on oss01's LXD (which the join started) and their shell in it through oss01's
// agent.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "bed_cluster.h"
#include "common/process.h"
#include "net_bed.h"
#include "slurm/local_cluster.h"
#include "test_helpers.h"

namespace bmas::testbed {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kGpusPerNode = 4;
constexpr int kRestPort = 6820;
constexpr const char* kModel = "walk/assistant";

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

class WalkthroughTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = BedClusterSkipReason(&bmas_); !why.empty()) GTEST_SKIP() << why;
    BedOptions options;
    options.name = "walkthrough";
    options.nodes = 3;
    auto started = bed_.Start(options);
    ASSERT_TRUE(started) << started.error().message;
    cluster_ = std::make_unique<BedCluster>(bed_, bmas_);
    node_ = bed_.dir() + "/node";
    // The GPUs' telemetry: fake NVML on the bed, the driver's libnvidia-ml on a real node. The
    // CA the controller's clients check the agents against: cluster init's (a node's join
    // points its own at its copy).
    BedClusterOptions o;
    o.cluster_name = "walk";
    o.partition = "lab";
    o.gpus_per_node = kGpusPerNode;
    o.slurmrestd_port = kRestPort;
    // The partitions of the inference controller's replicas (examples/cluster-12x4.toml's).
    // Each node serves an LXD of its own, which its join starts: the students' workspaces.
    o.extra_toml = std::string(kInferencePartitionsToml) +
                   TelemetryToml(BMAS_FAKE_NVML_LIBRARY, node_) + bed_.LxdToml(node_ + "/etc-bmas");
    inventory_ = cluster_->WriteInventory(o);
    auto nvml = WriteFakeNvmlValues(bed_, kGpusPerNode, "walk");
    ASSERT_TRUE(nvml) << nvml.error().message;
    nvml_values_ = *nvml;
  }

  void TearDown() override {
    if (bmas_.empty()) return;
    bed_.Stop();
    EXPECT_TRUE(bed_.Leftovers().empty()) << ::testing::PrintToString(bed_.Leftovers());
  }

  // `bmas ARGS...` in `host`, as root or `user`.
  CommandOutput In(const std::string& host, const std::vector<std::string>& args,
                   const std::string& user = "") {
    auto r = cluster_->Bmas(host, args, user);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  NetBed bed_;
  std::unique_ptr<BedCluster> cluster_;
  std::string bmas_;
  std::string node_;
  std::string inventory_;
  std::string nvml_values_;
};

TEST_F(WalkthroughTest, InitJoinThreeNodesAStudentsEightGpuJobAcrossTwoThenDrainAndResume) {
  const auto t0 = Clock::now();
  // mgs1# bmas cluster init --cluster cluster.toml
  auto init = cluster_->Init();
  ASSERT_TRUE(init) << init.error().message;
  const std::string token = BedCluster::Token(*init);
  // mgs1# systemctl start munge slurmctld slurmrestd bmas-join
  auto daemons = cluster_->StartControllerDaemons();
  ASSERT_TRUE(daemons) << daemons.error().message;
  const double controller_ms = MsSince(t0);

  // The package's postinst made the `bmas` account on every host; a node's join gives it the
  // replica key.
  ASSERT_TRUE(BedCluster::EnsureServiceAccount());

  // An unprivileged container's root (a high host uid) must get through to each node's LXD_DIR.
  for (const std::string& d : {bed_.dir(), bed_.dir() + "/nodes"}) ::chmod(d.c_str(), 0711);
  for (const char* node : {"oss01", "oss02", "oss03"}) {
    ::chmod((bed_.dir() + "/nodes/" + node).c_str(), 0711);
  }

  // oss0N# bmas node join TOKEN
  for (const char* node : {"oss01", "oss02", "oss03"}) {
    const auto t = Clock::now();
    auto r = cluster_->Join(node, token, false, {"BMAS_FAKE_NVML=" + nvml_values_});
    ASSERT_TRUE(r) << r.error().message;
    const CommandOutput& joined = *r;
    ASSERT_EQ(joined.exit_code, 0) << node << ": " << joined.err << joined.out;
    EXPECT_NE(joined.out.find(std::string(node) + " joined"), std::string::npos) << joined.out;
    std::printf("bmas node join in %s: %.0f ms\n", node, MsSince(t));
  }
  for (const char* node : {"oss01", "oss02", "oss03"}) EXPECT_EQ(cluster_->WaitState(node, "idle"), "");
  const double joined_ms = MsSince(t0);

  // A student on the login node, with nothing set but the cluster's config.
  const std::string student = bmas::testing::EnsureUnixUser("bmastest1");
  const std::string config = inventory_;
  const auto job_start = Clock::now();
  CommandOutput run = In("mgs1",
                         {"--config", config, "run", "--gpus", "8", "--wait", "--", "sh", "-c",
                          "echo $(hostname) $CUDA_VISIBLE_DEVICES $NODE_RANK/$NNODES"},
                         student);
  const double job_ms = MsSince(job_start);
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  EXPECT_NE(run.err.find("2 node(s) x 4 GPU(s)"), std::string::npos) << run.err;
  std::set<std::string> lines;
  std::istringstream out(run.out);
  for (std::string line; std::getline(out, line);) {
    if (line.starts_with("oss")) lines.insert(line);
  }
  ASSERT_EQ(lines.size(), 2u) << run.out;
  std::set<std::string> ranks;
  for (const std::string& line : lines) {
    EXPECT_NE(line.find(" 0,1,2,3 "), std::string::npos) << line;
    ranks.insert(line.substr(line.rfind(' ') + 1));
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0/2", "1/2"})) << run.out;
  std::printf(
      "controller up %.0f ms; three nodes joined and idle %.0f ms after init; the 8-GPU job "
      "across two nodes, submit to output: %.0f ms; first GPU job done %.0f ms after init\n",
      controller_ms, joined_ms, job_ms, MsSince(t0));

  // The controller reads every node's GPUs from its agent, over TLS with the node's
  // certificate, sending the operator secret the join gave the node (the dashboard's client).
  for (const char* node : {"oss01", "oss02", "oss03"}) {
    CommandOutput got;
    EXPECT_TRUE(WaitFor(
        [&] {
          got = In("mgs1", {"--config", config, "agent", "get", fmt::format("https://{}:9400", node)});
          return got.exit_code == 0 && got.out.find("GPU-walk-3") != std::string::npos;
        },
        0, std::chrono::seconds(30)))
        << node << ": " << got.exit_code << " " << got.err << got.out;
  }

  // The dashboard on mgs1 with every node's agent: the student signs in with their key and sees
  // the map of all twelve GPUs, with each node's telemetry (fake NVML's 81559 MiB).
  CommandOutput added = In("mgs1", {"--config", config, "user", "add", student});
  ASSERT_EQ(added.exit_code, 0) << added.err;
  CommandOutput key = In("mgs1", {"--config", config, "key", "create", student});
  ASSERT_EQ(key.exit_code, 0) << key.err;
  const size_t k = key.out.find("sk-bmas-");
  ASSERT_NE(k, std::string::npos) << key.out;
  const std::string api_key = key.out.substr(k, key.out.find_first_of(" \n", k) - k);
  auto dashboard = bed_.StartDaemon(
      "mgs1", "dashboard", "bmas",
      {bmas_, "--config", config, "--state-dir", node_ + "/bmas-state", "dashboard", "--listen",
       "10.200.0.1:8080", "--refresh", "0.5", "--agent", "https://oss01:9400", "--agent",
       "https://oss02:9400", "--agent", "https://oss03:9400"});
  ASSERT_TRUE(dashboard) << dashboard.error().message;
  std::string map;
  EXPECT_TRUE(WaitFor(
      [&] {
        auto r = bed_.Run("mgs1", {"curl", "-s", "-m", "5", "-H", "Authorization: Bearer " + api_key,
                                   "http://10.200.0.1:8080/api/cluster"},
                          student);
        map = r ? r->out : "";
        size_t telemetry = 0;
        for (size_t at = map.find("\"mem_total_mb\":81559"); at != std::string::npos;
             at = map.find("\"mem_total_mb\":81559", at + 1)) {
          ++telemetry;
        }
        return telemetry == 3 * kGpusPerNode;
      },
      dashboard->pid, std::chrono::seconds(30)))
      << map << bed_.LogTail("dashboard");
  for (const char* node : {"oss01", "oss02", "oss03"}) {
    EXPECT_NE(map.find(fmt::format("\"name\":\"{}\"", node)), std::string::npos) << map;
  }

  // mgs1# bmas node list; drain oss02 for maintenance; resume it.
  CommandOutput list = In("mgs1", {"--config", config, "node", "list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  for (const char* node : {"oss01", "oss02", "oss03"}) {
    EXPECT_NE(list.out.find(node), std::string::npos) << list.out;
  }
  CommandOutput drain =
      In("mgs1", {"--config", config, "node", "drain", "oss02", "--reason", "maintenance"});
  ASSERT_EQ(drain.exit_code, 0) << drain.err << drain.out;
  EXPECT_EQ(cluster_->WaitState("oss02", "drained"), "");
  CommandOutput refused = In("mgs1", {"--config", config, "node", "drain", "oss03"}, student);
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  CommandOutput resume = In("mgs1", {"--config", config, "node", "resume", "oss02"});
  ASSERT_EQ(resume.exit_code, 0) << resume.err << resume.out;
  EXPECT_EQ(cluster_->WaitState("oss02", "idle"), "");

  // mgs1# bmas inference deploy; systemctl start bmas-gateway bmas-inference-controller: both
  // as the `bmas` account. The controller runs the replica as a Slurm job of that account on a
  // node, serving TLS with that node's replica certificate; the gateway checks it against the
  // replica CA that `cluster init` wrote in the state dir.
  CommandOutput deployed = In("mgs1", {"--config", config, "inference", "deploy", kModel, "--min",
                                       "1", "--max", "1", "--profile", "instant"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.err << deployed.out;
  auto inference = cluster_->StartInference({}, {"--interval", "0.5"});
  ASSERT_TRUE(inference) << inference.error().message;
  const DaemonProcess* controller = &inference->controller;
  const DaemonProcess* gateway = &inference->gateway;

  // The replica is ready at https://<a node's address>:PORT.
  std::string listed;
  std::string replica_host;
  const auto deploy_start = Clock::now();
  EXPECT_TRUE(WaitFor(
      [&] {
        listed = In("mgs1", {"--config", config, "inference", "list"}).out;
        const size_t at = listed.find("https://");
        if (at == std::string::npos || listed.find("ready") == std::string::npos) return false;
        replica_host = listed.substr(at + 8, listed.find(':', at + 8) - at - 8);
        return true;
      },
      controller->pid, std::chrono::seconds(90)))
      << listed << bed_.LogTail("inference controller") << bed_.LogTail("gateway");
  std::printf("the replica on a node ready %.0f ms after the controller started:\n%s",
              MsSince(deploy_start), listed.c_str());
  std::set<std::string> node_addresses;
  for (size_t i = 1; i < bed_.hosts().size(); ++i) node_addresses.insert(bed_.hosts()[i].address);
  EXPECT_EQ(node_addresses.count(replica_host), 1u) << listed;
  // As the `bmas` account, with the node's replica key.
  auto ps = bed_.Run("mgs1", {"pgrep", "-u", "bmas", "-f", "engine .*--ssl-keyfile .*replica.key"});
  EXPECT_TRUE(ps && ps->exit_code == 0) << listed;

  // The student's chat completion, through the gateway on mgs1 to the replica on the node.
  const std::string body = fmt::format(
      R"({{"model":"{}","messages":[{{"role":"user","content":"hello"}}],"max_tokens":8}})",
      kModel);
  std::string answer;
  EXPECT_TRUE(WaitFor(
      [&] {
        auto r = bed_.Run("mgs1",
                          {"curl", "-s", "-m", "20", "-H", "Authorization: Bearer " + api_key, "-H",
                           "Content-Type: application/json", "-d", body,
                           "http://10.200.0.1:8000/v1/chat/completions"},
                          student);
        answer = r ? r->out : r.error().message;
        return answer.find("\"object\":\"chat.completion\"") != std::string::npos;
      },
      gateway->pid, std::chrono::seconds(30)))
      << answer << bed_.LogTail("gateway");
  std::printf("the student's answer: %.200s\n", answer.c_str());

  // The student's workspace on oss01's LXD, which oss01's join started: root makes it there
  // (the image: the 1 MB busybox one the bed builds, for the Debian one a controller hands
  // out), and the student, logged in on oss01, opens a shell in it through oss01's agent.
  const std::string node_config = node_ + "/etc-bmas/bmas.toml";
  CommandOutput image =
      In("oss01", {"--config", node_config, "image", "build", "--base", "busybox"});
  ASSERT_EQ(image.exit_code, 0) << image.err << image.out;
  CommandOutput created = In("oss01", {"--config", node_config, "workspace", "create", student});
  ASSERT_EQ(created.exit_code, 0) << created.err << created.out;
  auto shell = bed_.Run("oss01",
                        {"sh", "-c",
                         fmt::format("printf 'echo in $(hostname) as $(id -un)\\nexit 3\\n' | {} "
                                     "--config {} --state-dir {} workspace shell",
                                     cluster_->student_bmas, node_config, node_ + "/bmas-state")},
                        student, std::chrono::seconds(60));
  ASSERT_TRUE(shell) << shell.error().message;
  EXPECT_EQ(shell->exit_code, 3) << shell->err << shell->out;
  EXPECT_NE(shell->out.find(fmt::format("in ws-{} as {}", student, student)), std::string::npos)
      << shell->out << shell->err;
  std::printf("the student's shell on oss01 said: %s", shell->out.c_str());

  // From the login node: `ssh oss01` lands the student in their workspace there, through sshd's
  // ForceCommand on oss01 (README "For admins"), across the bed's network.
  const std::string ssh_dir = bed_.dir() + "/shared/ssh";
  ASSERT_TRUE(bed_.Run("mgs1", {"install", "-d", "-m", "0755", ssh_dir}));
  for (const char* k : {"host_key", "student_key"}) {
    auto made = bed_.Run("mgs1", {"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                                  ssh_dir + "/" + k});
    ASSERT_TRUE(made && made->exit_code == 0) << (made ? made->err : made.error().message);
  }
  ASSERT_TRUE(bed_.Run("mgs1", {"chown", student, ssh_dir + "/student_key"}));
  ASSERT_TRUE(bed_.Run("mgs1", {"install", "-m", "0644", ssh_dir + "/student_key.pub",
                                ssh_dir + "/authorized_keys"}));
  // sshd refuses a locked account ("!", as useradd leaves it); a group for the students.
  ASSERT_TRUE(bed_.Run("mgs1", {"groupadd", "-f", "bmasstudents"}));
  ASSERT_TRUE(bed_.Run("mgs1", {"usermod", "-a", "-G", "bmasstudents", "-p", "*", student}));
  {
    std::ofstream config(ssh_dir + "/sshd_config");
    config << fmt::format(
        "Port 22\nListenAddress {}\nHostKey {}/host_key\nAuthorizedKeysFile {}/authorized_keys\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nPidFile none\n"
        "StrictModes no\nMatch Group bmasstudents\n  ForceCommand {} --config {} --state-dir {} "
        "workspace shell\n  PermitUserRC no\n  DisableForwarding yes\n",
        bed_.hosts()[1].address, ssh_dir, ssh_dir, cluster_->student_bmas, node_config,
        node_ + "/bmas-state");
  }
  ASSERT_TRUE(bed_.Run("oss01", {"mkdir", "-p", "/run/sshd"}));  // privilege separation
  auto sshd = bed_.StartDaemon("oss01", "sshd oss01", "sshd",
                               {"/usr/sbin/sshd", "-D", "-e", "-f", ssh_dir + "/sshd_config"});
  ASSERT_TRUE(sshd) << sshd.error().message;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto r = bed_.Run("oss01", {"ss", "-Hltn", "sport = :22"});
        return r && !r->out.empty();
      },
      sshd->pid, std::chrono::seconds(10)))
      << bed_.LogTail("sshd oss01");
  auto remote = bed_.Run(
      "mgs1",
      {"ssh", "-i", ssh_dir + "/student_key", "-o", "StrictHostKeyChecking=no", "-o",
       "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", student + "@oss01",
       "echo from the login node: in $(hostname) as $(id -un); exit 4"},
      student, std::chrono::seconds(60));
  ASSERT_TRUE(remote) << remote.error().message;
  EXPECT_EQ(remote->exit_code, 4) << remote->err << remote->out << bed_.LogTail("sshd oss01");
  EXPECT_NE(remote->out.find(fmt::format("from the login node: in ws-{} as {}", student, student)),
            std::string::npos)
      << remote->out << remote->err;
  std::printf("ssh oss01 from mgs1 said: %s", remote->out.c_str());
  // `bmas workspace shell` typed on mgs1, where no agent runs, says where to go.
  auto here = bed_.Run("mgs1",
                       {"sh", "-c",
                        fmt::format("echo exit | {} --config {} --state-dir {} workspace shell",
                                    cluster_->student_bmas, config, node_ + "/bmas-state")},
                       student);
  ASSERT_TRUE(here) << here.error().message;
  EXPECT_EQ(here->exit_code, 1) << here->out << here->err;
  EXPECT_NE(here->err.find("`ssh NODE` reaches your workspace on that node"), std::string::npos)
      << here->err;
}

}  // namespace
}  // namespace bmas::testbed
