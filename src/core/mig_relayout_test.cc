#include "core/mig_relayout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNow = 1'800'000'000;

const std::vector<std::string> kSevenOnes(7, "1g.10gb");
const std::vector<std::string> kMixed = {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"};
const std::vector<std::string> kTwoThrees = {"3g.40gb", "3g.40gb"};

RelayoutSettings Settings() {
  RelayoutSettings s;
  s.candidates = {{}, kSevenOnes, kMixed, kTwoThrees};
  s.min_wait_s = 30;
  s.hold_s = 300;
  return s;
}

FlexGpu Gpu(const std::string& node, std::vector<std::string> layout, bool busy = false,
            int64_t changed_at = 0) {
  return FlexGpu{node, 3, std::move(layout), busy, changed_at};
}

PendingSlices Waiting(const std::string& profile, int count = 1, int64_t waited_s = 60) {
  return PendingSlices{profile, count, kNow - waited_s};
}

TEST(MigRelayoutTest, AnEmptyQueueChangesNothing) {
  RelayoutInput in;
  in.gpus = {Gpu("oss03-gpu3", {}), Gpu("oss02-gpu3", kSevenOnes)};
  EXPECT_TRUE(DecideRelayouts(Settings(), in, kNow).empty());
}

TEST(MigRelayoutTest, AnIdleGpuTakesTheLayoutThatServesWhatWaits) {
  RelayoutInput in;
  in.gpus = {Gpu("oss03-gpu3", {})};
  in.pending = {Waiting("1g.10gb"), Waiting("1g.10gb"), Waiting("1g.10gb", 1, 45)};
  auto d = DecideRelayouts(Settings(), in, kNow);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].node, "oss03-gpu3");
  EXPECT_EQ(d[0].gpu, 3);
  EXPECT_TRUE(d[0].from.empty());
  EXPECT_EQ(d[0].to, kSevenOnes);
  EXPECT_THAT(d[0].why, HasSubstr("3 pending 1g.10gb requests (waiting up to 60 s)"));
  EXPECT_EQ(LayoutText(d[0].to), "1g.10gb + 1g.10gb + 1g.10gb + 1g.10gb + 1g.10gb + 1g.10gb + 1g.10gb");
  EXPECT_EQ(LayoutText(d[0].from), "whole");
}

TEST(MigRelayoutTest, AGpuWithAJobIsNeverRepartitioned) {
  RelayoutInput in;
  in.gpus = {Gpu("oss03-gpu3", {}, /*busy=*/true)};
  in.pending = {Waiting("1g.10gb", 1), Waiting("1g.10gb", 1)};
  EXPECT_TRUE(DecideRelayouts(Settings(), in, kNow).empty());
}

TEST(MigRelayoutTest, ARecentChangeHoldsAndServesWithWhatItHas) {
  RelayoutInput in;
  // Changed 100 s ago to seven 1g: it stays, and serves the 1g demand, so the older GPU is not
  // re-laid for it as well.
  in.gpus = {Gpu("oss02-gpu3", kSevenOnes, false, kNow - 100), Gpu("oss03-gpu3", {})};
  in.pending = {Waiting("3g.40gb"), Waiting("1g.10gb"), Waiting("1g.10gb")};
  auto d = DecideRelayouts(Settings(), in, kNow);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].node, "oss03-gpu3");
  // 3g: two layouts give one 3g or two; the mixed one also serves nothing more (the 1g are
  // served), so the smaller layout wins.
  EXPECT_EQ(d[0].to, kTwoThrees);
}

TEST(MigRelayoutTest, DemandThatHasNotWaitedOrIsServedElsewhereChangesNothing) {
  RelayoutInput in;
  in.gpus = {Gpu("oss03-gpu3", {})};
  in.pending = {Waiting("1g.10gb", 2, /*waited_s=*/10)};
  EXPECT_TRUE(DecideRelayouts(Settings(), in, kNow).empty());
  in.pending = {Waiting("1g.10gb", 2)};
  in.free_elsewhere["1g.10gb"] = 2;
  EXPECT_TRUE(DecideRelayouts(Settings(), in, kNow).empty());
  in.free_elsewhere["1g.10gb"] = 1;
  EXPECT_EQ(DecideRelayouts(Settings(), in, kNow).size(), 1u);
}

TEST(MigRelayoutTest, TwoIdleGpusSplitTheDemandAndWholeGpuJobsGetAWholeOne) {
  RelayoutInput in;
  in.gpus = {Gpu("oss02-gpu3", kMixed), Gpu("oss03-gpu3", kMixed, false, kNow - 1000)};
  in.pending = {Waiting(kWholeGpu), Waiting("1g.10gb", 5), Waiting(kWholeGpu, 2)};
  auto d = DecideRelayouts(Settings(), in, kNow);
  ASSERT_EQ(d.size(), 2u);
  // The GPU changed longest ago (never) goes first and takes the larger demand.
  EXPECT_EQ(d[0].node, "oss02-gpu3");
  EXPECT_EQ(d[0].to, kSevenOnes);
  EXPECT_EQ(d[1].node, "oss03-gpu3");
  EXPECT_TRUE(d[1].to.empty());  // one whole GPU; the job of two never fits a GPU node
  EXPECT_THAT(d[1].why, HasSubstr("1 pending whole-GPU request"));
}

TEST(MigRelayoutTest, ARequestOfSeveralSlicesIsServedWhollyOnOneGpuOrNotAtAll) {
  RelayoutInput in;
  in.gpus = {Gpu("oss01-gpu3", {}), Gpu("oss02-gpu3", {})};
  // Three 1g notebooks, then a fine-tune on two 3g slices: the mixed layout would serve two of
  // the notebooks and half the fine-tune, which is nothing to it.
  in.pending = {Waiting("1g.10gb", 1, 90), Waiting("1g.10gb", 1, 80), Waiting("1g.10gb", 1, 70),
                Waiting("3g.40gb", 2, 60)};
  auto d = DecideRelayouts(Settings(), in, kNow);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].to, kSevenOnes);
  EXPECT_EQ(d[1].to, kTwoThrees);
  EXPECT_THAT(d[1].why, HasSubstr("2 pending 3g.40gb requests (waiting up to 60 s)"));
}

TEST(MigRelayoutTest, ATieKeepsThePresentLayout) {
  RelayoutInput in;
  in.gpus = {Gpu("oss03-gpu3", kMixed)};
  in.pending = {Waiting("1g.10gb", 2)};
  EXPECT_TRUE(DecideRelayouts(Settings(), in, kNow).empty());
}

TEST(MigRelayoutTest, LayoutsReadAsWrittenInTheInventory) {
  EXPECT_EQ(*ParseLayoutText("whole"), std::vector<std::string>{});
  EXPECT_EQ(*ParseLayoutText("7x1g.10gb"), kSevenOnes);
  EXPECT_EQ(*ParseLayoutText("3g.40gb + 2g.20gb + 2x1g.10gb"), kMixed);
  EXPECT_EQ(*ParseLayoutText("1g.10gb+me+1g.10gb"),
            (std::vector<std::string>{"1g.10gb+me", "1g.10gb"}));
  EXPECT_EQ(*ParseLayoutText(LayoutText(kMixed)), kMixed);
  for (const char* bad : {"", "h100", "0x1g.10gb", "8x1g.10gb", "3g.40gb++1g.10gb", "x1g.10gb"}) {
    auto parsed = ParseLayoutText(bad);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_THAT(parsed.error().message, HasSubstr("a layout is \"whole\" or profiles")) << bad;
  }
}

}  // namespace
}  // namespace bmas
