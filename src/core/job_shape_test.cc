#include "core/job_shape.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas {
namespace {

using ::testing::HasSubstr;

// The reference cluster: 12 nodes x 4 H100, RoCE.
Cluster Reference() { return LoadCluster(std::string(BMAS_SOURCE_DIR) + "/examples/cluster-12x4.toml"); }

JobShape Plan(const ShapeRequest& r, const Cluster& c = Reference()) {
  auto shape = PlanJobShape(c, r);
  EXPECT_TRUE(shape) << shape.error().message;
  return shape ? *shape : JobShape{};
}

std::string Refusal(const ShapeRequest& r, const Cluster& c = Reference()) {
  auto shape = PlanJobShape(c, r);
  EXPECT_FALSE(shape);
  return shape ? "" : shape.error().message;
}

// The local cluster with MIG: oss01 has 4 whole H100s; oss02 and oss03 2 whole each, and
// slices: 3g.40gb, 2g.20gb and 9 x 1g.10gb each.
Cluster LocalMig() {
  return LoadCluster(std::string(BMAS_SOURCE_DIR) + "/examples/cluster-local-mig.toml");
}

TEST(JobShapeTest, GpusOptionTakesCountsProfilesAndCountsOfProfiles) {
  ShapeRequest r;
  ASSERT_TRUE(ParseGpusOption("4", r));
  EXPECT_EQ(r.gpus, 4);
  EXPECT_EQ(r.mig_profile, "");
  ASSERT_TRUE(ParseGpusOption("1g.10gb", r));
  EXPECT_EQ(r.gpus, 1);
  EXPECT_EQ(r.mig_profile, "1g.10gb");
  ASSERT_TRUE(ParseGpusOption("2x3g.40gb", r));
  EXPECT_EQ(r.gpus, 2);
  EXPECT_EQ(r.mig_profile, "3g.40gb");
  ASSERT_TRUE(ParseGpusOption("1g.10gb+me", r));
  EXPECT_EQ(r.mig_profile, "1g.10gb+me");
  for (const char* bad : {"", "x", "-1", "0x1g.10gb", "2x", "h100", "3g", "1.5"}) {
    auto parsed = ParseGpusOption(bad, r);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_THAT(parsed.error().message, HasSubstr("a MIG profile (1g.10gb)")) << bad;
  }
}

TEST(JobShapeTest, SlicesGoOnOneNodeAndNameTheirProfile) {
  JobShape s = Plan({.gpus = 2, .mig_profile = "1g.10gb"}, LocalMig());
  EXPECT_EQ(s.nodes, 1);
  EXPECT_EQ(s.gpus_per_node, 2);
  EXPECT_EQ(s.gres_type, "1g.10gb");
  EXPECT_TRUE(s.mig);
  EXPECT_EQ(DistributedEnvironment(LocalMig(), s).at("NCCL_P2P_DISABLE"), "1");
  EXPECT_EQ(Refusal({.gpus = 10, .mig_profile = "1g.10gb"}, LocalMig()),
            "a node of partition lab has at most 9 1g.10gb slices, not 10");
  EXPECT_EQ(Refusal({.gpus = 1, .mig_profile = "1g.20gb"}, LocalMig()),
            "partition lab has no 1g.20gb slices; it has 1g.10gb, 2g.20gb, 3g.40gb");
  EXPECT_THAT(Refusal({.gpus = 1, .mig_profile = "1g.10gb"}),
              HasSubstr("partition lab has no MIG slices"));
  EXPECT_THAT(Refusal({.gpus = 2, .nodes = 2, .mig_profile = "1g.10gb"}, LocalMig()),
              HasSubstr("MIG slices run on one node"));
}

TEST(JobShapeTest, WholeGpusBesideSlicesAreAskedForByType) {
  // Slurm would give an untyped gpu request a slice; whole GPUs count without the split ones.
  JobShape s = Plan({.gpus = 4}, LocalMig());
  EXPECT_EQ(s.gres_type, "h100");
  EXPECT_FALSE(s.mig);
  EXPECT_THAT(Refusal({.gpus = 8}, LocalMig()), HasSubstr("has 4 GPUs in all (1 nodes x 4)"));
  EXPECT_EQ(Plan({.gpus = 4}).gres_type, "");  // no MIG anywhere: any GPU will do
  EXPECT_EQ(DistributedEnvironment(Reference(), Plan({.gpus = 4})).count("NCCL_P2P_DISABLE"), 0u);
}

// examples/cluster-local-shared.toml: oss03's GPUs 2 and 3 are shared as four shards each.
Cluster LocalShared() {
  return LoadCluster(std::string(BMAS_SOURCE_DIR) + "/examples/cluster-local-shared.toml");
}

TEST(JobShapeTest, AShareIsShardsOfOneSharedGpu) {
  JobShape s = Plan({.gpus = 1, .share = 4}, LocalShared());
  EXPECT_EQ(s.shards, 1);
  EXPECT_EQ(s.nodes, 1);
  EXPECT_EQ(s.gpus_per_node, 1);
  EXPECT_EQ(s.gpu_type, "l40s-shared");
  EXPECT_EQ(s.gres_type, "");
  EXPECT_EQ(Plan({.gpus = 1, .share = 2}, LocalShared()).shards, 2);
  EXPECT_EQ(Plan({.gpus = 1, .share = 1}, LocalShared()).shards, 4);
  EXPECT_EQ(Refusal({.gpus = 1, .share = 3}, LocalShared()),
            "shared GPUs are cut into 4 shards, so --share 3 is not a whole number of them; "
            "--share takes 1, 2, 4");
  EXPECT_THAT(Refusal({.gpus = 2, .share = 4}, LocalShared()), HasSubstr("a share of one GPU"));
  EXPECT_THAT(Refusal({.gpus = 1, .share = 4}), HasSubstr("the cluster shares no GPU"));
  // Whole GPUs beside shared ones are asked for by type, and count without the shared ones.
  JobShape whole = Plan({.gpus = 2}, LocalShared());
  EXPECT_EQ(whole.gres_type, "l40s");
  EXPECT_EQ(whole.shards, 0);
}

TEST(JobShapeTest, GpusThatFitInOneNodeStayInOneNode) {
  for (int gpus : {1, 2, 3, 4}) {
    JobShape s = Plan({.gpus = gpus});
    EXPECT_EQ(s.nodes, 1);
    EXPECT_EQ(s.gpus_per_node, gpus);
    EXPECT_EQ(s.partition, "lab");
    EXPECT_EQ(s.gpu_type, "h100");
  }
}

TEST(JobShapeTest, MoreGpusTakeWholeNodes) {
  JobShape s = Plan({.gpus = 8});
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.gpus_per_node, 4);
  s = Plan({.gpus = 48, .partition = "training"});
  EXPECT_EQ(s.nodes, 12);
  EXPECT_EQ(s.gpus_per_node, 4);
}

