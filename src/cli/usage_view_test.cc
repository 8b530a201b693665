#include "cli/usage_view.h"

#include <gtest/gtest.h>

namespace bmas {
namespace {

UsageView Sample() {
  UsageView v;
  v.tokens.push_back({"alice", "m", "http://127.0.0.1:8001", 3, 120, 45});
  v.tokens.push_back({"alice", "m2", "http://127.0.0.1:8002", 1, 7, 0});
  v.jobs.push_back({"alice", 2, 7200});
  return v;
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

}  // namespace
}  // namespace bmas
