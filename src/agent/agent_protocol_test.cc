#include "agent/agent_protocol.h"

#include <gtest/gtest.h>

namespace bmas {
namespace {

TEST(AgentProtocolTest, ARenderedRequestParsesBack) {
  AgentRequest r;
  r.op = "exec";
  r.job = 42;
  r.cwd = "/home/u";
  r.argv = {"sh", "-c", "echo \"[{\""};
  r.env = {"PATH=/bin", "A=b=c"};
  auto back = ParseAgentRequest(RenderAgentRequest(r));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->op, "exec");
  EXPECT_EQ(back->job, 42);
  EXPECT_EQ(back->cwd, "/home/u");
  EXPECT_EQ(back->argv, r.argv);
  EXPECT_EQ(back->env, r.env);
}

TEST(AgentProtocolTest, AUsageRequestCarriesItsStart) {
  for (const char* op : {"usage", "idle"}) {
    AgentRequest r;
    r.op = op;
    r.since = 1'790'000'000;
    auto back = ParseAgentRequest(RenderAgentRequest(r));
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(back->op, op);
    EXPECT_EQ(back->since, 1'790'000'000) << op;
  }
  EXPECT_FALSE(ParseAgentRequest(R"({"op":"usage","job":0,"since":"yesterday"})"));
}

TEST(AgentProtocolTest, ALoginShellRequestCarriesItsTerminalSize) {
  AgentRequest r;
  r.op = "enter";
  r.login = true;
  r.rows = 50;
  r.cols = 132;
  auto back = ParseAgentRequest(RenderAgentRequest(r));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(back->login);
  EXPECT_EQ(back->rows, 50);
  EXPECT_EQ(back->cols, 132);
  for (const char* bad : {R"({"op":"enter","job":0,"rows":0,"cols":80})",
                          R"({"op":"enter","job":0,"rows":24,"cols":100000})",
                          R"({"op":"enter","job":0,"rows":24.5,"cols":80})",
                          R"({"op":"enter","job":0,"login":1})"}) {
    EXPECT_FALSE(ParseAgentRequest(bad)) << bad;
  }
  // A job's command runs as its batch script does: no login shell, no terminal.
  for (const char* job : {R"({"op":"exec","job":7,"login":true})",
                          R"({"op":"exec","job":7,"rows":24,"cols":80})",
                          R"({"op":"exec","job":7,"cols":80})"}) {
    auto refused = ParseAgentRequest(job);
    ASSERT_FALSE(refused) << job;
    EXPECT_EQ(refused.error().message, "a job's command gets no login shell or terminal of its own");
  }
}

TEST(AgentProtocolTest, AKeysRequestCarriesItsActionAndKey) {
  AgentRequest r;
  r.op = "keys";
  r.action = "revoke";
  r.key_id = "e2f7aedbc92b";
  auto back = ParseAgentRequest(RenderAgentRequest(r));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->action, "revoke");
  EXPECT_EQ(back->key_id, "e2f7aedbc92b");
}

TEST(AgentProtocolTest, BadRequestsAreRefusedWithoutParsingThemDeep) {
  const std::string deep(200 * 1024, '[');
  const std::string big = R"({"op":"exec","job":1,"cwd":")" + std::string(300 * 1024, 'a') + "\"}";
  struct Case {
    std::string text;
    std::string why;
  };
  const std::vector<Case> cases = {
      {deep, "nests"},
      {"[[[]]]", "nests"},
      {R"({"op":"exec","job":1,"argv":[["x"]]})", "nests"},
      {big, "at most"},
      {"", "JSON object"},
      {"[]", "JSON object"},
      {R"({"op":"kill"})", "op and job"},
      {R"({"op":"kill","job":"1"})", "job is not"},
      {R"({"op":"kill","job":1.5})", "job is not"},
      {R"({"op":"kill","job":1,"job":2})", "repeated key job"},
      {R"({"op":"kill","job":1,"other":2})", "unknown key"},
      {R"({"op":"exec","job":1,"argv":[1]})", "non-string"},
      {R"({"op":"exec","job":1,"env":"A=b"})", "not an array"},
      {R"({"op":"kill","job":1} {})", "JSON object"},
      {R"({"op":"exec","job":1,"argv":["a\u0000b"]})", "holds a NUL"},
      {R"({"op":"exec\u0000","job":1})", "holds a NUL"},
      {"{\"op\":\"\xff\xfe\",\"job\":1}", "JSON object"},  // not UTF-8
      // Past double's range, and negative (found by the agent_request fuzzer in CI).
      {R"({"op":"bound","job":0,"seconds":-599999995300e298})", "seconds is not a finite"},
      {R"({"op":"bound","job":0,"seconds":1e400})", "JSON object"},  // RapidJSON: too big
      {R"({"op":"bound","job":0,"seconds":-1})", "seconds is not a finite"},
      // A lone surrogate escape (found by the agent_request fuzzer).
      {R"({"op":"exec","job":1,"env":["A=\udc55"]})", "env is not UTF-8"},
  };
  for (const Case& c : cases) {
    auto r = ParseAgentRequest(c.text);
    ASSERT_FALSE(r) << c.text.substr(0, 60);
    EXPECT_NE(r.error().message.find(c.why), std::string::npos)
        << c.text.substr(0, 60) << ": " << r.error().message;
  }
  // A bracket inside a string is not nesting.
  EXPECT_TRUE(ParseAgentRequest(R"({"op":"exec","job":1,"argv":["[[[[\"]]"]})"));
}

TEST(AgentProtocolTest, TheUsersEnvironmentLosesWhatChangesHowProgramsLoad) {
  const std::vector<std::string> env = {"PATH=/usr/bin",
                                        "LD_PRELOAD=/tmp/x.so",
                                        "LD_LIBRARY_PATH=/tmp",
                                        "GCONV_PATH=/tmp",
                                        "LOCPATH=/tmp",
                                        "MALLOC_CHECK_=3",
                                        "NLSPATH=/tmp",
                                        "HOSTALIASES=/tmp/h",
                                        "RES_OPTIONS=debug",
                                        "GLIBC_TUNABLES=x",
                                        "TMPDIR=/tmp",
                                        "noequals",
                                        "=x",
                                        "LANG=C.UTF-8"};
  EXPECT_EQ(FilterUserEnvironment(env),
            (std::vector<std::string>{"PATH=/usr/bin", "LANG=C.UTF-8"}));
}

}  // namespace
}  // namespace bmas