TEST(JobShapeTest, RefusalsSayWhyAndWhatWouldFit) {
  EXPECT_THAT(Refusal({.gpus = 6}), HasSubstr("ask for 4 or 8 GPUs"));
  EXPECT_THAT(Refusal({.gpus = 49}), HasSubstr("48 GPUs in all"));
  EXPECT_THAT(Refusal({.nodes = 2, .gpus_per_node = 8}),
              HasSubstr("what fits: --nodes 4 --gpus-per-node 4"));
  EXPECT_THAT(Refusal({.nodes = 13, .gpus_per_node = 1}), HasSubstr("12 such nodes"));
  EXPECT_THAT(Refusal({.gpus = 1, .partition = "gpu"}), HasSubstr("no partition 'gpu'"));
  EXPECT_THAT(Refusal({.gpus = 5, .nodes = 2}), HasSubstr("do not split evenly"));
  EXPECT_THAT(Refusal({.gpus = 4, .nodes = 2, .gpus_per_node = 1}), HasSubstr("is not --nodes"));
}

TEST(JobShapeTest, ExplicitLayoutAndTasksPerLauncher) {
  JobShape s = Plan({.nodes = 3, .gpus_per_node = 2, .launcher = Launcher::kMpi});
  EXPECT_EQ(s.nodes, 3);
  EXPECT_EQ(s.gpus_per_node, 2);
  EXPECT_EQ(s.tasks_per_node, 2);  // one MPI rank per GPU
  s = Plan({.gpus = 8, .launcher = Launcher::kTorchrun});
  EXPECT_EQ(s.tasks_per_node, 1);  // torchrun starts the per-GPU processes itself
  s = Plan({.nodes = 3, .launcher = Launcher::kMpi});
  EXPECT_EQ(s.gpus_per_node, 0);  // a CPU job over three nodes
  EXPECT_EQ(s.tasks_per_node, 1);
}

