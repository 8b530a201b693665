#include "gateway/request.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>

namespace bmas::gateway {
namespace {

TEST(ParseCompletionBodyTest, ReadsWhatRoutingAndMeteringNeed) {
  simdjson::dom::parser parser;
  auto f = ParseCompletionBody(
      parser, R"({"model":"m","stream":true,"stream_options":{"include_usage":true},)"
              R"("messages":[{"role":"user","content":"hello"}],"stop":["a","b"]})");
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->model, "m");
  EXPECT_TRUE(f->stream);
  EXPECT_TRUE(f->client_wants_usage);
  EXPECT_EQ(f->prompt_chars, 5);
  EXPECT_EQ(f->lead, "user\nhello\n");
}

TEST(ParseCompletionBodyTest, ReadsAResponsesBodyLikeAChat) {
  simdjson::dom::parser parser;
  auto chat = ParseCompletionBody(
      parser, R"({"model":"m","messages":[{"role":"system","content":"Be brief."},)"
              R"({"role":"user","content":[{"type":"text","text":"hello"}]}]})");
  ASSERT_TRUE(chat) << chat.error().message;
  EXPECT_EQ(chat->lead, "system\nBe brief.\nuser\nhello\n");
  EXPECT_EQ(chat->prompt_chars, 14);
  struct Case {
    const char* body;
    bool stream;
  } cases[] = {
      {R"({"model":"m","instructions":"Be brief.","input":"hello","max_output_tokens":9})", false},
      {R"({"model":"m","instructions":"Be brief.","stream":true,)"
       R"("input":[{"role":"user","content":[{"type":"input_text","text":"hello"}]}]})",
       true},
  };
  for (const Case& c : cases) {
    auto f = ParseCompletionBody(parser, c.body);
    ASSERT_TRUE(f) << f.error().message;
    EXPECT_EQ(f->model, "m");
    EXPECT_EQ(f->stream, c.stream);
    EXPECT_EQ(f->lead, chat->lead) << c.body;
    EXPECT_EQ(f->prompt_chars, chat->prompt_chars) << c.body;
  }
}

TEST(ParseCompletionBodyTest, RejectsWhatProxyAndBackendWouldReadDifferently) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"model":"m","max_tokens":1,"max_tokens":100000})", "max_tokens"},
      {R"({"model":"cheap","model":"dear"})", "model"},
      // Two keys repeated: the error names the least (in byte order), few keys or many.
      {R"({"z":1,"model":"m","b":1,"z":2,"b":2})", "b"},
      {R"({"k01":1,"k02":1,"k03":1,"k04":1,"k05":1,"k06":1,"k07":1,"k08":1,"k09":1,"k10":1,)"
       R"("k11":1,"k12":1,"k13":1,"k14":1,"z":1,"model":"m","b":1,"z":2,"b":2})",
       "b"},
      {R"({"k01":1,"k02":1,"k03":1,"k04":1,"k05":1,"k06":1,"k07":1,"k08":1,"k09":1,"k10":1,)"
       R"("k11":1,"k12":1,"k13":1,"k14":1,"k15":1,"model":"m","k15":2})",
       "k15"},
      {R"({"model":"m","stop":["1","2","3","4","5"]})", "stop"},
      {R"({"model":"m","stop":[1]})", "stop"},
      {R"({"model":"m","stop":{"a":1}})", "stop"},
      {R"({"model":"m","stream":"yes"})", "stream"},
      {R"({"prompt":"x"})", "model"},
      {R"([1,2])", ""},
      {R"({"model":)", ""},
  };
  simdjson::dom::parser parser;
  for (const Case& c : cases) {
    auto f = ParseCompletionBody(parser, c.body);
    ASSERT_FALSE(f) << c.body;
    EXPECT_EQ(f.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(f.error().param, c.param) << c.body;
  }
  auto four = ParseCompletionBody(parser, R"({"model":"m","stop":["1","2","3","4"]})");
  EXPECT_TRUE(four);
  auto one = ParseCompletionBody(parser, R"({"model":"m","stop":"x"})");
  EXPECT_TRUE(one);
  // The same key in nested objects is not a repeat.
  auto nested = ParseCompletionBody(parser, R"({"model":"m","a":{"model":1},"b":{"model":2}})");
  EXPECT_TRUE(nested);
}

