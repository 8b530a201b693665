// Integration tests of `bmas engine --startup-s`: the engine listens on its port from the start
// and answers 503 while it "loads", as vLLM's API server does, and serves afterwards. No timed
// assertions beyond "still loading a few seconds after start": only "503 while loading" and
// "answers eventually".

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

#include "engine_process.h"
#include "http_client.h"
#include "port_squatter.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The port of the first "http://HOST:PORT" in `line`, or 0.
uint16_t PortInLine(const std::string& line) {
  const size_t at = line.find("http://");
  if (at == std::string::npos) return 0;
  const size_t end = line.find(' ', at);
  return PortOfUrl(std::string_view(line).substr(at, end == std::string::npos ? end : end - at));
}

// Starts `bmas engine --port 0 ARGS...` and waits for its "loading on" line; returns the process
// and the port it holds.
std::pair<std::unique_ptr<Process>, uint16_t> StartLoading(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"engine", "--port", "0", "--profile", "instant"};
  all.insert(all.end(), args.begin(), args.end());
  auto process = Process::Start(all);
  if (!process) {
    ADD_FAILURE() << process.error().message;
    return {nullptr, 0};
  }
  auto line = (*process)->WaitForLine("loading on http://", 10s);
  if (!line) {
    ADD_FAILURE() << line.error().message << "; stderr:\n" << (*process)->StderrText();
    return {nullptr, 0};
  }
  const uint16_t port = PortInLine(*line);
  EXPECT_NE(port, 0) << *line;
  return {std::move(*process), port};
}

// Issue 23.1: while an engine loads, another account cannot take its port (it used to be bound
// and not listened on, so any account could bind it again and listen first), and the engine
// answers 503 on everything, as vLLM does, then 200 once loaded.
TEST(EngineStartupTest, AnotherAccountCannotTakeALoadingEnginesPort) {
  const std::string student = EnsureUnixUser("bmas-test-student");
  auto [engine, port] = StartLoading({"--startup-s", "5"});
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(port, 0);
  int taken = BindAndListenAs(student, port);
  EXPECT_EQ(taken, EADDRINUSE) << "as " << student << ": " << std::strerror(taken);

  HttpClient client(port);
  auto health = client.Get("/health");
  ASSERT_TRUE(health) << health.error().message;
  EXPECT_EQ(health->status, 503) << health->body;
  auto models = client.Get("/v1/models");
  ASSERT_TRUE(models) << models.error().message;
  ExpectError(*models, 503, std::nullopt);
  auto completion = client.Request(http::verb::post, "/v1/completions",
                                   R"({"model":"m","prompt":"hi","max_tokens":1})");
  ASSERT_TRUE(completion) << completion.error().message;
  ExpectError(*completion, 503, std::nullopt);
  EXPECT_THAT(engine->stdout_text(), Not(HasSubstr("listening on")))
      << "the engine loaded before the checks: they did not check the loading state";

  auto listening = engine->WaitForLine("listening on", 30s);
  ASSERT_TRUE(listening) << listening.error().message << "; stderr:\n" << engine->StderrText();
  EXPECT_EQ(PortInLine(*listening), port) << "the port held while loading is the one served";
  health = client.Get("/health");
  ASSERT_TRUE(health) << health.error().message;
  EXPECT_EQ(health->status, 200);
  taken = BindAndListenAs(student, port);
  EXPECT_EQ(taken, EADDRINUSE) << "as " << student << ": " << std::strerror(taken);
  ExitStatus s = engine->Stop(10s);
  EXPECT_TRUE(s.Success()) << s.ToString();
}

// A port another account holds already: the engine says so, naming the port and the fix.
TEST(EngineStartupTest, APortHeldByAnotherAccountIsAClearError) {
  const std::string student = EnsureUnixUser("bmas-test-student");
  const uint16_t port = static_cast<uint16_t>(FreeTcpPort());
  TempDir dir;
  auto squatter = PortSquatter::Start(student, port, dir.path() + "/received");
  ASSERT_TRUE(squatter) << squatter.error().message;
  auto run = RunBmas({"engine", "--port", std::to_string(port), "--profile", "instant"});
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_FALSE(run->status.Success());
  EXPECT_THAT(run->err, HasSubstr(fmt::format("another process holds port {}", port)));
  EXPECT_THAT(run->err, HasSubstr("pick another port"));
}

TEST(EngineStartupTest, ProfileTakesTheProfilesStartupTime) {
  TempDir dir;
  const std::string profiles =
      dir.WriteFile("profiles.toml", "[profile.slow]\nnum_kv_blocks = 1000\nstartup_s = 1\n");
  std::vector<std::string> args = {"engine",    "--port",         "0",         "--profiles",
                                   profiles,    "--profile",      "slow",      "--max-model-len",
                                   "4096",      "--startup-s",    "profile"};
  auto process = Process::Start(args);
  ASSERT_TRUE(process) << process.error().message;
  auto loading = (*process)->WaitForLine("loading on http://", 10s);
  ASSERT_TRUE(loading) << loading.error().message << "; stderr:\n" << (*process)->StderrText();
  EXPECT_THAT(*loading, HasSubstr("for 1 s"));
  auto listening = (*process)->WaitForLine("listening on", 30s);
  ASSERT_TRUE(listening) << listening.error().message;
  EXPECT_TRUE((*process)->Stop(10s).Success());
}

TEST(EngineStartupTest, WithoutTheFlagTheEngineListensAtOnceEvenWithASlowProfile) {
  TempDir dir;
  const std::string profiles =
      dir.WriteFile("profiles.toml", "[profile.slow]\nnum_kv_blocks = 1000\nstartup_s = 600\n");
  auto engine = EngineProcess::Start(
      {"--profiles", profiles, "--profile", "slow", "--max-model-len", "4096"});
  ASSERT_TRUE(engine) << engine.error().message;
  EXPECT_THAT((*engine)->process().stdout_text(), Not(HasSubstr("loading on")));
}

TEST(EngineStartupTest, SigtermWhileLoadingExitsZeroWithoutServing) {
  auto [engine, port] = StartLoading({"--startup-s", "600"});
  ASSERT_NE(engine, nullptr);
  engine->Signal(SIGTERM);
  auto status = engine->Wait(10s);
  ASSERT_TRUE(status.has_value()) << "still loading after SIGTERM";
  EXPECT_TRUE(status->Success()) << status->ToString();
  EXPECT_THAT(engine->stdout_text(), Not(HasSubstr("listening on")));
  EXPECT_TRUE(ConnectionRefused(port));
}

TEST(EngineStartupTest, ABadValueIsRejectedNamingTheFlag) {
  for (const char* bad : {"soon", "-1", "nan"}) {
    SCOPED_TRACE(bad);
    auto run = RunBmas({"engine", "--port", "0", "--startup-s", bad});
    ASSERT_TRUE(run) << run.error().message;
    EXPECT_FALSE(run->status.Success());
    EXPECT_THAT(run->err, HasSubstr("startup"));
  }
}

}  // namespace
}  // namespace bmas::testing
