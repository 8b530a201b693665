#include "cli/idle_view.h"

#include <gtest/gtest.h>

namespace bmas {
namespace {

// 2025-03-04 14:02:00 UTC.
constexpr int64_t kIdleSince = 1'741'096'920;
constexpr int64_t kHour = 3600;
constexpr int64_t kCancelAfter = 2 * kHour;

IdleRecord Record(int64_t job, const char* kind, int64_t at, int64_t wasted) {
  return {job, "alice", "lab", kind, at, kIdleSince, 2, wasted, std::string(kind) + " reason"};
}

TEST(IdleViewTest, AWarnedRunningJobSaysWhenItWillBeCancelled) {
  const std::vector<IdleRecord> records = {Record(7, "warn", kIdleSince + kHour, 7200)};
  const int64_t now = kIdleSince + kHour + 60;
  auto s = IdleStatusOf(records, 7, kIdleSince - 600, false, kCancelAfter, now);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->cancel_at, kIdleSince + kCancelAfter);
  EXPECT_EQ(IdleNote(*s, now, 0), "idle GPUs since 14:02: cancelled at 16:02 unless used");
  // In local time: one hour east of UTC.
  EXPECT_EQ(IdleNote(*s, now, kHour), "idle GPUs since 15:02: cancelled at 17:02 unless used");
  // A time on another day than now's (00:03 on the 5th, nine hours east) carries its date.
  EXPECT_EQ(IdleNote(*s, now, 9 * kHour),
            "idle GPUs since 2025-03-04 23:02: cancelled at 01:02 unless used");
}

TEST(IdleViewTest, ACancellationWinsOverTheWarningBeforeIt) {
  const std::vector<IdleRecord> records = {Record(7, "cancel", kIdleSince + kCancelAfter, 14400),
                                           Record(7, "warn", kIdleSince + kHour, 7200)};
  const int64_t now = kIdleSince + kCancelAfter + 30;
  for (bool ended : {false, true}) {
    auto s = IdleStatusOf(records, 7, kIdleSince - 600, ended, kCancelAfter, now);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->record.kind, "cancel");
    EXPECT_EQ(IdleNote(*s, now, 0), "cancelled: GPUs idle for 120 min");
  }
}

TEST(IdleViewTest, NothingToShow) {
  const std::vector<IdleRecord> warned = {Record(7, "warn", kIdleSince + kHour, 7200)};
  const int64_t now = kIdleSince + kHour + 60;
  struct Case {
    const char* why;
    int64_t job, start_time;
    bool ended;
    int64_t now;
  } cases[] = {
      {"another job", 8, kIdleSince - 600, false, now},
      {"a record of an earlier run of the same id", 7, kIdleSince + kHour + 1, false, now},
      {"a warned job that ended by itself", 7, kIdleSince - 600, true, now},
      {"a warning long past its cancel time: the GPUs were used again", 7, kIdleSince - 600,
       false, kIdleSince + kCancelAfter + kStaleWarningGraceS + 1},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(IdleStatusOf(warned, c.job, c.start_time, c.ended, kCancelAfter, c.now)) << c.why;
  }
  EXPECT_TRUE(IdleStatusOf(warned, 7, kIdleSince - 600, false, kCancelAfter,
                           kIdleSince + kCancelAfter + kStaleWarningGraceS));
}

TEST(IdleViewTest, TheJsonMemberIsNullOrTheStatus) {
  EXPECT_EQ(IdleStatusJson(std::nullopt, 0, 0), "null");
  const std::vector<IdleRecord> records = {Record(7, "warn", kIdleSince + kHour, 7200)};
  const int64_t now = kIdleSince + kHour;
  auto s = IdleStatusOf(records, 7, 0, false, kCancelAfter, now);
  ASSERT_TRUE(s);
  EXPECT_EQ(IdleStatusJson(s, now, 0),
            R"({"kind":"warn","since":1741096920,"at":1741100520,"cancel_at":1741104120,)"
            R"("wasted_gpu_hours":2.0,"reason":"warn reason",)"
            R"("note":"idle GPUs since 14:02: cancelled at 16:02 unless used"})");
}

TEST(IdleViewTest, TheAgentsReplyReadsBackAsTheSameRecords) {
  const std::vector<IdleRecord> records = {Record(7, "cancel", kIdleSince + kCancelAfter, 14400),
                                           Record(9, "warn", kIdleSince + kHour, 3600)};
  auto back = ParseIdleReply(IdleReplyJson(records));
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ(IdleReplyJson(*back), IdleReplyJson(records));
  EXPECT_EQ((*back)[1].job, 9);
  EXPECT_EQ((*back)[1].gpus, 2);
  for (const char* text : {"", "[]", R"({"error":"x"})", R"({"idle":[{"job":1}]})"}) {
    EXPECT_FALSE(ParseIdleReply(text)) << text;
  }
}

}  // namespace
}  // namespace bmas