TEST(ParseCompletionBodyTest, ReadsTheMostOutputTokensTheClientAllows) {
  simdjson::dom::parser parser;
  auto given = [&](std::string_view body) { return ParseCompletionBody(parser, body)->max_tokens; };
  EXPECT_EQ(given(R"({"model":"m","prompt":"x","max_tokens":7})"), 7);
  EXPECT_EQ(given(R"({"model":"m","messages":[],"max_completion_tokens":9})"), 9);
  EXPECT_EQ(given(R"({"model":"m","input":"x","max_output_tokens":11})"), 11);
  EXPECT_EQ(given(R"({"model":"m","prompt":"x"})"), std::nullopt);
  EXPECT_EQ(given(R"({"model":"m","prompt":"x","max_tokens":null})"), std::nullopt);
  EXPECT_EQ(given(R"({"model":"m","prompt":"x","max_tokens":0})"), std::nullopt);
}

TEST(WithIncludeUsageTest, KeepsMemberOrder) {
  struct Case {
    const char* in;
    const char* out;
  } cases[] = {
      {R"({"model":"m","stream":true,"prompt":"p","max_tokens":3})",
       R"({"model":"m","stream":true,"prompt":"p","max_tokens":3,"stream_options":{"include_usage":true}})"},
      {R"({"stream_options":null,"model":"m","stream":true,"prompt":"p","z":1})",
       R"({"model":"m","stream":true,"prompt":"p","z":1,"stream_options":{"include_usage":true}})"},
      {R"({"a":1,"stream_options":{"x":1,"include_usage":false,"y":2},"b":2})",
       R"({"a":1,"stream_options":{"x":1,"include_usage":true,"y":2},"b":2})"},
  };
  for (const Case& c : cases) EXPECT_EQ(WithIncludeUsage(c.in), c.out);
}

TEST(CharsPerTokenTest, LearnsTheRatioRepliesShow) {
  CharsPerToken ratio;
  EXPECT_EQ(ratio.Estimate(400), 101);  // 4 characters a token until a reply is seen
  ratio.Learn(0, 10);                   // ignored
  ratio.Learn(100, 0);
  EXPECT_EQ(ratio.ratio(), CharsPerToken::kDefault);
  ratio.Learn(1500, 300);  // 5 characters a token
  ratio.Learn(500, 100);
  EXPECT_DOUBLE_EQ(ratio.ratio(), 5.0);
  EXPECT_EQ(ratio.Estimate(1500), 301);
  EXPECT_EQ(ratio.Estimate(1), 2);
  EXPECT_EQ(ratio.Estimate(0), 1);
}

TEST(ServerTimingTest, TheGatewaysTimeIsWhatTheQueueAndTheBackendLeave) {
  EXPECT_EQ(ServerTiming(0.0155, 0.002, 0.0125).view(),
            "gw;dur=1.000, queue;dur=2.000, upstream;dur=12.500");
  // Clocks read at different points never make the gateway's time negative.
  EXPECT_EQ(ServerTiming(0.010, 0.0, 0.0100004).view(),
            "gw;dur=0.000, queue;dur=0.000, upstream;dur=10.000");
  // The longest durations (clamped to 1e9 s) fit the text's room.
  EXPECT_EQ(ServerTiming(3e12, 1e12, 1e12).view(),
            "gw;dur=1000000000000.000, queue;dur=1000000000000.000, "
            "upstream;dur=1000000000000.000");
}

}  // namespace
}  // namespace bmas::gateway
