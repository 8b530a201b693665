#include "common/config_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <toml++/toml.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace bmas {
namespace {

using testing::HasSubstr;

constexpr char kSource[] = "test.toml";

// Parses `text` as the file "test.toml".
toml::table Parse(std::string_view text, std::string_view source) {
  return toml::parse(text, source);
}

// The ConfigError message thrown by `fn`, or "" when it does not throw.
std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigTableTest, MissingKeysGiveFallbacks) {
  toml::table root = Parse("", kSource);
  ConfigTable t(root, kSource, "");
  EXPECT_EQ(t.Int("i", 42, 0, 100), 42);
  EXPECT_DOUBLE_EQ(t.Double("d", 1.5, 0, 10), 1.5);
  EXPECT_TRUE(t.Bool("b", true));
  EXPECT_EQ(t.String("s", "dflt"), "dflt");
  EXPECT_TRUE(t.IntArray("a", 0, 10).empty());
  EXPECT_FALSE(t.Table("sub").has_value());
  EXPECT_NO_THROW(t.RejectUnknownKeys());
}

TEST(ConfigTableTest, ReadsPresentValues) {
  toml::table root = Parse(
      "i = 7\n"
      "d = 2.5\n"
      "d_from_int = 3\n"
      "b = false\n"
      "s = \"fcfs\"\n"
      "a = [1, 2, 3]\n",
      kSource);
  ConfigTable t(root, kSource, "");
  EXPECT_EQ(t.Int("i", 0, 0, 100), 7);
  EXPECT_DOUBLE_EQ(t.Double("d", 0, 0, 10), 2.5);
  EXPECT_DOUBLE_EQ(t.Double("d_from_int", 0, 0, 10), 3.0);
  EXPECT_FALSE(t.Bool("b", true));
  EXPECT_EQ(t.String("s", ""), "fcfs");
  EXPECT_EQ(t.IntArray("a", 0, 10), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_NO_THROW(t.RejectUnknownKeys());
}

TEST(ConfigTableTest, RangeBoundsAreInclusive) {
  toml::table root = Parse("lo = 1\nhi = 9\ndlo = 0.5\ndhi = 2.0\n", kSource);
  ConfigTable t(root, kSource, "");
  EXPECT_EQ(t.Int("lo", 0, 1, 9), 1);
  EXPECT_EQ(t.Int("hi", 0, 1, 9), 9);
  EXPECT_DOUBLE_EQ(t.Double("dlo", 0, 0.5, 2), 0.5);
  EXPECT_DOUBLE_EQ(t.Double("dhi", 0, 0.5, 2), 2.0);
}

struct BadValueCase {
  std::string name;
  std::string value;  // TOML value written as `key = VALUE` on line 3
  std::function<void(ConfigTable&)> read;
  std::string what;  // expected in the message after "test.toml:3: key: "
};

class ConfigTableBadValueTest : public testing::TestWithParam<BadValueCase> {};

TEST_P(ConfigTableBadValueTest, ErrorNamesFileLineAndKey) {
  const BadValueCase& c = GetParam();
  toml::table root = Parse("# comment\n\nkey = " + c.value + "\n", kSource);
  ConfigTable t(root, kSource, "");
  std::string error = ErrorOf([&] { c.read(t); });
  EXPECT_THAT(error, HasSubstr("test.toml:3: key: "));
  EXPECT_THAT(error, HasSubstr(c.what));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConfigTableBadValueTest,
    testing::Values(
        BadValueCase{"IntGivenString", "\"7\"", [](ConfigTable& t) { t.Int("key", 0, 0, 10); },
                     "expected an integer in 0..10"},
        BadValueCase{"IntGivenFloat", "1.5", [](ConfigTable& t) { t.Int("key", 0, 0, 10); },
                     "expected an integer"},
        BadValueCase{"IntAboveMax", "11", [](ConfigTable& t) { t.Int("key", 0, 0, 10); },
                     "11 is out of range: expected 0..10"},
        BadValueCase{"IntBelowMin", "-1", [](ConfigTable& t) { t.Int("key", 0, 0, 10); },
                     "out of range"},
        BadValueCase{"DoubleGivenBool", "true", [](ConfigTable& t) { t.Double("key", 0, 0, 1); },
                     "expected a number"},
        BadValueCase{"DoubleAboveMax", "1.5", [](ConfigTable& t) { t.Double("key", 0, 0, 1); },
                     "out of range"},
        BadValueCase{"DoubleInfinity", "inf", [](ConfigTable& t) { t.Double("key", 0, 0, 1); },
                     "out of range"},
        BadValueCase{"BoolGivenInt", "1", [](ConfigTable& t) { t.Bool("key", false); },
                     "expected true or false"},
        BadValueCase{"StringGivenInt", "1", [](ConfigTable& t) { t.String("key", ""); },
                     "expected a string"},
        BadValueCase{"StringNotAllowed", "\"lifo\"",
                     [](ConfigTable& t) {
                       t.String("key", "fcfs", {"fcfs", "priority"});
                     },
                     "\"lifo\" is not one of: fcfs, priority"},
        BadValueCase{"ArrayGivenInt", "3", [](ConfigTable& t) { t.IntArray("key", 0, 10); },
                     "expected an array of integers"},
        BadValueCase{"ArrayElementOutOfRange", "[1, 20]",
                     [](ConfigTable& t) { t.IntArray("key", 0, 10); },
                     "expected integers in 0..10"},
        BadValueCase{"ArrayElementString", "[1, \"x\"]",
                     [](ConfigTable& t) { t.IntArray("key", 0, 10); },
                     "expected integers in 0..10"},
        BadValueCase{"TableGivenInt", "3", [](ConfigTable& t) { (void)t.Table("key"); },
                     "expected a table"}),
    [](const testing::TestParamInfo<BadValueCase>& info) { return info.param.name; });

// NaN compares false with everything, so a range check written as `v < min || v > max` lets it
// through; "every key is typed and range-checked" means NaN must be refused.
TEST(ConfigTableTest, DoubleRejectsNan) {
  toml::table root = Parse("key = nan\n", kSource);
  ConfigTable t(root, kSource, "");
  EXPECT_THAT(ErrorOf([&] { t.Double("key", 0, 0, 1); }), HasSubstr("test.toml:1: key: "));
}

TEST(ConfigTableTest, AllowedStringIsAccepted) {
  toml::table root = Parse("policy = \"priority\"\n", kSource);
  ConfigTable t(root, kSource, "");
  EXPECT_EQ(t.String("policy", "fcfs", {"fcfs", "priority"}), "priority");
}

TEST(ConfigTableTest, ArrayElementErrorNamesTheElementsLine) {
  toml::table root = Parse(
      "ports = [\n"
      "  1,\n"
      "  99,\n"
      "]\n",
      kSource);
  ConfigTable t(root, kSource, "");
  EXPECT_THAT(ErrorOf([&] { t.IntArray("ports", 0, 10); }), HasSubstr("test.toml:3: ports: "));
}

TEST(ConfigTableTest, UnknownKeyIsRejectedWithFileAndLine) {
  toml::table root = Parse("known = 1\n\nunknown = 2\n", kSource);
  ConfigTable t(root, kSource, "");
  t.Int("known", 0, 0, 10);
  EXPECT_EQ(ErrorOf([&] { t.RejectUnknownKeys(); }), "test.toml:3: unknown key 'unknown'");
}

TEST(ConfigTableTest, UnknownKeyInSubTableNamesTheDottedKey) {
  toml::table root = Parse(
      "[engine]\n"
      "port = 8000\n"
      "foo = 1\n",
      kSource);
  ConfigTable top(root, kSource, "");
  std::optional<ConfigTable> engine = top.Table("engine");
  ASSERT_TRUE(engine.has_value());
  EXPECT_EQ(engine->Int("port", 0, 1, 65535), 8000);
  EXPECT_EQ(ErrorOf([&] { engine->RejectUnknownKeys(); }), "test.toml:3: unknown key 'engine.foo'");
  // The parent read `engine`, so the parent itself has nothing unknown.
  EXPECT_NO_THROW(top.RejectUnknownKeys());
}

TEST(ConfigTableTest, UnreadSubTableIsAnUnknownKeyOfItsParent) {
  toml::table root = Parse("a = 1\n[stray]\nx = 1\n", kSource);
  ConfigTable top(root, kSource, "");
  top.Int("a", 0, 0, 10);
  EXPECT_THAT(ErrorOf([&] { top.RejectUnknownKeys(); }), HasSubstr("unknown key 'stray'"));
}

TEST(ConfigTableTest, NestedTablesPrefixErrorsWithTheirPath) {
  toml::table root = Parse(
      "[engine]\n"
      "[engine.scheduler]\n"
      "max_num_seqs = 0\n",
      kSource);
  ConfigTable top(root, kSource, "");
  std::optional<ConfigTable> engine = top.Table("engine");
  ASSERT_TRUE(engine.has_value());
  std::optional<ConfigTable> scheduler = engine->Table("scheduler");
  ASSERT_TRUE(scheduler.has_value());
  EXPECT_THAT(ErrorOf([&] { scheduler->Int("max_num_seqs", 1, 1, 1024); }),
              HasSubstr("test.toml:3: engine.scheduler.max_num_seqs: 0 is out of range"));
  EXPECT_EQ(scheduler->source(), kSource);
}

TEST(ConfigTableTest, InlineTableIsATable) {
  toml::table root = Parse("limits = { rps = 5 }\n", kSource);
  ConfigTable top(root, kSource, "");
  std::optional<ConfigTable> limits = top.Table("limits");
  ASSERT_TRUE(limits.has_value());
  EXPECT_EQ(limits->Int("rps", 0, 0, 100), 5);
  EXPECT_NO_THROW(limits->RejectUnknownKeys());
}

TEST(ConfigTableTest, HasReportsPresence) {
  toml::table root = Parse("x = 1\n", kSource);
  ConfigTable t(root, kSource, "");
  EXPECT_TRUE(t.Has("x"));
  EXPECT_FALSE(t.Has("y"));
}

// The header promises "Keys of this table, in file order"; the first unknown key reported
// should likewise be the first in the file.
TEST(ConfigTableTest, KeysAreInFileOrder) {
  toml::table root = Parse("zeta = 1\nalpha = 2\nmid = 3\n", kSource);
  ConfigTable t(root, kSource, "");
  EXPECT_EQ(t.Keys(), (std::vector<std::string>{"zeta", "alpha", "mid"}));
}

TEST(ConfigTableTest, FirstUnknownKeyInFileOrderIsReported) {
  toml::table root = Parse("zeta = 1\nalpha = 2\n", kSource);
  ConfigTable t(root, kSource, "");
  EXPECT_EQ(ErrorOf([&] { t.RejectUnknownKeys(); }), "test.toml:1: unknown key 'zeta'");
}

TEST(ConfigTableTest, TableArrayNamesEachElement) {
  toml::table root = Parse("[[n]]\na = 1\n\n[[n]]\nb = 2\nm = [{ c = 3 }]\n", kSource);
  ConfigTable t(root, kSource, "");
  std::vector<ConfigTable> n = t.TableArray("n");
  ASSERT_EQ(n.size(), 2u);
  EXPECT_EQ(n[0].Int("a", 0, 0, 9), 1);
  EXPECT_EQ(n[1].prefix(), "n[1]");
  EXPECT_EQ(n[1].line(), 4);
  std::vector<ConfigTable> m = n[1].TableArray("m");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].Int("c", 0, 0, 9), 3);
  EXPECT_EQ(ErrorOf([&] { n[1].RejectUnknownKeys(); }), "test.toml:5: unknown key 'n[1].b'");
  EXPECT_EQ(ErrorOf([&] { n[1].Invalid("b", "too big"); }), "test.toml:5: n[1].b: too big");
  EXPECT_EQ(ErrorOf([&] { n[0].Invalid("x", "required"); }), "test.toml:1: n[0].x: required");
  EXPECT_TRUE(t.TableArray("absent").empty());
}

TEST(ConfigTableTest, TableArrayRejectsOtherValues) {
  toml::table root = Parse("a = 1\nb = [1]\n", kSource);
  ConfigTable t(root, kSource, "");
  EXPECT_EQ(ErrorOf([&] { t.TableArray("a"); }), "test.toml:1: a: expected an array of tables");
  EXPECT_EQ(ErrorOf([&] { t.TableArray("b"); }), "test.toml:2: b: expected an array of tables");
}

}  // namespace
}  // namespace bmas
