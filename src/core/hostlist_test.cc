#include "core/hostlist.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Expand(std::string_view hostlist) {
  auto r = ExpandHostlist(hostlist);
  EXPECT_TRUE(r) << hostlist << ": " << (r ? "" : r.error().message);
  return r ? *r : std::vector<std::string>{};
}

TEST(HostlistTest, ExpandsRangesWithTheLowerBoundsWidth) {
  EXPECT_THAT(Expand("oss[01-03]"), ElementsAre("oss01", "oss02", "oss03"));
  EXPECT_THAT(Expand("n[9-11]"), ElementsAre("n9", "n10", "n11"));
  EXPECT_THAT(Expand("n[008-010]"), ElementsAre("n008", "n009", "n010"));
  EXPECT_EQ(Expand("oss[01-12]").size(), 12u);
  EXPECT_EQ(Expand("oss[01-12]").back(), "oss12");
}

TEST(HostlistTest, ExpandsListsSuffixesAndSeveralBrackets) {
  EXPECT_THAT(Expand("mgs1"), ElementsAre("mgs1"));
  EXPECT_THAT(Expand("mgs1,oss[1-2]"), ElementsAre("mgs1", "oss1", "oss2"));
  EXPECT_THAT(Expand("gpu[1,3-4]-ib"), ElementsAre("gpu1-ib", "gpu3-ib", "gpu4-ib"));
  EXPECT_THAT(Expand("r[1-2]n[1-2]"), ElementsAre("r1n1", "r1n2", "r2n1", "r2n2"));
  EXPECT_THAT(Expand("10.0.0.[11-13]"), ElementsAre("10.0.0.11", "10.0.0.12", "10.0.0.13"));
}

TEST(HostlistTest, RejectsMalformedLists) {
  struct Case {
    const char* hostlist;
    const char* error;
  };
  for (const Case& c :
       {Case{"", "an empty name"}, Case{"a,,b", "an empty name"}, Case{"n[3-1]", "runs backwards"},
        Case{"n[1-", "unbalanced"}, Case{"n[1-2", "unbalanced"}, Case{"n1-2]", "']' without '['"},
        Case{"n[a-b]", "'a' is not a number"}, Case{"n[]", "is not a number"},
        Case{"n[1-2][", "unbalanced"}, Case{"n[0-99999999]", "more than"},
        Case{"a b", "no spaces"}}) {
    auto r = ExpandHostlist(c.hostlist);
    ASSERT_FALSE(r) << c.hostlist;
    EXPECT_THAT(r.error().message, HasSubstr(c.error)) << c.hostlist;
    EXPECT_THAT(r.error().message, HasSubstr(std::string("'") + c.hostlist + "'"));
  }
}

TEST(HostlistTest, BoundsTheNamesOfAWholeList) {
  // The bound holds for a bracket of many ranges (a few kilobytes of "0-65000," would
  // otherwise ask for tens of millions of names) and for plain names after a full bracket.
  std::string many = "n[";
  for (int i = 0; i < 500; ++i) many += "0-65000,";
  many += "1]";
  for (const std::string& hostlist :
       {many, std::string("n[0-40000,0-40000]"), std::string("n[0-65535],last")}) {
    auto r = ExpandHostlist(hostlist);
    ASSERT_FALSE(r) << hostlist.substr(0, 40);
    EXPECT_THAT(r.error().message, HasSubstr("more than 65536 names"));
  }
  auto full = ExpandHostlist("n[0-65534],last");
  ASSERT_TRUE(full);
  EXPECT_EQ(full->size(), kMaxHostlistNames);
}

TEST(HostlistTest, BoundsTheLengthOfEachName) {
  // Seen while fuzzing (1 GB of memory): a 4 KB prefix before "[0-65535]" made 256 MB of names.
  const std::string longest(kMaxHostNameBytes - 5, 'a');
  auto ok = ExpandHostlist(longest + "[0-65535]");
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->size(), kMaxHostlistNames);
  for (const std::string& hostlist :
       {longest + "x[0-65535]", longest + "[0-1]abcdef", std::string(kMaxHostNameBytes + 1, 'a')}) {
    auto r = ExpandHostlist(hostlist);
    ASSERT_FALSE(r) << hostlist.size();
    EXPECT_THAT(r.error().message, HasSubstr("a name longer than 253 bytes"));
  }
}

TEST(HostlistTest, CompressesRunsAndKeepsOrder) {
  EXPECT_EQ(CompressHostlist(Expand("oss[01-12]")), "oss[01-12]");
  EXPECT_EQ(CompressHostlist({"oss01", "oss02", "oss04"}), "oss[01-02,04]");
  EXPECT_EQ(CompressHostlist({"n9", "n10"}), "n[9-10]");
  EXPECT_EQ(CompressHostlist({"leaf1"}), "leaf1");
  EXPECT_EQ(CompressHostlist({"mgs", "oss1", "oss2", "ib"}), "mgs,oss[1-2],ib");
  EXPECT_EQ(CompressHostlist({"oss2", "oss1"}), "oss[2,1]");
  EXPECT_EQ(CompressHostlist({}), "");
}

TEST(HostlistTest, CompressedListsExpandToTheSameNames) {
  for (const char* list :
       {"oss[01-12]", "n[9-11],x", "a[1,3,5-7]b", "n[098-101]", "r[1-2]n[1-3]"}) {
    std::vector<std::string> names = Expand(list);
    EXPECT_EQ(Expand(CompressHostlist(names)), names) << list << " -> " << CompressHostlist(names);
  }
}

}  // namespace
}  // namespace bmas
