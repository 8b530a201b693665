#include "slurm/gres_slots.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace bmas::slurm {
namespace {

using ::testing::HasSubstr;

// gres.conf as bmas writes it for examples/cluster-local-mig.toml (tests/golden/slurm/local-mig).
std::string GoldenGresConf() {
  std::ifstream in(std::string(BMAS_SOURCE_DIR) + "/tests/golden/slurm/local-mig/gres.conf");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(GresSlotsTest, EachGresIndexOfANodeIsItsWholeGpuOrItsSlice) {
  auto slots = GpuGresSlots(GoldenGresConf(), "oss02");
  ASSERT_TRUE(slots) << slots.error().message;
  // GPUs 0 and 1 whole; GPU 2 split into four, GPU 3 into seven.
  ASSERT_EQ(slots->size(), 2u + 4u + 7u);
  EXPECT_EQ((*slots)[0].gpu, 0);
  EXPECT_EQ((*slots)[0].gpu_instance, -1);
  EXPECT_EQ((*slots)[1].gpu, 1);
  EXPECT_EQ((*slots)[2].gpu, 2);
  EXPECT_EQ((*slots)[2].gpu_instance, 1);
  EXPECT_EQ((*slots)[5].gpu_instance, 4);
  EXPECT_EQ((*slots)[5].gpu_file, "/dev/bmas-local/oss02/nvidia2");
  EXPECT_EQ((*slots)[5].cap_files,
            (std::vector<std::string>{"/dev/bmas-local/oss02/nvidia-caps/nvidia-cap309",
                                      "/dev/bmas-local/oss02/nvidia-caps/nvidia-cap310"}));
  EXPECT_TRUE((*slots)[0].cap_files.empty());
  EXPECT_EQ((*slots)[6].gpu, 3);
  EXPECT_EQ((*slots)[12].gpu_instance, 7);
  auto whole = GpuGresSlots(GoldenGresConf(), "oss01");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->size(), 4u);
  EXPECT_TRUE(GpuGresSlots(GoldenGresConf(), "oss09")->empty());
  auto bad = GpuGresSlots("NodeName=n1 Name=gpu File=/dev/null\n", "n1");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("gres.conf:1: node n1: no /dev/nvidiaN"));
}

// Slurm numbers a node's gres type by type (observed with 22.05.8): GPU 3's 2g slices come
// right after GPU 2's, before any 1g, whatever the file's order.
TEST(GresSlotsTest, IndexesGoTypeByTypeInTheOrderTypesFirstAppear) {
  const std::string conf =
      "NodeName=n1 Name=gpu Type=h100 File=/dev/nvidia0\n"
      "NodeName=n1 Name=gpu Type=2g.20gb MultipleFiles=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap156\n"
      "NodeName=n1 Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap165\n"
      "NodeName=n1 Name=gpu Type=2g.20gb MultipleFiles=/dev/nvidia2,/dev/nvidia-caps/nvidia-cap291\n"
      "NodeName=n1 Name=gpu Type=h100 File=/dev/nvidia3\n";
  auto slots = GpuGresSlots(conf, "n1");
  ASSERT_TRUE(slots) << slots.error().message;
  ASSERT_EQ(slots->size(), 5u);
  std::vector<std::pair<std::string, int>> order;
  for (const GresSlot& s : *slots) order.emplace_back(s.type, s.gpu);
  EXPECT_EQ(order, (std::vector<std::pair<std::string, int>>{
                       {"h100", 0}, {"h100", 3}, {"2g.20gb", 1}, {"2g.20gb", 2}, {"1g.10gb", 1}}));
  EXPECT_EQ((*slots)[2].gpu_instance, 2);  // gpu1/gi2: 3 + 135 + 18 = 156
  EXPECT_EQ((*slots)[4].gpu_instance, 3);
}

