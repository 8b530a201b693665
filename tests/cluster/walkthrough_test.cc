// README "Deploying on a real cluster", performed on the test bed (issue 25): on mgs1 as root,
// `bmas cluster init` with the cluster's inventory, munged, slurmctld and slurmrestd as the
// system would run them, and the join service; `bmas node join TOKEN` on oss01..oss03; a
// student (a non-root account the test makes) on the login node mgs1 runs an 8-GPU job across
// two nodes with `bmas run` and sees each node's four GPUs and its rank; the controller reads
// every node's agent over TLS (`bmas agent get`), and the dashboard on mgs1 shows the student
// all twelve GPUs with their telemetry; `bmas node list`; a node drained and resumed. Parts of
// the README's walk-through still missing here (issue 25): workspace shells on the nodes' LXDs
// and inference replicas on the nodes.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/config.h"
#include "common/process.h"
#include "net_bed.h"
#include "slurm/local_cluster_internal.h"
#include "test_helpers.h"

namespace bmas::testbed {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kMungeSocket = "/run/munge/munge.socket.2";
constexpr int kGpusPerNode = 4;
constexpr int kRestPort = 6820;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

class WalkthroughTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the test bed needs root";
    const char* bmas = std::getenv("BMAS_BINARY");
    if (bmas == nullptr) GTEST_SKIP() << "BMAS_BINARY is not set";
    if (std::string why = slurm::LocalClusterPrerequisites(); !why.empty()) GTEST_SKIP() << why;
    bmas_ = bmas;
    BedOptions options;
    options.name = "walkthrough";
    options.nodes = 3;
    auto started = bed_.Start(options);
    ASSERT_TRUE(started) << started.error().message;
    node_ = bed_.dir() + "/node";
    // The bed's directory is root's; the student runs bmas from a copy every user can run.
    fs::permissions(bed_.dir(), fs::perms::owner_all | fs::perms::group_exec |
                                    fs::perms::others_exec);
    fs::create_directories(bed_.dir() + "/shared");
    fs::permissions(bed_.dir() + "/shared", fs::perms::owner_all | fs::perms::group_read |
                                                fs::perms::group_exec | fs::perms::others_read |
                                                fs::perms::others_exec);
    student_bmas_ = bmas::testing::SharedBinaryIn(bed_.dir() + "/shared");
    WriteInventory();
  }

  void TearDown() override {
    if (bmas_.empty()) return;
    bed_.Stop();
    EXPECT_TRUE(bed_.Leftovers().empty()) << ::testing::PrintToString(bed_.Leftovers());
  }

  // The cluster's inventory (examples/cluster-12x4.toml's shape): mgs1 and three nodes of four
  // fake H100s, every path of a host under <dir>/node, its own; slurmrestd on the controller's
  // loopback for the controller's own users.
  void WriteInventory() {
    const auto& hosts = bed_.hosts();
    std::string toml = fmt::format(
        "[cluster]\ncontroller = {{ name = \"{}\", address = \"{}\" }}\n"
        "[cluster.slurm]\ncluster_name = \"walk\"\nslurm_user = \"root\"\n"
        "state_save_dir = \"{n}/state\"\nspool_dir = \"{n}/spool\"\nlog_dir = \"{n}/log\"\n"
        "run_dir = \"{n}/run\"\ntmpfs = \"{n}/tmp\"\ngpu_device_dir = \"{n}\"\n"
        "cred_expire_s = 10\nkill_wait_s = 5\njwt_key = \"{n}/jwt.key\"\n"
        "slurmrestd = \"127.0.0.1:{port}\"\n"
        "prolog = \"{n}/hooks/prolog\"\nepilog = \"{n}/hooks/epilog\"\ntask_prolog = \"\"\n",
        hosts.front().name, hosts.front().address, fmt::arg("n", node_),
        fmt::arg("port", kRestPort));
    for (size_t i = 1; i < hosts.size(); ++i) {
      toml += fmt::format(
          "[[cluster.nodes]]\nnames = \"{}\"\naddress = \"{}\"\ncpus = {}\nmemory_mib = 1024\n"
          "[cluster.nodes.gpus]\ncount = {}\ntype = \"h100\"\nmemory_gb = 80\n",
          hosts[i].name, hosts[i].address, sysconf(_SC_NPROCESSORS_ONLN), kGpusPerNode);
    }
    toml += "[[cluster.partitions]]\nname = \"lab\"\nnodes = \"ALL\"\ndefault = true\n";
    // The GPUs' telemetry: fake NVML on the bed, the driver's libnvidia-ml on a real node. The
    // CA the controller's clients check the agents against: cluster init's (a node's join
    // points its own at its copy).
    toml += fmt::format(
        "[telemetry]\nnvml_library = \"{}\"\ninterval_s = 0.2\n[agent]\nca = \"{}\"\n",
        BMAS_FAKE_NVML_LIBRARY, node_ + "/bmas-state/cluster/ca.crt");
    nvml_values_ = bed_.dir() + "/shared/nvml.txt";
    std::ofstream values(nvml_values_);
    for (int i = 0; i < kGpusPerNode; ++i) {
      values << fmt::format(
          "uuid=GPU-walk-{} name=NVIDIA_H100_80GB_HBM3 util=0 mem_used_mib=0 mem_total_mib=81559 "
          "power_mw=70000 temp=30 mig=0 nvlinks=18 nvlinks_up=18 cc=9.0\n",
          i);
    }
    values.close();
    ::chmod(nvml_values_.c_str(), 0644);
    inventory_ = bed_.dir() + "/shared/cluster.toml";
    std::ofstream(inventory_) << toml;
    ::chmod(inventory_.c_str(), 0644);
  }

  CommandOutput In(const std::string& host, std::vector<std::string> args,
                   const std::string& user = "") {
    args.insert(args.begin(), {user.empty() ? bmas_ : student_bmas_, "--state-dir",
                               node_ + "/bmas-state"});
    auto r = bed_.Run(host, args, user, std::chrono::seconds(120));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  // What the controller's systemd would run: munged, slurmctld, slurmrestd (as nobody, JWT).
  void StartControllerDaemons() {
    auto munge = slurm::internal::LookUp("munge");
    ASSERT_TRUE(munge) << munge.error().message;
    auto mk = bed_.Run("mgs1",
                       {"install", "-d", "-m", "755", "-o", "munge", "-g", "munge", "/run/munge"});
    ASSERT_TRUE(mk && mk->exit_code == 0);
    auto munged = bed_.StartDaemon(
        "mgs1", "munged mgs1", "munged",
        slurm::internal::MungedCommand(*munge, kMungeSocket, node_ + "/munge.key", "/run/munge"));
    ASSERT_TRUE(munged) << munged.error().message;
    auto ctld = bed_.StartDaemon("mgs1", "slurmctld", "slurmctld", {"/usr/sbin/slurmctld", "-D"});
    ASSERT_TRUE(ctld) << ctld.error().message;
    ASSERT_TRUE(WaitFor(
        [&] {
          auto ping = bed_.Run("mgs1", {"scontrol", "ping"}, "", std::chrono::seconds(5));
          return ping && ping->out.find("is UP") != std::string::npos;
        },
        ctld->pid, std::chrono::seconds(20)))
        << bed_.LogTail("slurmctld");
    auto rest = bed_.StartDaemon(
        "mgs1", "slurmrestd", "slurmrestd",
        {"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/sbin/slurmrestd",
         "-a", "rest_auth/jwt", "-s", "openapi/v0.0.38", fmt::format("127.0.0.1:{}", kRestPort)},
        {"SLURM_JWT=daemon"});
    ASSERT_TRUE(rest) << rest.error().message;
    ASSERT_TRUE(WaitFor(
        [&] {
          auto ss = bed_.Run("mgs1", {"ss", "-Hltn", fmt::format("sport = :{}", kRestPort)});
          return ss && ss->out.find(std::to_string(kRestPort)) != std::string::npos;
        },
        rest->pid, std::chrono::seconds(10)))
        << bed_.LogTail("slurmrestd");
    auto serve = bed_.StartDaemon("mgs1", "join service", "bmas",
                                  {bmas_, "--state-dir", node_ + "/bmas-state", "cluster", "serve",
                                   "--cluster", inventory_, "--munge-key", node_ + "/munge.key"});
    ASSERT_TRUE(serve) << serve.error().message;
    ASSERT_TRUE(WaitFor(
        [&] {
          auto ss = bed_.Run("mgs1", {"ss", "-Hltn", "sport = :6830"});
          return ss && ss->out.find("6830") != std::string::npos;
        },
        serve->pid, std::chrono::seconds(10)))
        << bed_.LogTail("join service");
  }

  // Fake GPUs for every node, where the inventory's gres.conf points (<dir>/node/nvidiaN in
  // each node's view): the bed's stand-in for the nodes' real devices.
  void MakeNodeGpus() {
    Cluster devices = LoadCluster(inventory_);
    devices.slurm.local = true;
    devices.slurm.gpu_device_dir = bed_.dir() + "/nodes";
    auto made = slurm::internal::MakeFakeGpus(devices, bed_.dir() + "/nodes");
    ASSERT_TRUE(made) << made.error().message;
  }

  std::string WaitState(const std::string& node, const std::string& state) {
    std::string last;
    const bool ok = WaitFor(
        [&] {
          auto r = bed_.Run("mgs1", {"sinfo", "-h", "-N", "-n", node, "-o", "%N %T"});
          last = r ? r->out : "";
          return last.find(node + " " + state) != std::string::npos;
        },
        0, std::chrono::seconds(30));
    return ok ? "" : last;
  }

  NetBed bed_;
  std::string bmas_;
  std::string student_bmas_;
  std::string node_;
  std::string inventory_;
  std::string nvml_values_;
};

