#include "cli/usage_view.h"

#include <gtest/gtest.h>

namespace bmas {
namespace {

UsageView Sample() {
  UsageView v;
  v.tokens.push_back({"alice", "m", "http://127.0.0.1:8001", 3, 120, 45});
  v.tokens.push_back({"alice", "m2", "http://127.0.0.1:8002", 1, 7, 0});
  v.jobs.push_back({"alice", 2, 7200});
  v.wasted_gpu_seconds["alice"] = 5400;
  return v;
}

IdleRecord Idle(const char* user, int64_t job, const char* kind, int64_t wasted) {
  return {job, user, "lab", kind, 1000, 0, 1, wasted, ""};
}

TEST(UsageViewTest, TheAgentsReplyReadsBackAsTheSameRows) {
  auto back = ParseUsageReply(UsageReplyJson(Sample()));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(FormatUsage(*back, true, false), FormatUsage(Sample(), true, false));
  EXPECT_EQ(FormatUsage(*back, false, true), FormatUsage(Sample(), false, true));
  EXPECT_TRUE(ParseUsageReply(UsageReplyJson({})));
}

TEST(UsageViewTest, AReplyOfAnotherShapeIsAnError) {
  for (const char* text : {"", "[]", R"({"tokens":[]})", R"({"tokens":[{"user":1}],"jobs":[]})",
                           R"({"error":"x"})", R"({"tokens":[],"jobs":[{"user":"a"}]})"}) {
    EXPECT_FALSE(ParseUsageReply(text)) << text;
  }
}

TEST(UsageViewTest, TheTableShowsTokensThenGpuHoursPerUser) {
  const std::string table = FormatUsage(Sample(), false, false);
  EXPECT_NE(table.find("alice"), std::string::npos);
  EXPECT_NE(table.find("GPU_HOURS"), std::string::npos);
  EXPECT_NE(table.find("2.000"), std::string::npos);  // 7200 GPU-seconds
  const std::string per_user = FormatUsage(Sample(), true, true);
  EXPECT_NE(per_user.find(R"("prompt_tokens":127)"), std::string::npos) << per_user;
}

TEST(UsageViewTest, WastedGpuTimeCountsEachJobOnceAtItsLargest) {
  const auto wasted = WastedGpuSecondsByUser({
      Idle("alice", 1, "warn", 3600),    // job 1 warned at 1 GPU-hour ...
      Idle("alice", 1, "cancel", 7200),  // ... then cancelled at 2: counts 2, not 3
      Idle("alice", 2, "warn", 1800),    // job 2 warned only
      Idle("bob", 1, "cancel", 600),     // another user's job: their own
  });
  EXPECT_EQ(wasted, (std::map<std::string, int64_t>{{"alice", 9000}, {"bob", 600}}));
  EXPECT_TRUE(WastedGpuSecondsByUser({}).empty());
}

TEST(UsageViewTest, WastedGpuHoursPerUser) {
  const std::string table = FormatUsage(Sample(), false, true);
  EXPECT_NE(table.find("WASTED_GPU_HOURS"), std::string::npos) << table;
  EXPECT_NE(table.find("1.500"), std::string::npos) << table;  // 5400 GPU-seconds
  const std::string json = FormatUsage(Sample(), true, true);
  EXPECT_NE(json.find(R"("wasted_gpu_hours":1.5,"wasted_gpu_seconds":5400)"), std::string::npos)
      << json;
  // A user with wasted GPU time and no finished job yet has a row too.
  UsageView only_wasted;
  only_wasted.wasted_gpu_seconds["carol"] = 3600;
  EXPECT_NE(FormatUsage(only_wasted, false, false).find("carol"), std::string::npos);
}

TEST(UsageViewTest, AnOlderAgentsReplyHasNoWastedTime) {
  auto back = ParseUsageReply(R"({"tokens":[],"jobs":[{"user":"a","jobs":1,"gpu_seconds":9}]})");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(back->wasted_gpu_seconds.empty());
  EXPECT_FALSE(ParseUsageReply(R"({"tokens":[],"jobs":[],"wasted":[{"user":"a"}]})"));
}

}  // namespace
}  // namespace bmas
