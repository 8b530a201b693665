#include "core/mig.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const MigGpuModel& H100() { return **FindMigGpuModel("h100", 80); }

std::vector<int> StartsOf(const MigGpuModel& model, const std::vector<std::string>& layout) {
  auto placed = PlaceMigLayout(model, layout);
  EXPECT_TRUE(placed.has_value()) << (placed.has_value() ? "" : placed.error().message);
  std::vector<int> starts;
  if (placed.has_value()) {
    for (const MigPlacement& p : *placed) starts.push_back(p.start);
  }
  return starts;
}

std::string WhyNot(const MigGpuModel& model, const std::vector<std::string>& layout) {
  auto placed = PlaceMigLayout(model, layout);
  return placed.has_value() ? "placed" : placed.error().message;
}

TEST(MigTest, ModelsAreFoundByFamilyAndMemory) {
  EXPECT_EQ((*FindMigGpuModel("h100", 80))->name, "H100 80GB");
  EXPECT_EQ((*FindMigGpuModel("H100_SXM", 80))->name, "H100 80GB");
  EXPECT_EQ((*FindMigGpuModel("a100", 40))->name, "A100 40GB");
  EXPECT_EQ((*FindMigGpuModel("a100", 80))->name, "A100 80GB");
  EXPECT_EQ((*FindMigGpuModel("h200", 141))->name, "H200 141GB");
  auto unknown = FindMigGpuModel("l40s", 48);
  ASSERT_FALSE(unknown.has_value());
  EXPECT_THAT(unknown.error().message, HasSubstr("no MIG tables for GPU type \"l40s\""));
  EXPECT_THAT(unknown.error().message, HasSubstr("H100 80GB"));
}

TEST(MigTest, EachModelNamesItsProfilesByItsMemory) {
  EXPECT_NE(FindMigProfile(H100(), "1g.10gb"), nullptr);
  EXPECT_NE(FindMigProfile(H100(), "1g.10gb+me"), nullptr);
  EXPECT_EQ(FindMigProfile(H100(), "1g.18gb"), nullptr);
  const MigGpuModel& h200 = **FindMigGpuModel("h200", 141);
  EXPECT_NE(FindMigProfile(h200, "3g.71gb"), nullptr);
  EXPECT_NE(FindMigProfile(h200, "7g.141gb"), nullptr);
  const MigGpuModel& a100 = **FindMigGpuModel("a100", 40);
  const MigProfile* two_slices = FindMigProfile(a100, "1g.10gb");
  ASSERT_NE(two_slices, nullptr);
  EXPECT_EQ(two_slices->memory_slices, 2);  // on a 40GB part, 1g.10gb is the two-slice 1g
}