TEST_F(WalkthroughTest, InitJoinThreeNodesAStudentsEightGpuJobAcrossTwoThenDrainAndResume) {
  const auto t0 = Clock::now();
  // mgs1# bmas cluster init --cluster cluster.toml
  CommandOutput init = In("mgs1", {"cluster", "init", "--cluster", inventory_, "--slurm-dir",
                                   "/etc/slurm", "--munge-key", node_ + "/munge.key",
                                   "--jwt-key", node_ + "/jwt.key"});
  ASSERT_EQ(init.exit_code, 0) << init.err;
  const std::string prefix = "bmas node join ";
  const size_t at = init.out.find(prefix);
  ASSERT_NE(at, std::string::npos) << init.out;
  std::string token = init.out.substr(at + prefix.size());
  token = token.substr(0, token.find('\n'));
  StartControllerDaemons();
  MakeNodeGpus();
  const double controller_ms = MsSince(t0);

  // oss0N# bmas node join TOKEN
  for (const char* node : {"oss01", "oss02", "oss03"}) {
    const auto t = Clock::now();
    auto r = bed_.Run(node,
                      {"env", "BMAS_FAKE_NVML=" + nvml_values_, bmas_, "--state-dir",
                       node_ + "/bmas-state", "node", "join", token, "--config-dir",
                       node_ + "/etc-bmas", "--munge-key", node_ + "/munge.key"},
                      "", std::chrono::seconds(120));
    ASSERT_TRUE(r) << r.error().message;
    const CommandOutput& joined = *r;
    ASSERT_EQ(joined.exit_code, 0) << node << ": " << joined.err << joined.out;
    EXPECT_NE(joined.out.find(std::string(node) + " joined"), std::string::npos) << joined.out;
    std::printf("bmas node join in %s: %.0f ms\n", node, MsSince(t));
  }
  for (const char* node : {"oss01", "oss02", "oss03"}) EXPECT_EQ(WaitState(node, "idle"), "");
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
  EXPECT_EQ(WaitState("oss02", "drained"), "");
  CommandOutput refused = In("mgs1", {"--config", config, "node", "drain", "oss03"}, student);
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  CommandOutput resume = In("mgs1", {"--config", config, "node", "resume", "oss02"});
  ASSERT_EQ(resume.exit_code, 0) << resume.err << resume.out;
  EXPECT_EQ(WaitState("oss02", "idle"), "");
}

}  // namespace
}  // namespace bmas::testbed
