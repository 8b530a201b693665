#include "gateway/sse.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>

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