TEST(JobShapeTest, EnvironmentComesFromTheNodesNics) {
  const Cluster c = Reference();
  auto env = DistributedEnvironment(c, Plan({.gpus = 8, .launcher = Launcher::kTorchrun}, c));
  EXPECT_EQ(env["NNODES"], "2");
  EXPECT_EQ(env["GPUS_PER_NODE"], "4");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_FALSE(env["NCCL_SOCKET_IFNAME"].empty());
  EXPECT_FALSE(env["NCCL_IB_HCA"].empty());  // RoCE: NCCL uses the RDMA devices
  EXPECT_EQ(env.count("NCCL_IB_DISABLE"), 0u);

  const Cluster local =
      LoadCluster(std::string(BMAS_SOURCE_DIR) + "/examples/cluster-local.toml");
  env = DistributedEnvironment(local, Plan({.nodes = 3, .launcher = Launcher::kMpi}, local));
  EXPECT_EQ(env["WORLD_SIZE"], "3");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "lo");
  EXPECT_EQ(env["NCCL_IB_DISABLE"], "1");
  EXPECT_EQ(env["OMPI_MCA_btl"], "self,tcp");
  EXPECT_EQ(env["OMPI_MCA_btl_tcp_if_include"], "lo");
}

TEST(JobShapeTest, BatchScriptQuotesTheCommandAndUsesTheLauncher) {
  JobShape one = Plan({.gpus = 2});
  std::string s = BatchScript(one, {"python3", "-c", "print('hi there')"});
  EXPECT_THAT(s, HasSubstr("python3 -c 'print('\\''hi there'\\'')'"));
  EXPECT_THAT(s, HasSubstr("MASTER_ADDR="));
  EXPECT_THAT(BatchScript(Plan({.nodes = 3, .launcher = Launcher::kMpi}), {"./allreduce"}),
              HasSubstr("srun --mpi=pmix"));
  EXPECT_THAT(BatchScript(Plan({.gpus = 8, .launcher = Launcher::kTorchrun}), {"train.py"}),
              HasSubstr("torchrun --nnodes=$NNODES --nproc-per-node=$GPUS_PER_NODE"));
}

TEST(JobShapeTest, TheWrapperGoesInFrontOfWhatEachNodeRunsButNotOfMpiTasks) {
  const std::vector<std::string> agent = {"/usr/bin/bmas", "agent", "exec", "--"};
  EXPECT_THAT(BatchScript(Plan({.gpus = 2}), {"python3", "x.py"}, agent),
              HasSubstr("\n/usr/bin/bmas agent exec -- python3 x.py\n"));
  EXPECT_THAT(BatchScript(Plan({.gpus = 8}), {"true"}, agent),
              HasSubstr("srun --ntasks-per-node=1 --kill-on-bad-exit=1 /usr/bin/bmas agent exec "
                        "-- sh -c "));
  EXPECT_THAT(BatchScript(Plan({.gpus = 8, .launcher = Launcher::kTorchrun}), {"t.py"}, agent),
              HasSubstr("exec -- sh -c 'export NODE_RANK=$SLURM_NODEID; exec torchrun"));
  EXPECT_THAT(BatchScript(Plan({.nodes = 3, .launcher = Launcher::kMpi}), {"./a"}, agent),
              ::testing::Not(HasSubstr("agent")));
}

TEST(JobShapeTest, AHintNamesOnlyAPartitionThatExistsAndAllowsTheJob) {
  Cluster c = Reference();
  auto partition = [](const std::string& name, int cap) {
    Partition p;
    p.name = name;
    p.max_gpus_per_user = cap;
    return p;
  };
  c.partitions = {partition("lab", 4), partition("inference", 0), partition("training", 0)};
  EXPECT_EQ(PartitionThatAllows(c, "lab", 8), "training");
  c.partitions = {partition("lab", 4), partition("inference", 0)};
  EXPECT_EQ(PartitionThatAllows(c, "lab", 8), "");
  c.partitions = {partition("lab", 4), partition("big", 16), partition("small", 2)};
  EXPECT_EQ(PartitionThatAllows(c, "lab", 8), "big");
  EXPECT_EQ(PartitionThatAllows(c, "lab", 20), "");
}

}  // namespace
}  // namespace bmas
