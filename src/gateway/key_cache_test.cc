#include "gateway/key_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bmas::gateway {
namespace {

const std::string kGood = "sk-bmas-0123456789ab-" + std::string(48, 'f');

TEST(KeyFormatTest, AcceptsOnlyTheFormBmasKeyCreateMakes) {
  EXPECT_TRUE(IsWellFormedKey(kGood));
  struct Case {
    std::string key;
    const char* why;
  } cases[] = {
      {"", "empty"},
      {kGood + "0", "too long"},
      {kGood.substr(1), "too short"},
      {"sk-xxxx-0123456789ab-" + std::string(48, 'f'), "wrong prefix"},
      {"sk-bmas-0123456789ab_" + std::string(48, 'f'), "no dash between id and secret"},
      {"sk-bmas-0123456789aB-" + std::string(48, 'f'), "upper-case hex"},
      {"sk-bmas-0123456789ab-" + std::string(47, 'f') + "g", "not hex"},
      {std::string(65536, 'a'), "huge"},
  };
  for (const Case& c : cases) EXPECT_FALSE(IsWellFormedKey(c.key)) << c.why;
}

TEST(KeyCacheTest, EvictsTheLeastRecentlyUsed) {
  KeyCache cache(2);
  cache.Put("a", "alice");
  cache.Put("b", "bob");
  ASSERT_TRUE(cache.Get("a"));  // a is now the most recent
  cache.Put("c", "carol");
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_FALSE(cache.Get("b"));
  EXPECT_EQ(cache.Get("a"), "alice");
  EXPECT_EQ(cache.Get("c"), "carol");
}

TEST(KeyCacheTest, StaysBoundedAndUpdateDoesNotResurrect) {
  KeyCache cache(100);
  for (int i = 0; i < 10000; ++i) cache.Put(std::to_string(i), "u" + std::to_string(i));
  EXPECT_EQ(cache.size(), 100u);
  EXPECT_EQ(cache.Keys().size(), 100u);
  cache.Update("0", "mallory");
  EXPECT_FALSE(cache.Get("0"));
  cache.Update("9999", "bob");
  EXPECT_EQ(cache.Get("9999"), "bob");
}

TEST(KeyCacheTest, ARevokedKeyLeavesTheCacheAndNoNegativeAnswerIsKept) {
  KeyCache cache(100);
  cache.Put("a", "alice");
  cache.Put("b", "bob");
  cache.Update("a", std::nullopt);  // the refresh found it revoked
  EXPECT_FALSE(cache.Get("a"));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.Keys(), std::vector<std::string>{"b"});
  cache.Update("zzz", std::nullopt);  // never cached: nothing happens
  EXPECT_EQ(cache.size(), 1u);
  cache.Put("a", "alice");  // issued again later: cached again
  EXPECT_EQ(cache.Get("a"), "alice");
}

TEST(FailedKeyLimiterTest, StopsLookUpsFromAnAddressPastItsFailuresUntilTheWindowEnds) {
  FailedKeyLimiter limiter(3, 60, 100);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limiter.Allowed("10.0.0.1", 100 + i)) << i;
    limiter.RecordFailure("10.0.0.1", 100 + i);
  }
  EXPECT_FALSE(limiter.Allowed("10.0.0.1", 103));
  EXPECT_DOUBLE_EQ(limiter.RetryAfter("10.0.0.1", 103), 57);
  EXPECT_TRUE(limiter.Allowed("10.0.0.2", 103));  // other addresses are not affected
  EXPECT_FALSE(limiter.Allowed("10.0.0.1", 159.9));
  EXPECT_TRUE(limiter.Allowed("10.0.0.1", 160));  // a new window
  limiter.RecordFailure("10.0.0.1", 160);
  EXPECT_TRUE(limiter.Allowed("10.0.0.1", 161));
}

TEST(FailedKeyLimiterTest, TracksABoundedNumberOfAddresses) {
  FailedKeyLimiter limiter(2, 60, 10);
  for (int i = 0; i < 1000; ++i) limiter.RecordFailure("a" + std::to_string(i), i * 0.001);
  EXPECT_EQ(limiter.size(), 10u);
  // The newest stay, counted; the oldest went.
  limiter.RecordFailure("a999", 1);
  EXPECT_FALSE(limiter.Allowed("a999", 1));
  EXPECT_TRUE(limiter.Allowed("a0", 1));
  // Expired windows go first when full.
  FailedKeyLimiter expiring(2, 10, 2);
  expiring.RecordFailure("x", 0);
  expiring.RecordFailure("x", 0);
  expiring.RecordFailure("y", 5);
  expiring.RecordFailure("y", 5);
  expiring.RecordFailure("z", 11);  // x's window ended: x goes, y stays
  EXPECT_FALSE(expiring.Allowed("y", 11));
  EXPECT_EQ(expiring.size(), 2u);
}

}  // namespace
}  // namespace bmas::gateway
