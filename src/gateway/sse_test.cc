#include "gateway/sse.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <optional>
#include <string>
#include <utility>

namespace bmas::gateway {
namespace {

TEST(ClassifySseEventTest, CountsOnlyEventsThatCarryTokens) {
  struct Case {
    const char* event;
    SseEventKind kind;
  } cases[] = {
      {"data: [DONE]\n\n", SseEventKind::kDone},
      {"data: "
       "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
       SseEventKind::kOther},
      {"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n",
       SseEventKind::kOther},
      {"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
       SseEventKind::kContent},
      {"data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n", SseEventKind::kContent},
      {"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
       SseEventKind::kUsage},
      {"data: {\"error\":{\"message\":\"x\"}}\n\n", SseEventKind::kOther},
      {"data: {not json\n\n", SseEventKind::kOther},
      {": comment\n\n", SseEventKind::kOther},
  };
  simdjson::dom::parser parser;
  for (const Case& c : cases) EXPECT_EQ(ClassifySseEvent(parser, c.event), c.kind) << c.event;
}

TEST(ClassifySseEventTest, ResponsesEventsAreTypedByTheirType) {
  struct Case {
    const char* event;
    SseEventKind kind;
    const char* text;
  } cases[] = {
      {"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,"
       "\"response\":{\"status\":\"in_progress\",\"usage\":null}}\n\n",
       SseEventKind::kOther, ""},
      {"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\","
       "\"sequence_number\":4,\"delta\":\" hi\"}\n\n",
       SseEventKind::kContent, " hi"},
      {"event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\","
       "\"text\":\" hi\"}\n\n",
       SseEventKind::kOther, ""},
      {"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{}}\n\n",
       SseEventKind::kResponseEnd, ""},
      {"event: response.incomplete\ndata: {\"type\":\"response.incomplete\"}\n\n",
       SseEventKind::kResponseEnd, ""},
      {"event: response.failed\ndata: {\"type\":\"response.failed\"}\n\n",
       SseEventKind::kResponseEnd, ""},
      {"event: response.output_text.delta\n\n", SseEventKind::kOther, ""},
  };
  simdjson::dom::parser parser;
  for (const Case& c : cases) {
    std::string text;
    EXPECT_EQ(ClassifySseEvent(parser, c.event, &text), c.kind) << c.event;
    EXPECT_EQ(text, c.text) << c.event;
  }
}

TEST(ReadUsageTest, ReadsChatAndResponsesUsage) {
  struct Case {
    const char* json;
    std::optional<std::pair<int64_t, int64_t>> usage;
  } cases[] = {
      {R"({"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}})", {{3, 2}}},
      {R"({"object":"response","usage":{"input_tokens":7,"output_tokens":4}})", {{7, 4}}},
      {R"({"type":"response.completed","response":{"usage":{"input_tokens":7,"output_tokens":4}}})",
       {{7, 4}}},
      {R"({"type":"response.created","response":{"usage":null}})", std::nullopt},
      {R"({"usage":{"input_tokens":7}})", std::nullopt},
      {R"({"choices":[]})", std::nullopt},
      {R"({"usage":null,"response":{"usage":{"input_tokens":7,"output_tokens":4}}})", {{7, 4}}},
      // Only the top level's usage counts, not one inside the choices or their text.
      {R"({"choices":[{"text":"\"usage\":{\"prompt_tokens\":1}","usage":{"prompt_tokens":9,)"
       R"("completion_tokens":9}}],"usage":{"prompt_tokens":3,"completion_tokens":2}})",
       {{3, 2}}},
      {R"({"choices":[{"usage":{"prompt_tokens":9,"completion_tokens":9}}]})", std::nullopt},
      {R"({"usage":{"prompt_tokens":3,"completion_tokens":2.5}})", std::nullopt},
      {R"({"usage":{"prompt_tokens":3,"completion_tokens":2},"id":"unclosed)", std::nullopt},
      {R"(["usage"])", std::nullopt},
      // The usage last, as engines write it (only that object is parsed), and not last.
      {"{\"id\":\"x\",\"usage\" : {\"prompt_tokens\":3,\"completion_tokens\":2}}\n", {{3, 2}}},
      {R"({"usage":{"prompt_tokens":3,"completion_tokens":2},"x":{"y":1}})", {{3, 2}}},
      {R"({"a":{"usage":{"prompt_tokens":9,"completion_tokens":9}}})", std::nullopt},
      {R"({"a":[{"usage":{"prompt_tokens":9,"completion_tokens":9}}]})", std::nullopt},
      {R"({"a":"\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":9}"})", std::nullopt},
      {R"({"a":"x","usage":{"prompt_tokens":3}})", std::nullopt},
      {R"({"usage":{"note":"}{\"","prompt_tokens":3,"details":{"prompt_tokens":9},)"
       R"("completion_tokens":2}})",
       {{3, 2}}},
      {R"({"usage":{"prompt_tokens":3,"completion_tokens":2.5}} )", std::nullopt},
      {"", std::nullopt},
  };
  for (const Case& c : cases) {
    auto u = ReadUsage(c.json);
    ASSERT_EQ(u.has_value(), c.usage.has_value()) << c.json;
    if (u) {
      EXPECT_EQ(u->prompt_tokens, c.usage->first) << c.json;
      EXPECT_EQ(u->completion_tokens, c.usage->second) << c.json;
    }
  }
}

