#include "gateway/key_cache.h"

#include <gtest/gtest.h>

#include <string>

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
  cache.Put("b", std::nullopt);
  ASSERT_TRUE(cache.Get("a"));  // a is now the most recent
  cache.Put("c", "carol");
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_FALSE(cache.Get("b"));
  EXPECT_EQ(cache.Get("a"), std::optional<std::optional<std::string>>("alice"));
  EXPECT_EQ(cache.Get("c"), std::optional<std::optional<std::string>>("carol"));
}

TEST(KeyCacheTest, StaysBoundedAndUpdateDoesNotResurrect) {
  KeyCache cache(100);
  for (int i = 0; i < 10000; ++i) cache.Put(std::to_string(i), std::nullopt);
  EXPECT_EQ(cache.size(), 100u);
  EXPECT_EQ(cache.Keys().size(), 100u);
  cache.Update("0", "mallory");
  EXPECT_FALSE(cache.Get("0"));
  cache.Update("9999", "bob");
  EXPECT_EQ(cache.Get("9999"), std::optional<std::optional<std::string>>("bob"));
  cache.Put("9999", std::nullopt);  // replaced in place
  EXPECT_EQ(cache.size(), 100u);
  auto unknown = cache.Get("9999");  // cached as "no such key"
  ASSERT_TRUE(unknown.has_value());
  EXPECT_FALSE(unknown->has_value());
}

}  // namespace
}  // namespace bmas::gateway