// What a real H200 listed on 2026-11-28 (docs/device-runs/2026-11-28-h200-mig: driver
// 580.159.04, `nvidia-smi mig -lgip` and `-lgipp`, NVML's profile info): for each profile, its
// name, compute slices, instances per GPU, NVML profile and the memory slices it may start at.
TEST(MigTest, TheH200TableIsWhatARealH200Lists) {
  struct Seen {
    std::string_view name;
    int compute_slices, max_instances;
    unsigned nvml_profile;
    std::vector<int> starts;
  };
  const std::vector<Seen> seen = {
      {"1g.18gb", 1, 7, 0, {0, 1, 2, 3, 4, 5, 6}}, {"1g.18gb+me", 1, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
      {"1g.35gb", 1, 4, 9, {0, 2, 4, 6}},          {"2g.35gb", 2, 3, 1, {0, 2, 4}},
      {"3g.71gb", 3, 2, 2, {0, 4}},                {"4g.71gb", 4, 1, 3, {0}},
      {"7g.141gb", 7, 1, 4, {0}},
  };
  const MigGpuModel& h200 = **FindMigGpuModel("h200", 141);
  ASSERT_EQ(h200.profiles.size(), seen.size());
  for (const Seen& s : seen) {
    const MigProfile* p = FindMigProfile(h200, s.name);
    ASSERT_NE(p, nullptr) << s.name;
    EXPECT_EQ(p->compute_slices, s.compute_slices) << s.name;
    EXPECT_EQ(p->max_instances, s.max_instances) << s.name;
    EXPECT_EQ(p->nvml_profile, s.nvml_profile) << s.name;
    EXPECT_EQ(std::vector<int>(p->starts.begin(), p->starts.end()), s.starts) << s.name;
  }
}

TEST(MigTest, TheIssuesLayoutFits) {
  // 3g.40gb takes the upper half (slices 4-7), 2g.20gb slices 0-1, the 1g ones 2 and 3.
  EXPECT_THAT(StartsOf(H100(), {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}),
              ElementsAre(4, 0, 2, 3));
}

TEST(MigTest, NvidiasValidCombinationsAllFit) {
  // The full layouts of the guide's list of valid combinations for A100 and H100.
  const std::vector<std::vector<std::string>> valid = {
      {"7g.80gb"},
      {"4g.40gb", "2g.20gb", "1g.10gb"},
      {"4g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"},
      {"3g.40gb", "3g.40gb"},
      {"3g.40gb", "2g.20gb", "1g.10gb"},
      {"3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"},
      {"2g.20gb", "2g.20gb", "3g.40gb"},
      {"2g.20gb", "1g.10gb", "1g.10gb", "3g.40gb"},
      {"2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"},
      {"2g.20gb", "2g.20gb", "1g.10gb", "1g.10gb", "1g.10gb"},
      {"2g.20gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"},
      {"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"},
      {"1g.20gb", "1g.20gb", "1g.20gb", "1g.20gb"},
      {"1g.10gb+me", "1g.10gb", "1g.10gb"},
  };
  for (const auto& layout : valid) {
    EXPECT_EQ(WhyNot(H100(), layout), "placed") << testing::PrintToString(layout);
  }
}

TEST(MigTest, TooManyComputeSlicesIsNamed) {
  EXPECT_EQ(WhyNot(H100(), {"3g.40gb", "3g.40gb", "2g.20gb"}),
            "3g.40gb + 3g.40gb + 2g.20gb needs 8 compute slices; an H100 80GB has 7");
}

TEST(MigTest, TooManyMemorySlicesIsNamed) {
  EXPECT_EQ(WhyNot(H100(), {"1g.20gb", "1g.20gb", "1g.20gb", "1g.20gb", "1g.10gb"}),
            "1g.20gb + 1g.20gb + 1g.20gb + 1g.20gb + 1g.10gb needs 9 memory slices; an H100 "
            "80GB has 8");
}

TEST(MigTest, InstanceCountsAreBounded) {
  EXPECT_EQ(WhyNot(H100(), {"1g.10gb+me", "1g.10gb+me"}),
            "2 instances of 1g.10gb+me; an H100 80GB holds at most 1");
}

TEST(MigTest, A4gNeverSitsBesideA3g) {
  EXPECT_THAT(WhyNot(H100(), {"4g.40gb", "3g.40gb"}),
              HasSubstr("a 4g and a 3g instance never share a GPU"));
}

TEST(MigTest, PlacementsPutTheLargestWhereTheSmallOnesStillFit) {
  // A 1g cannot start at memory slice 7, so four of them beside a 3g need the 3g at slice 4
  // (the guide's combination 3 + 1 + 1 + 1 + 1). On these models every layout within the
  // compute, memory, count and 4g-beside-3g checks has a placement (all were tried), so the
  // search's own refusal guards tables yet to come.
  EXPECT_THAT(StartsOf(H100(), {"3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}),
              ElementsAre(4, 0, 1, 2, 3));
  EXPECT_THAT(StartsOf(H100(), {"1g.20gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb",
                                "1g.10gb"}),
              ElementsAre(6, 0, 1, 2, 3, 4, 5));
}

TEST(MigTest, UnknownProfilesListTheModelsOwn) {
  EXPECT_EQ(WhyNot(H100(), {"3g.30gb"}),
            "\"3g.30gb\" is not a MIG profile of an H100 80GB (it has 1g.10gb, 1g.10gb+me, "
            "1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)");
  EXPECT_THAT(WhyNot(H100(), {}), HasSubstr("empty MIG layout"));
}

TEST(MigTest, CapabilityMinorsFollowTheDriversNumbering) {
  EXPECT_EQ(MigGpuInstanceCapMinor(0, 0), 3);
  EXPECT_EQ(MigComputeInstanceCapMinor(0, 0, 0), 4);
  EXPECT_EQ(MigComputeInstanceCapMinor(0, 0, 7), 11);
  EXPECT_EQ(MigGpuInstanceCapMinor(0, 1), 12);
  EXPECT_EQ(MigGpuInstanceCapMinor(0, 2), 21);  // Slurm's gres.conf example
  EXPECT_EQ(MigComputeInstanceCapMinor(0, 2, 0), 22);
  EXPECT_EQ(MigGpuInstanceCapMinor(1, 0), 138);
}

TEST(MigTest, SlicesAreListedGpuByGpuWithInstanceIdsInLayoutOrder) {
  GpuSpec gpus{.count = 3, .type = "h100", .memory_gb = 80, .mig = true};
  gpus.mig_layouts.push_back({{2}, {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}, 1});
  gpus.mig_layouts.push_back({{0}, {"7g.80gb"}, 2});
  std::vector<MigSlice> slices = MigSlicesOf(gpus);
  ASSERT_EQ(slices.size(), 5u);
  EXPECT_EQ(slices[0].gpu, 0);
  EXPECT_EQ(slices[0].placement.profile->name, "7g.80gb");
  EXPECT_EQ(slices[1].gpu, 2);
  EXPECT_EQ(slices[1].gpu_instance, 1);
  EXPECT_EQ(slices[1].placement.start, 4);
  EXPECT_EQ(slices[4].gpu_instance, 4);
  EXPECT_EQ(slices[4].placement.profile->name, "1g.10gb");
}

TEST(MigTest, ProfileNamesAreToldFromGpuTypes) {
  for (const char* name : {"1g.10gb", "3g.40gb", "7g.141gb", "1g.18gb+me"}) {
    EXPECT_TRUE(IsMigProfileName(name)) << name;
  }
  for (const char* name : {"h100", "", "1g", "g.10gb", "1g.10gb+", "1g.10gbx", "a100_80gb"}) {
    EXPECT_FALSE(IsMigProfileName(name)) << name;
  }
}

}  // namespace
}  // namespace bmas