// A shared GPU is a gpu line of its own type beside a shard line on its file: the shard line is
// no gpu index, and a shard job's SLURM_JOB_GPUS (its GPU's gpu index) maps to the GPU. Observed
// with real Slurm: shared GPUs 0 and 2 before whole GPUs 1 and 3 are indexes 0 and 1.
TEST(GresSlotsTest, ASharedGpuIsOneIndexAndItsShardsNone) {
  const std::string conf =
      "NodeName=oss03 Name=gpu Type=l40s-shared File=/dev/x/oss03/nvidia0\n"
      "NodeName=oss03 Name=shard Count=4 File=/dev/x/oss03/nvidia0\n"
      "NodeName=oss03 Name=gpu Type=l40s File=/dev/x/oss03/nvidia1\n"
      "NodeName=oss03 Name=gpu Type=l40s-shared File=/dev/x/oss03/nvidia2\n"
      "NodeName=oss03 Name=shard Count=4 File=/dev/x/oss03/nvidia2\n"
      "NodeName=oss03 Name=gpu Type=l40s File=/dev/x/oss03/nvidia3\n";
  auto slots = GpuGresSlots(conf, "oss03");
  ASSERT_TRUE(slots) << slots.error().message;
  ASSERT_EQ(slots->size(), 4u);
  auto job = JobGresOf(*slots, {1});
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->gpus, (std::vector<int>{2}));
  EXPECT_TRUE(job->caps.empty());
  EXPECT_EQ(JobGresOf(*slots, {2, 3})->gpus, (std::vector<int>{1, 3}));
}

TEST(GresSlotsTest, AJobsGresIndexesAreItsGpusAndItsSlicesCapabilities) {
  auto slots = GpuGresSlots(GoldenGresConf(), "oss02");
  ASSERT_TRUE(slots);
  // Two 1g.10gb of GPU 2 (indexes 4 and 5): GPU 2 once, and four capabilities.
  auto two = JobGresOf(*slots, {5, 4});
  ASSERT_TRUE(two) << two.error().message;
  EXPECT_EQ(two->gpus, std::vector<int>{2});
  ASSERT_EQ(two->caps.size(), 4u);
  EXPECT_EQ(two->caps[0], (std::pair<int, std::string>{
                              2, "/dev/bmas-local/oss02/nvidia-caps/nvidia-cap309"}));
  auto whole = JobGresOf(*slots, {0, 1});
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->gpus, (std::vector<int>{0, 1}));
  EXPECT_TRUE(whole->caps.empty());
  EXPECT_FALSE(JobGresOf(*slots, {13}));
}

TEST(GresSlotsTest, SlicesAreNamedByMigUuidAndWholeGpusAloneAreLeftToSlurm) {
  auto slots = GpuGresSlots(GoldenGresConf(), "oss02");
  ASSERT_TRUE(slots);
  GpuReading g0, g2;
  g0.index = 0;
  g0.uuid = "GPU-0";
  g2.index = 2;
  g2.uuid = "GPU-2";
  g2.mig_enabled = true;
  for (int gi = 1; gi <= 4; ++gi) {
    MigDeviceReading m;
    m.gpu_instance = gi;
    m.uuid = "MIG-2-" + std::to_string(gi);
    g2.mig_devices.push_back(m);
  }
  // SLURM_STEP_GPUS=4,5: GPU 2's two 1g.10gb, its GPU instances 3 and 4.
  auto both = MigVisibleDevices(*slots, {4, 5}, {g0, g2});
  ASSERT_TRUE(both) << both.error().message;
  EXPECT_EQ(*both, "MIG-2-3,MIG-2-4");
  EXPECT_EQ(*MigVisibleDevices(*slots, {0}, {g0, g2}), "");  // a whole GPU: Slurm's value
  // GPU 3's slices have no reading: the caller keeps Slurm's value and says why.
  auto missing = MigVisibleDevices(*slots, {6}, {g0, g2});
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, HasSubstr("NVML lists no GPU 3"));
  g2.mig_devices.pop_back();
  missing = MigVisibleDevices(*slots, {5}, {g0, g2});
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, HasSubstr("no MIG device of GPU 2 with GPU instance 4"));
  EXPECT_FALSE(MigVisibleDevices(*slots, {40}, {g0, g2}));
}

}  // namespace
}  // namespace bmas::slurm
