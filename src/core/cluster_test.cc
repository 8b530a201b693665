#include "core/cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/config_table.h"

namespace bmas {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kExamples = std::string(BMAS_SOURCE_DIR) + "/examples/";

// A valid inventory: lines 1-2 the controller, 3-7 nodes n1 and n2.
const std::string kBase =
    "[cluster]\n"
    "controller = { name = \"c\", address = \"10.0.0.1\" }\n"
    "[[cluster.nodes]]\n"
    "names = \"n[1-2]\"\n"
    "address = \"10.0.0.[11-12]\"\n"
    "cpus = 4\n"
    "memory_gb = 8\n";

// The ConfigError that reading `text` throws, or "" when it reads.
std::string ErrorOf(const std::string& text) {
  try {
    ParseCluster(text, "test.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Issue 25: nodes reach slurmrestd through the controller's TLS front, checked against a CA.
TEST(ClusterTest, SlurmrestdOverTlsNamesItsCa) {
  Cluster c = ParseCluster(kBase +
                               "[cluster.slurm]\nslurmrestd = \"https://c:6821\"\n"
                               "slurmrestd_ca = \"/etc/bmas/cluster-ca.crt\"\n",
                           "test.toml");
  EXPECT_EQ(c.slurm.slurmrestd, "https://c:6821");
  EXPECT_EQ(c.slurm.slurmrestd_ca, "/etc/bmas/cluster-ca.crt");
  EXPECT_EQ(ParseCluster(kBase, "test.toml").slurm.slurmrestd_ca, "");  // the cluster CA's
  EXPECT_THAT(ErrorOf(kBase + "[cluster.slurm]\nslurmrestd_ca = \"ca.crt\"\n"),
              HasSubstr("slurmrestd_ca"));
  Cluster reference = LoadCluster(kExamples + "cluster-12x4.toml");
  EXPECT_EQ(reference.slurm.slurmrestd, "https://mgs1:6821");
}

TEST(ClusterTest, ReferenceExampleLoads) {
  Cluster c = LoadCluster(kExamples + "cluster-12x4.toml");
  EXPECT_EQ(c.controller.name, "mgs1");
  ASSERT_EQ(c.nodes.size(), 12u);
  EXPECT_EQ(c.nodes[0].name, "oss01");
  EXPECT_EQ(c.nodes[0].address, "10.0.0.11");
  EXPECT_EQ(c.nodes[11].name, "oss12");
  EXPECT_EQ(c.nodes[11].address, "10.0.0.22");
  const Node& n = c.nodes[5];
  EXPECT_EQ(n.cpus, 192);
  EXPECT_EQ(n.memory_mib, 1000 * 1024);
  EXPECT_EQ(n.gpus.count, 4);
  EXPECT_EQ(n.gpus.type, "h100");
  EXPECT_TRUE(n.gpus.mig);
  EXPECT_THAT(LinkMatrix(n.gpus), ElementsAre(ElementsAre(0, 6, 6, 6), ElementsAre(6, 0, 6, 6),
                                              ElementsAre(6, 6, 0, 6), ElementsAre(6, 6, 6, 0)));
  ASSERT_EQ(n.nics.size(), 2u);
  EXPECT_EQ(n.nics[0].fabric, Fabric::kRoce);
  EXPECT_EQ(n.nics[0].speed_gbps, 400);
  EXPECT_EQ(n.nics[0].hca, "mlx5_0");
  ASSERT_EQ(c.switches.size(), 3u);
  EXPECT_THAT(c.switches[2].switches, ElementsAre("leaf1", "leaf2"));
  ASSERT_EQ(c.partitions.size(), 4u);
  EXPECT_TRUE(c.partitions[0].is_default);
  EXPECT_EQ(c.partitions[1].max_time_min, 7 * 24 * 60);
  EXPECT_EQ(c.partitions[3].name, "inference_floor");
  EXPECT_EQ(c.partitions[3].preempt_mode, PreemptMode::kOff);
  EXPECT_EQ(c.partitions[2].preempt_mode, PreemptMode::kRequeue);
  EXPECT_LT(c.partitions[2].priority_tier, c.partitions[1].priority_tier);
  EXPECT_EQ(SlurmdPortOf(c, 3), 6818);
}

TEST(ClusterTest, LocalExampleLoadsWithDefaultPartitionsAndPortsPerNode) {
  Cluster c = LoadCluster(kExamples + "cluster-local.toml");
  EXPECT_TRUE(c.slurm.local);
  ASSERT_EQ(c.nodes.size(), 3u);
  for (const Node& n : c.nodes) EXPECT_EQ(n.address, "127.0.0.1");
  EXPECT_EQ(SlurmdPortOf(c, 0), 17818);
  EXPECT_EQ(SlurmdPortOf(c, 2), 17820);
  ASSERT_EQ(c.partitions.size(), 4u);
  EXPECT_EQ(c.partitions[3].name, "inference_floor");
  EXPECT_EQ(c.partitions[3].preempt_mode, PreemptMode::kOff);
  EXPECT_EQ(c.partitions[0].name, "lab");
  EXPECT_TRUE(c.partitions[0].is_default);
  EXPECT_EQ(c.partitions[2].name, "inference");
  EXPECT_EQ(c.partitions[2].preempt_mode, PreemptMode::kRequeue);
  EXPECT_THAT(c.partitions[1].nodes, ElementsAre("oss01", "oss02", "oss03"));
}

TEST(ClusterTest, ExplicitNvlinksAndMemoryInMib) {
  Cluster c = ParseCluster(
      "[cluster]\ncontroller = { name = \"c\", address = \"a\" }\n"
      "[[cluster.nodes]]\nnames = \"g1\"\naddress = \"a\"\ncpus = 2\nmemory_mib = 1000\n"
      "gpus = { count = 3, type = \"a100\", nvlinks = [{ gpus = [0, 1], count = 12 },"
      " { gpus = [2, 1] }] }\n",
      "t.toml");
  EXPECT_EQ(c.nodes[0].memory_mib, 1000);
  EXPECT_THAT(LinkMatrix(c.nodes[0].gpus),
              ElementsAre(ElementsAre(0, 12, 0), ElementsAre(12, 0, 1), ElementsAre(0, 1, 0)));
}

struct BadCase {
  std::string text;      // appended to kBase
  std::string expected;  // a substring of the error
};

class ClusterBadInventoryTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ClusterBadInventoryTest, ErrorNamesFileLineAndEntry) {
  std::string error = ErrorOf(kBase + GetParam().text);
  EXPECT_THAT(error, HasSubstr("test.toml:"));
  EXPECT_THAT(error, HasSubstr(GetParam().expected));
}

const char kGpus[] = "[cluster.nodes.gpus]\ncount = 2\ntype = \"h100\"\n";
// Lines 8-12: four H100 80GB that can take MIG; a layout entry starts at line 13.
const char kMigGpus[] =
    "[cluster.nodes.gpus]\ncount = 4\ntype = \"h100\"\nmemory_gb = 80\nmig = true\n";

TEST(ClusterTest, MigLayoutsSplitTheGpusTheyName) {
  Cluster c = ParseCluster(kBase + kMigGpus +
                               "[[cluster.nodes.gpus.mig_layouts]]\ngpus = [2, 3]\n"
                               "profiles = [\"3g.40gb\", \"2g.20gb\", \"1g.10gb\", \"1g.10gb\"]\n",
                           "test.toml");
  const GpuSpec& gpus = c.nodes[1].gpus;
  EXPECT_EQ(MigLayoutOf(gpus, 0), nullptr);
  ASSERT_NE(MigLayoutOf(gpus, 3), nullptr);
  EXPECT_THAT(*MigLayoutOf(gpus, 3), ElementsAre("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"));
  EXPECT_EQ(gpus.mig_layouts[0].line, 13);
}

TEST(ClusterTest, SharedGpusAreShardsAndNotWholeGpus) {
  Cluster c = ParseCluster(kBase + kMigGpus +
                               "[[cluster.nodes.gpus.mig_layouts]]\ngpus = [3]\n"
                               "profiles = [\"7g.80gb\"]\n"
                               "[[cluster.nodes.gpus.shared]]\ngpus = [1, 2]\nshards = 4\n",
                           "test.toml");
  const GpuSpec& gpus = c.nodes[1].gpus;
  EXPECT_EQ(ShardsOf(gpus, 0), 0);
  EXPECT_EQ(ShardsOf(gpus, 1), 4);
  EXPECT_EQ(ShardsOf(gpus, 2), 4);
  EXPECT_EQ(ShardsOf(gpus, 3), 0);
  EXPECT_EQ(SharedGpuCount(gpus), 2);
  EXPECT_EQ(WholeGpuCount(gpus), 1);  // GPU 0: 1 and 2 are shared, 3 is split
  EXPECT_EQ(SharedGpuType(gpus), "h100-shared");
  EXPECT_TRUE(HasSplitGpus(gpus));
  EXPECT_FALSE(HasSplitGpus(GpuSpec{.count = 4, .type = "h100"}));
  EXPECT_EQ(ClusterShardsPerGpu(c), 4);
  EXPECT_EQ(gpus.shared[0].line, 16);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ClusterBadInventoryTest,
    ::testing::Values(
        // Entries that contradict each other.
        BadCase{"[[cluster.nodes]]\nnames = \"n2\"\naddress = \"x\"\ncpus = 1\nmemory_gb = 1\n",
                "test.toml:8: node n2: duplicate name (also at line 3)"},
        BadCase{
            std::string(kGpus) + "nvlinks = [{ gpus = [0, 1] },\n { gpus = [0, 2] }]\n",
            "test.toml:12: node n1: NVLink 0-2: GPU 2 does not exist (the node has 2 GPUs, 0-1)"},
        BadCase{std::string(kGpus) + "nvlinks = [{ gpus = [1, 1] }]\n",
                "node n1: NVLink 1-1: a GPU cannot link to itself"},
        BadCase{std::string(kGpus) + "nvlinks = [{ gpus = [0, 1] }, { gpus = [1, 0] }]\n",
                "node n1: NVLink 1-0: listed twice"},
        BadCase{"[[cluster.partitions]]\nname = \"p\"\nnodes = \"n[1-3]\"\n",
                "test.toml:8: partition p: node n3 is not in cluster.nodes"},
        BadCase{"[[cluster.partitions]]\nname = \"p\"\n[[cluster.partitions]]\nname = \"p\"\n",
                "test.toml:10: partition p: duplicate name (also at line 8)"},
        BadCase{"[[cluster.partitions]]\nname = \"a\"\ndefault = true\n"
                "[[cluster.partitions]]\nname = \"b\"\ndefault = true\n",
                "partition b: partition a is the default already"},
        BadCase{
            "[[cluster.partitions]]\nname = \"p\"\ndefault_time = \"2:00:00\"\nmax_time = \"60\"\n",
            "partition p: default_time 02:00:00 is longer than max_time 01:00:00"},
        BadCase{"[[cluster.partitions]]\nname = \"p\"\nmax_time = \"1:xx\"\n",
                "test.toml:10: cluster.partitions[0].max_time: '1:xx' is not a Slurm time"},
        BadCase{"[[cluster.switches]]\nname = \"s\"\nnodes = \"n[1-2],m1\"\n",
                "test.toml:8: switch s: node m1 is not in cluster.nodes"},
        BadCase{"[[cluster.switches]]\nname = \"s\"\nnodes = \"n[1-2]\"\n"
                "[[cluster.switches]]\nname = \"top\"\nswitches = \"s,t\"\n",
                "switch top: switch t is not in cluster.switches"},
        BadCase{"[[cluster.switches]]\nname = \"s\"\nnodes = \"n1\"\n",
                "test.toml:3: node n2: is under no switch"},
        BadCase{"[[cluster.switches]]\nname = \"s\"\nnodes = \"n[1-2]\"\n"
                "[[cluster.switches]]\nname = \"t\"\nnodes = \"n2\"\n",
                "switch t: node n2 is already under switch s"},
        BadCase{"[[cluster.switches]]\nname = \"s\"\nnodes = \"n[1-2]\"\n"
                "[[cluster.switches]]\nname = \"s\"\nswitches = \"s\"\n",
                "switch s: duplicate name (also at line 8)"},
        BadCase{"[[cluster.switches]]\nname = \"a\"\nswitches = \"b\"\n"
                "[[cluster.switches]]\nname = \"b\"\nswitches = \"a\"\n"
                "[[cluster.switches]]\nname = \"l\"\nnodes = \"n[1-2]\"\n",
                "switches form a loop"},
        BadCase{"[[cluster.nodes]]\nnames = \"n3\"\naddress = \"10.0.0.11\"\ncpus = 1\n"
                "memory_gb = 1\n",
                "node n3: slurmd at 10.0.0.11:6818 is already node n1's"},
        // Entries wrong in themselves.
        BadCase{"[[cluster.nodes]]\nnames = \"m[1-3]\"\naddress = \"10.1.0.[1-2]\"\ncpus = 1\n"
                "memory_gb = 1\n",
                "test.toml:10: cluster.nodes[1].address: 2 addresses for 3 names"},
        BadCase{"[[cluster.nodes]]\nnames = \"m[2-1]\"\n",
                "cluster.nodes[1].names: host list 'm[2-1]'"},
        BadCase{"[[cluster.nodes]]\nnames = \"m\"\naddress = \"x\"\nmemory_gb = 1\n",
                "test.toml:8: cluster.nodes[1].cpus: required"},
        BadCase{"[[cluster.nodes]]\nnames = \"m\"\naddress = \"x\"\ncpus = 1\n",
                "cluster.nodes[1].memory_gb: give memory_gb or memory_mib"},
        BadCase{"[[cluster.nodes]]\nnames = \"m\"\naddress = \"x\"\ncpus = 6\nmemory_gb = 1\n"
                "sockets = 2\ncores_per_socket = 2\nthreads_per_core = 2\n",
                "node m: sockets x cores_per_socket x threads_per_core = 8, but cpus = 6"},
        BadCase{"gpu = 1\n", "test.toml:8: unknown key 'cluster.nodes[0].gpu'"},
        BadCase{"[[cluster.nodes.nics]]\nname = \"ib0\"\nfabric = \"infiniband\"\n",
                "cluster.nodes[0].nics[0].hca: required for fabric infiniband"},
        BadCase{"[[cluster.nodes.nics]]\nname = \"e\"\nfabric = \"token-ring\"\n",
                "cluster.nodes[0].nics[0].fabric: \"token-ring\" is not one of"},
        BadCase{"[cluster.nodes.gpus]\ncount = 2\n",
                "cluster.nodes[0].gpus.type: a GRES type such as \"h100\" is required"},
        BadCase{std::string(kGpus) + "nvlinks_all_pairs = 2\nnvlinks = [{ gpus = [0, 1] }]\n",
                "gpus.nvlinks: give nvlinks or nvlinks_all_pairs, not both"},
        BadCase{"[cluster.slurm]\nstate_save_dir = \"spool\"\n",
                "test.toml:9: cluster.slurm.state_save_dir: expected an absolute path"},
        BadCase{"[cluster.slurm]\ncluster_name = \"Big\"\n",
                "cluster.slurm.cluster_name: use lower-case"},
        BadCase{"[cluster.slurm]\nslurmd_port = 0\n",
                "cluster.slurm.slurmd_port: 0 is out of range"},
        BadCase{"[[cluster.switches]]\nname = \"s\"\n",
                "cluster.switches[0].nodes: a switch lists nodes (a leaf) or switches"},
        BadCase{"[cluster.bogus]\n", "unknown key 'cluster.bogus'"},
        // MIG layouts.
        BadCase{std::string(kMigGpus) + "[[cluster.nodes.gpus.mig_layouts]]\ngpus = [0]\n"
                                        "profiles = [\"3g.40gb\", \"3g.40gb\", \"2g.20gb\"]\n",
                "test.toml:13: node n1: mig_layouts: 3g.40gb + 3g.40gb + 2g.20gb needs 8 compute "
                "slices; an H100 80GB has 7"},
        BadCase{std::string(kMigGpus) + "[[cluster.nodes.gpus.mig_layouts]]\ngpus = [4]\n"
                                        "profiles = [\"7g.80gb\"]\n",
                "test.toml:13: node n1: mig_layouts: GPU 4 does not exist (the node has 4 GPUs)"},
        BadCase{std::string(kMigGpus) + "[[cluster.nodes.gpus.mig_layouts]]\ngpus = [0, 1]\n"
                                        "profiles = [\"7g.80gb\"]\n"
                                        "[[cluster.nodes.gpus.mig_layouts]]\ngpus = [1]\n"
                                        "profiles = [\"7g.80gb\"]\n",
                "test.toml:16: node n1: mig_layouts: GPU 1 already has a layout (line 13)"},
        BadCase{"[cluster.nodes.gpus]\ncount = 1\ntype = \"h100\"\nmemory_gb = 80\n"
                "[[cluster.nodes.gpus.mig_layouts]]\ngpus = [0]\nprofiles = [\"7g.80gb\"]\n",
                "node n1: mig_layouts: the node's GPUs have mig = false"},
        BadCase{"[cluster.nodes.gpus]\ncount = 1\ntype = \"l40s\"\nmemory_gb = 48\nmig = true\n"
                "[[cluster.nodes.gpus.mig_layouts]]\ngpus = [0]\nprofiles = [\"1g.12gb\"]\n",
                "node n1: mig_layouts: no MIG tables for GPU type \"l40s\" with memory_gb = 48"},
        BadCase{std::string(kMigGpus) + "[[cluster.nodes.gpus.mig_layouts]]\ngpus = [0]\n",
                "cluster.nodes[0].gpus.mig_layouts[0].profiles: list MIG profiles"},
        // Shared GPUs.
        BadCase{std::string(kGpus) + "[[cluster.nodes.gpus.shared]]\ngpus = [2]\nshards = 4\n",
                "test.toml:11: node n1: shared: GPU 2 does not exist (the node has 2 GPUs)"},
        BadCase{std::string(kGpus) + "[[cluster.nodes.gpus.shared]]\ngpus = [0]\n",
                "cluster.nodes[0].gpus.shared[0].shards: give how many shards"},
        BadCase{std::string(kGpus) + "[[cluster.nodes.gpus.shared]]\ngpus = [0]\nshards = 1\n",
                "cluster.nodes[0].gpus.shared[0].shards: 1 is out of range"},
        BadCase{std::string(kGpus) + "[[cluster.nodes.gpus.shared]]\ngpus = [0]\nshards = 4\n"
                                     "[[cluster.nodes.gpus.shared]]\ngpus = [0]\nshards = 4\n",
                "test.toml:14: node n1: shared: GPU 0 is already shared (line 11)"},
        BadCase{std::string(kGpus) + "[[cluster.nodes.gpus.shared]]\ngpus = [0]\nshards = 4\n"
                                     "[[cluster.nodes.gpus.shared]]\ngpus = [1]\nshards = 2\n",
                "test.toml:14: node n1: shared: 2 shards per GPU, but line 11 shares GPUs as 4"},
        BadCase{std::string(kMigGpus) + "[[cluster.nodes.gpus.mig_layouts]]\ngpus = [0]\n"
                                        "profiles = [\"7g.80gb\"]\n"
                                        "[[cluster.nodes.gpus.shared]]\ngpus = [0]\nshards = 4\n",
                "test.toml:16: node n1: shared: GPU 0 is split by a MIG layout"}));

TEST(ClusterTest, FileLevelErrors) {
  EXPECT_THAT(ErrorOf("[engine]\nport = 1\n"), HasSubstr("test.toml: no [cluster] table"));
  EXPECT_THAT(ErrorOf("[cluster]\n"), HasSubstr("cluster.controller: required"));
  EXPECT_THAT(ErrorOf("[cluster]\ncontroller = { name = \"c\", address = \"a\" }\n"),
              HasSubstr("cluster.nodes: required"));
  EXPECT_THAT(ErrorOf("[cluster\n"), HasSubstr("test.toml:1:"));
  try {
    LoadCluster("/nonexistent/cluster.toml");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/cluster.toml: cannot read the file"));
  }
}

// ValidateCluster also guards inventories built in code, without a file.
TEST(ClusterTest, ValidateBuiltInventory) {
  Cluster c;
  c.source = "built";
  c.controller = {"c", "a", 0};
  Node n;
  n.name = "n1";
  n.address = "a";
  n.cpus = 1;
  n.memory_mib = 1;
  c.nodes = {n};
  c.partitions = {Partition{.name = "p", .nodes = {"n1"}}};
  EXPECT_TRUE(ValidateCluster(c));
  c.partitions[0].nodes.push_back("n9");
  auto r = ValidateCluster(c);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().message, "built: partition p: node n9 is not in cluster.nodes");
}

TEST(SlurmTimeTest, ParsesSlurmsFormsRoundingUp) {
  struct Case {
    const char* text;
    int64_t minutes;
  };
  for (const Case& c : {Case{"30", 30}, Case{"30:01", 31}, Case{"1:00:00", 60}, Case{"2-0", 2880},
                        Case{"1-02:30", 1590}, Case{"7-00:00:00", 10080}, Case{"UNLIMITED", -1},
                        Case{"infinite", -1}, Case{"0", 0}}) {
    auto r = ParseSlurmMinutes(c.text);
    ASSERT_TRUE(r) << c.text;
    EXPECT_EQ(*r, c.minutes) << c.text;
  }
  for (const char* bad : {"", "1:2:3:4", "-1", "1-", "1h", "1:", " 1", "1--2"}) {
    EXPECT_FALSE(ParseSlurmMinutes(bad)) << bad;
  }
  EXPECT_EQ(FormatSlurmMinutes(60), "01:00:00");
  EXPECT_EQ(FormatSlurmMinutes(1590), "1-02:30:00");
  EXPECT_EQ(FormatSlurmMinutes(kUnlimitedMinutes), "UNLIMITED");
}

TEST(ClusterTest, LayoutNodesAreToldByTheirHostsName) {
  EXPECT_TRUE(IsLayoutNodeOf("oss01-gpu3-1", "oss01"));
  EXPECT_TRUE(IsLayoutNodeOf("oss01-gpu12-0", "oss01"));
  EXPECT_FALSE(IsLayoutNodeOf("oss01", "oss01"));
  EXPECT_FALSE(IsLayoutNodeOf("oss011-gpu3-1", "oss01"));
  EXPECT_FALSE(IsLayoutNodeOf("oss01-gpu3", "oss01"));
  EXPECT_FALSE(IsLayoutNodeOf("oss01-gpux-1", "oss01"));
  EXPECT_FALSE(IsLayoutNodeOf("oss01-gpu3-1", ""));
}

}  // namespace
}  // namespace bmas
