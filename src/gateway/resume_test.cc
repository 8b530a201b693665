#include "gateway/resume.h"

#include <gtest/gtest.h>

namespace bmas::gateway {
namespace {

TEST(StreamResumeTest, ACompletionContinuesFromItsPromptPlusTheTextSoFar) {
  StreamResume r(R"({"model":"m","prompt":"Once upon","max_tokens":10,"stream":true})", false);
  r.LearnIdentity(R"(data: {"id":"cmpl-1","created":7,"choices":[{"text":" a"}]})" "\n\n");
  r.OnToken(" a");
  r.OnToken(" time");
  auto body = r.NextBody();
  ASSERT_TRUE(body) << body.error().message;
  EXPECT_EQ(*body, R"({"model":"m","prompt":"Once upon a time","max_tokens":8,"stream":true})");
  EXPECT_EQ(r.resumptions(), 1);
  EXPECT_EQ(r.tokens_before(), 2);
  // The next replica's chunks take the first id; its usage counts what the client sent and got.
  EXPECT_EQ(r.Rewrite(R"(data: {"id":"cmpl-9","created":9,"choices":[{"text":","}]})" "\n\n"),
            "data: {\"id\":\"cmpl-1\",\"created\":7,\"choices\":[{\"text\":\",\"}]}\n\n");
  EXPECT_EQ(
      r.Rewrite(R"(data: {"id":"cmpl-9","choices":[],"usage":{"prompt_tokens":6,"completion_tokens":8,"total_tokens":14}})" "\n\n"),
      "data: {\"id\":\"cmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":10,\"total_tokens\":14}}\n\n");
  EXPECT_EQ(r.Rewrite("data: [DONE]\n\n"), "data: [DONE]\n\n");
}

TEST(StreamResumeTest, AChatContinuesTheFinalAssistantMessageAsVllmDoes) {
  StreamResume r(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":5})",
                 true);
  r.OnToken("Hel");
  auto body = r.NextBody();
  ASSERT_TRUE(body) << body.error().message;
  EXPECT_EQ(*body,
            R"({"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hel"}],)"
            R"("max_completion_tokens":4,"continue_final_message":true,"add_generation_prompt":false})");
  // The role-only opening chunk of the second replica is not sent again.
  EXPECT_EQ(r.Rewrite(R"(data: {"id":"c","choices":[{"delta":{"role":"assistant","content":""}}]})" "\n\n"), "");
  EXPECT_NE(r.Rewrite(R"(data: {"id":"c","choices":[{"delta":{"content":"lo"}}]})" "\n\n"), "");
  // A second cut continues the same assistant message.
  r.OnToken("lo");
  body = r.NextBody();
  ASSERT_TRUE(body);
  EXPECT_NE(body->find(R"({"role":"assistant","content":"Hello"}])"), std::string::npos) << *body;
  EXPECT_EQ(r.resumptions(), 2);
}

TEST(StreamResumeTest, WhatCannotBeResumedSaysWhy) {
  StreamResume several(R"({"prompt":"p","n":2})", false);
  EXPECT_NE(several.NextBody().error().message.find("n > 1"), std::string::npos);
  StreamResume tokens(R"({"prompt":[1,2,3]})", false);
  EXPECT_FALSE(tokens.NextBody());
  StreamResume done(R"({"prompt":"p","max_tokens":1})", false);
  done.OnToken("x");
  EXPECT_FALSE(done.NextBody());
  StreamResume echo(R"({"prompt":"p","echo":true})", false);
  EXPECT_FALSE(echo.NextBody());
  StreamResume garbage("not json", true);
  EXPECT_FALSE(garbage.NextBody());
}

}  // namespace
}  // namespace bmas::gateway
