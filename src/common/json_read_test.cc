#include "common/json_read.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bmas {
namespace {

rapidjson::Document Parse(const char* text) {
  rapidjson::Document d;
  d.Parse(text);
  EXPECT_FALSE(d.HasParseError()) << text;
  return d;
}

TEST(JsonMemberTest, FindsAMemberOfAnyType) {
  const auto d = Parse(R"({"s": "x", "n": 3, "o": {}, "z": null})");
  ASSERT_NE(JsonMember(d, "s"), nullptr);
  EXPECT_TRUE(JsonMember(d, "s")->IsString());
  ASSERT_NE(JsonMember(d, "n"), nullptr);
  EXPECT_EQ(JsonMember(d, "n")->GetInt(), 3);
  ASSERT_NE(JsonMember(d, "o"), nullptr);
  EXPECT_TRUE(JsonMember(d, "o")->IsObject());
  // A null member is there; callers decide what null means.
  ASSERT_NE(JsonMember(d, "z"), nullptr);
  EXPECT_TRUE(JsonMember(d, "z")->IsNull());
}

TEST(JsonMemberTest, MissingMemberIsNull) {
  const auto d = Parse(R"({"a": 1})");
  EXPECT_EQ(JsonMember(d, "b"), nullptr);
}

// RapidJSON asserts when FindMember is called on a non-object; these must not reach it.
TEST(JsonMemberTest, NonObjectIsNull) {
  for (const char* text : {"[1, 2]", R"("a")", "7", "null", "true"}) {
    const auto d = Parse(text);
    EXPECT_EQ(JsonMember(d, "a"), nullptr) << text;
  }
}

TEST(JsonStringTest, ReadsAString) {
  const auto d = Parse(R"({"name": "c1", "empty": ""})");
  EXPECT_EQ(JsonString(d, "name"), "c1");
  EXPECT_EQ(JsonString(d, "empty"), "");
}

TEST(JsonStringTest, KeepsEmbeddedNul) {
  const auto d = Parse(R"({"s": "a\u0000b"})");
  EXPECT_EQ(JsonString(d, "s"), std::string("a\0b", 3));
}

TEST(JsonStringTest, MissingOrWrongTypeIsEmpty) {
  const auto d = Parse(R"({"n": 3, "b": true, "z": null, "a": ["x"], "o": {"x": "y"}})");
  for (const char* key : {"missing", "n", "b", "z", "a", "o"}) {
    EXPECT_EQ(JsonString(d, key), "") << key;
  }
  EXPECT_EQ(JsonString(Parse(R"(["x"])"), "x"), "");
}

TEST(JsonStringListTest, ReadsTheStringsOfAnArray) {
  const auto d = Parse(R"({"a": ["x", 3, "a\u0000b", null, ""]})");
  EXPECT_EQ(JsonStringList(d, "a"),
            (std::vector<std::string>{"x", std::string("a\0b", 3), ""}));
}

TEST(JsonStringListTest, MissingOrWrongTypeIsEmpty) {
  const auto d = Parse(R"({"s": "x", "o": {"x": "y"}, "z": null})");
  for (const char* key : {"missing", "s", "o", "z"}) {
    EXPECT_TRUE(JsonStringList(d, key).empty()) << key;
  }
}

}  // namespace
}  // namespace bmas
