// The multi-host test bed with Slurm in configless mode: three nodes in namespaces of their own
// register with slurmctld in mgs1 over the bed's bridge, a job of a non-root user runs across
// two of them, and the teardown leaves no process, namespace, mount or directory behind.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "net_bed.h"
#include "test_helpers.h"

namespace bmas::testbed {
namespace {

using bmas::testing::EnsureUnixUser;

constexpr const char* kUser = "bmas-netbed-user";

class NetBedSlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the test bed needs root";
  }

  // Builds the bed and Slurm on it; fails the test with the reason when either fails.
  void StartBed(const BedOptions& options) {
    auto started = bed_.Start(options);
    ASSERT_TRUE(started) << started.error().message;
    auto slurm = bed_.StartSlurm(std::chrono::seconds(30));
    ASSERT_TRUE(slurm) << slurm.error().message;
  }

  std::string InController(const std::vector<std::string>& args, const std::string& user = "") {
    auto r = bed_.Run(NetBed::kController, args, user);
    EXPECT_TRUE(r) << r.error().message;
    if (!r) return "";
    EXPECT_EQ(r->exit_code, 0) << r->err << r->out;
    return r->out;
  }

  // The registered nodes: each node's address as slurmctld has it.
  void ExpectNodesOnTheBridge() {
    for (const std::string& node : bed_.NodeNames()) {
      const std::string show = InController({"scontrol", "show", "node", node});
      const std::string address = bed_.Host(node)->address;
      EXPECT_TRUE(show.find("NodeAddr=" + address) != std::string::npos ||
                  show.find("NodeAddr=" + node) != std::string::npos)
          << show;
      EXPECT_NE(show.find("State=IDLE"), std::string::npos) << show;
      EXPECT_NE(show.find("Gres=gpu:h100:4"), std::string::npos) << show;
    }
  }

  // `srun -N2 hostname` as a non-root account: two distinct nodes of the bed.
  void ExpectJobAcrossTwoNodes() {
    const std::string user = EnsureUnixUser(kUser);
    const std::string out = InController({"srun", "-N2", "hostname"}, user);
    std::istringstream lines(out);
    std::set<std::string> names;
    for (std::string line; std::getline(lines, line);) names.insert(line);
    EXPECT_EQ(names.size(), 2u) << out;
    const std::vector<std::string> nodes = bed_.NodeNames();
    for (const std::string& name : names) {
      EXPECT_NE(std::find(nodes.begin(), nodes.end(), name), nodes.end()) << name;
    }
    // The job ran as the user, with the GPUs it asked for.
    const std::string gpus = InController(
        {"srun", "-N1", "--gres=gpu:2", "sh", "-c", "id -un; echo $CUDA_VISIBLE_DEVICES"}, user);
    EXPECT_EQ(gpus, std::string(kUser) + "\n0,1\n");
  }

  void ExpectNothingLeft() {
    bed_.Stop();
    EXPECT_EQ(bed_.Leftovers(), std::vector<std::string>{});
  }

  NetBed bed_;
};

TEST_F(NetBedSlurmTest, ThreeConfiglessNodesRegisterOverTheBridgeAndRunAJobAcrossTwo) {
  ASSERT_NO_FATAL_FAILURE(StartBed(BedOptions{.name = "slurm-static"}));
  ASSERT_EQ(bed_.hosts().size(), 4u);
  // Each host has its own name and its own address on the bridge, and reaches the others there.
  for (const BedHost& h : bed_.hosts()) {
    auto name = bed_.Run(h.name, {"hostname"});
    ASSERT_TRUE(name);
    EXPECT_EQ(name->out, h.name + "\n");
    auto address = bed_.Run(h.name, {"ip", "-4", "-o", "addr", "show", "dev", "eth0"});
    ASSERT_TRUE(address);
    EXPECT_NE(address->out.find(" " + h.address + "/24 "), std::string::npos) << address->out;
    // No route leaves the bed.
    auto routes = bed_.Run(h.name, {"ip", "-4", "route"});
    ASSERT_TRUE(routes);
    EXPECT_EQ(routes->out,
              "10.200.0.0/24 dev eth0 proto kernel scope link src " + h.address + " \n");
  }
  // The nodes have no slurm.conf of their own: slurmd fetched it from mgs1 into its spool.
  auto etc = bed_.Run("oss01", {"ls", "-A", "/etc/slurm"});
  ASSERT_TRUE(etc);
  EXPECT_EQ(etc->out, "");
  auto cached = bed_.Run("oss01", {"ls", bed_.dir() + "/node/spool/conf-cache"});
  ASSERT_TRUE(cached);
  EXPECT_EQ(cached->out, "cgroup.conf\ngres.conf\nslurm.conf\n");

  ExpectNodesOnTheBridge();
  ExpectJobAcrossTwoNodes();
  ExpectNothingLeft();
}

TEST_F(NetBedSlurmTest, DynamicNodesRegisterThemselves) {
  ASSERT_NO_FATAL_FAILURE(StartBed(BedOptions{.name = "slurm-dynamic", .dynamic_nodes = true}));
  // No node is in slurm.conf; each registered itself with `slurmd -Z`.
  const std::string conf = InController({"cat", "/etc/slurm/slurm.conf"});
  EXPECT_EQ(conf.find("\nNodeName="), std::string::npos) << conf;
  for (const std::string& node : bed_.NodeNames()) {
    EXPECT_NE(InController({"scontrol", "show", "node", node}).find("DYNAMIC"), std::string::npos);
  }
  ExpectNodesOnTheBridge();
  ExpectJobAcrossTwoNodes();
  ExpectNothingLeft();
}

// A bed whose test was killed (here: left without Stop) is cleaned up by the next Start in the
// same place, and that one works.
TEST_F(NetBedSlurmTest, AStaleBedIsCleanedUpByTheNextStart) {
  std::vector<DaemonProcess> stale;
  {
    // Never destroyed (a destructor would stop it): as if its test had been killed.
    auto* left = new NetBed;
    auto started = left->Start(BedOptions{.name = "slurm-stale", .nodes = 1});
    ASSERT_TRUE(started) << started.error().message;
    for (const BedHost& h : left->hosts()) stale.push_back(h.holder);
  }
  for (const DaemonProcess& d : stale) ASSERT_TRUE(d.Runs()) << d.name;
  auto started = bed_.Start(BedOptions{.name = "slurm-stale", .nodes = 1});
  ASSERT_TRUE(started) << started.error().message;
  for (const DaemonProcess& d : stale) EXPECT_FALSE(d.Runs()) << d.name << " of the stale bed";
  auto name = bed_.Run("oss01", {"hostname"});
  ASSERT_TRUE(name);
  EXPECT_EQ(name->out, "oss01\n");
  ExpectNothingLeft();
}

}  // namespace
}  // namespace bmas::testbed
