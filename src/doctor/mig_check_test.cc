#include "doctor/mig_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas::doctor {
namespace {

using ::testing::HasSubstr;

// oss02 of examples/cluster-local-mig.toml: GPU 2 split 3g+2g+1g+1g, GPU 3 into seven 1g.
Node MigNode() {
  Node n;
  n.name = "oss02";
  n.gpus.count = 4;
  n.gpus.type = "h100";
  n.gpus.memory_gb = 80;
  n.gpus.mig = true;
  n.gpus.mig_layouts = {{{2}, {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}, 1},
                        {{3}, std::vector<std::string>(7, "1g.10gb"), 1}};
  return n;
}

GpuReading Gpu(int index, const std::vector<std::string>& profiles = {}, bool mig = false) {
  GpuReading g;
  g.index = index;
  g.mig_capable = true;
  g.mig_enabled = mig || !profiles.empty();
  for (size_t k = 0; k < profiles.size(); ++k) {
    MigDeviceReading m;
    m.index = static_cast<int>(k);
    m.gpu_instance = static_cast<int>(k) + 1;
    m.profile = profiles[k];
    g.mig_devices.push_back(m);
  }
  return g;
}

std::vector<GpuReading> AsInventory() {
  return {Gpu(0), Gpu(1), Gpu(2, {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}),
          Gpu(3, std::vector<std::string>(7, "1g.10gb"))};
}

TEST(MigLayoutCheckTest, GpusAsTheInventorySplitsThemPass) {
  const Node node = MigNode();
  const Check c = MigLayoutCheck(AsInventory(), {"cluster.toml", "oss02", &node});
  EXPECT_TRUE(c.ok) << c.found;
  EXPECT_EQ(c.kind, CheckKind::kBmas);
  EXPECT_THAT(c.found, HasSubstr("GPU 0: whole; GPU 1: whole; GPU 2: 3g.40gb + 2g.20gb + 1g.10gb "
                                 "+ 1g.10gb; GPU 3: 1g.10gb + "));
  EXPECT_EQ(c.fix, "");
}

TEST(MigLayoutCheckTest, EachWayAGpuDiffersIsNamedWithTheCommandsThatFixIt) {
  const Node node = MigNode();
  std::vector<GpuReading> gpus = AsInventory();
  gpus[0] = Gpu(0, {}, /*mig=*/true);                     // MIG on, whole in the inventory
  gpus[2] = Gpu(2);                                      // MIG off, split in the inventory
  gpus[3] = Gpu(3, {"3g.40gb", "3g.40gb"});              // another layout
  const Check c = MigLayoutCheck(gpus, {"cluster.toml", "oss02", &node});
  EXPECT_FALSE(c.ok);
  EXPECT_THAT(c.found, HasSubstr("GPU 0: MIG on (no MIG device) but whole in the inventory"));
  EXPECT_THAT(c.found, HasSubstr("GPU 2: MIG off; the inventory splits it into 3g.40gb + "
                                 "2g.20gb + 1g.10gb + 1g.10gb"));
  EXPECT_THAT(c.found, HasSubstr("GPU 3: 3g.40gb (GI 1) + 3g.40gb (GI 2); the inventory says "
                                 "1g.10gb + "));
  EXPECT_THAT(c.fix, HasSubstr("nvidia-smi -i 0 -mig 0"));
  EXPECT_THAT(c.fix, HasSubstr("nvidia-smi -i 2 -mig 1 && nvidia-smi mig -i 2 -cgi "
                               "3g.40gb,2g.20gb,1g.10gb,1g.10gb -C"));
  EXPECT_THAT(c.fix, HasSubstr("nvidia-smi mig -i 3 -dci && nvidia-smi mig -i 3 -dgi && "
                               "nvidia-smi mig -i 3 -cgi 1g.10gb,1g.10gb,"));
}

TEST(MigLayoutCheckTest, TheRightProfilesUnderOtherInstanceIdsFail) {
  // gres.conf fences GPU instance 1 as the 3g.40gb: here it is the 2g.20gb.
  const Node node = MigNode();
  std::vector<GpuReading> gpus = AsInventory();
  gpus[2] = Gpu(2, {"2g.20gb", "3g.40gb", "1g.10gb", "1g.10gb"});
  const Check c = MigLayoutCheck(gpus, {"cluster.toml", "oss02", &node});
  EXPECT_FALSE(c.ok);
  EXPECT_THAT(c.found, HasSubstr("the same profiles, other GPU instance ids"));
}

TEST(MigLayoutCheckTest, ANodeTheInventoryLacksOrNoDriverFails) {
  const Check missing = MigLayoutCheck(AsInventory(), {"cluster.toml", "gpu-7", nullptr});
  EXPECT_FALSE(missing.ok);
  EXPECT_EQ(missing.found, "cluster.toml lists no node gpu-7");
  EXPECT_THAT(missing.fix, HasSubstr("--node NAME"));
  const Node node = MigNode();
  const Check none = MigLayoutCheck(Error{ErrorCode::kUnavailable, "no NVIDIA driver here"},
                                    {"cluster.toml", "oss02", &node});
  EXPECT_FALSE(none.ok);
  EXPECT_THAT(none.found, HasSubstr("no GPU/driver: no NVIDIA driver here"));
  // A node without layouts needs no driver for this check.
  Node whole = node;
  whole.gpus.mig_layouts.clear();
  EXPECT_TRUE(MigLayoutCheck(Error{ErrorCode::kUnavailable, "none"},
                             {"cluster.toml", "oss02", &whole})
                  .ok);
}

}  // namespace
}  // namespace bmas::doctor