// The scan of a trailing usage object reads what simdjson reads, on the documents the scan
// takes (the fuzz target sse_relay checks any JSON object without repeated keys).
TEST(ReadUsageTest, TheScanReadsWhatSimdjsonReads) {
  const char* docs[] = {
      R"({"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}})",
      R"({"id":"x","choices":[{"text":"}"}],"usage":{"prompt_tokens":11,"total_tokens":27,)"
      R"("completion_tokens":16,"prompt_tokens_details":{"cached_tokens":0}}})",
      R"({"usage":{ "completion_tokens" : 4 , "prompt_tokens":-3}})",
      R"({"usage":{"prompt_tokens":-0,"completion_tokens":1}})",
      R"({"usage":{"prompt_tokens":1e2,"completion_tokens":1}})",
      R"({"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":1}})",
      R"({"usage":{"prompt_tokens":9223372036854775808,"completion_tokens":1}})",
      R"({"usage":{"prompt_tokens":5,"completion_tokens":1}})",
      R"({"usage":{"input_tokens":5,"output_tokens":7,"total_tokens":12}})",
      R"({"usage":{"prompt_tokens":"5","completion_tokens":1}})",
      R"({"usage":{"prompt_tokens":null,"completion_tokens":1}})",
      R"({"usage":{}})",
      "{\"usage\":{\"prompt_tokens\":\t2,\n\"completion_tokens\":3 }\r\n}",
  };
  for (const char* doc : docs) {
    const auto scanned = ReadUsage(doc);
    const auto parsed = ReadUsageOnDemand(doc);
    ASSERT_EQ(scanned.has_value(), parsed.has_value()) << doc;
    if (scanned) {
      EXPECT_EQ(scanned->prompt_tokens, parsed->prompt_tokens) << doc;
      EXPECT_EQ(scanned->completion_tokens, parsed->completion_tokens) << doc;
    }
  }
}

TEST(SseEventDataTest, IsTheDataLineAfterAnyEventLine) {
  EXPECT_EQ(SseEventData("data: {}\n\n"), "{}");
  EXPECT_EQ(SseEventData("event: response.completed\ndata: {\"a\":1}\n\n"), "{\"a\":1}");
  EXPECT_EQ(SseEventData("event: x\n\n"), "");
  EXPECT_EQ(SseEventData(": comment\n\n"), "");
}

TEST(SseSplitterTest, AnEndlessEventIsDroppedNotKept) {
  SseSplitter s;
  std::string block(64 * 1024, 'x');
  for (int i = 0; i < 40 && !s.overflowed(); ++i) s.Append(block);
  EXPECT_TRUE(s.overflowed());
  EXPECT_TRUE(s.Rest().empty());
  EXPECT_TRUE(s.Next().empty());
}

}  // namespace
}  // namespace bmas::gateway
