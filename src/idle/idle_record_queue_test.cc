// The agent's records for a store it cannot reach: kept in order, written again later, none
// lost while the queue has room, the oldest dropped (and counted) past it.

#include "idle/idle_record_queue.h"

#include <gtest/gtest.h>

#include <vector>

namespace bmas {
namespace {

IdleRecord Record(int64_t job) {
  IdleRecord r;
  r.job = job;
  r.user = "alice";
  r.kind = "warn";
  return r;
}

TEST(IdleRecordQueueTest, RecordsWaitForTheStoreAndReachItInOrder) {
  IdleRecordQueue q;
  std::vector<int64_t> stored;
  bool up = false;
  const auto write = [&](const IdleRecord& r) -> Result<void> {
    if (!up) return Error{ErrorCode::kUnavailable, "cannot reach PostgreSQL at mgs1:5432/bmas"};
    stored.push_back(r.job);
    return {};
  };
  q.Add(Record(1));
  auto first = q.Flush(1000, write);
  ASSERT_FALSE(first);
  EXPECT_NE(first.error().message.find("mgs1"), std::string::npos);
  q.Add(Record(2));
  EXPECT_EQ(q.size(), 2u);
  EXPECT_FALSE(q.Due(1000 + IdleRecordQueue::kRetryAfterSeconds - 1));
  EXPECT_TRUE(q.Due(1000 + IdleRecordQueue::kRetryAfterSeconds));
  up = true;
  auto second = q.Flush(1030, write);
  ASSERT_TRUE(second);
  EXPECT_EQ(*second, 2u);
  EXPECT_EQ(stored, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(q.size(), 0u);
  EXPECT_FALSE(q.Due(1030));
  EXPECT_EQ(q.dropped(), 0);
}

TEST(IdleRecordQueueTest, AFailureMidwayKeepsTheRestAndAFullQueueDropsTheOldest) {
  IdleRecordQueue q(3);
  for (int64_t job = 1; job <= 5; ++job) q.Add(Record(job));
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(q.dropped(), 2);
  std::vector<int64_t> stored;
  auto flushed = q.Flush(0, [&](const IdleRecord& r) -> Result<void> {
    if (r.job == 4) return Error{ErrorCode::kUnavailable, "the connection was lost"};
    stored.push_back(r.job);
    return {};
  });
  EXPECT_FALSE(flushed);
  EXPECT_EQ(stored, std::vector<int64_t>{3});
  EXPECT_EQ(q.size(), 2u);  // 4 and 5 wait
}

}  // namespace
}  // namespace bmas
