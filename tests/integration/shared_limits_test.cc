// Limits shared through the store by two `bmas gateway` processes on one real PostgreSQL server
// (pg_server.h), each in front of its own `bmas engine`. The user is a non-root Unix account
// made by the test, with its limits and key made with the CLI. Concurrent requests through both
// gateways stay within the user's TPM (by at most one request's reservation), RPM and
// max_concurrent; with the store stopped, a gateway refuses (503) by default and falls back on
// its own limits with limits_when_store_down = "open".

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine_process.h"
#include "http_client.h"
#include "pg_server.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view kModel = "shared-limits-model";

std::string Completion(int max_tokens, bool stream = false) {
  return fmt::format(R"({{"model":"{}","prompt":"count to ten","max_tokens":{}{}}})", kModel,
                     max_tokens, stream ? R"(,"stream":true)" : "");
}

// PostgreSQL, two engines, and two gateways sharing the store; `open_gateway` gives the second
// gateway limits_when_store_down = "open".
class SharedLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The Unix account, and `bmas user` on a store in PostgreSQL, need root (as pg_up_test).
    if (geteuid() != 0) GTEST_SKIP() << "needs root (a test account, bmas user add)";
  }

  void StartCluster(const std::vector<std::string>& limits, bool open_gateway = false,
                    const std::vector<std::string>& engine_args = {"--profile", "instant"}) {
    auto server = PgServer::Start();
    ASSERT_TRUE(server) << server.error().message;
    pg_ = std::move(*server);
    ASSERT_TRUE(pg_->CreateDatabase("bmas"));
    env_ = {{"BMAS_STATE_DIR", dir_.path() + "/state"}, {"BMAS_STORE_URL", pg_->Url("bmas")}};
    user_ = EnsureUnixUser("bmastest1");
    std::vector<std::string> add = {"user", "add", user_};
    add.insert(add.end(), limits.begin(), limits.end());
    auto added = RunBmas(add, env_);
    ASSERT_TRUE(added && added->status.Success()) << (added ? added->err : added.error().message);
    auto key = RunBmas({"key", "create", user_}, env_);
    ASSERT_TRUE(key && key->status.Success()) << (key ? key->err : key.error().message);
    key_ = key->out.substr(0, key->out.find('\n'));

    const std::string open_config = dir_.WriteFile(
        "open.toml",
        "[gateway]\nlimits_when_store_down = \"open\"\nstore_connections = 2\n");
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> args = engine_args;
      args.insert(args.end(), {"--model", std::string(kModel)});
      auto engine = EngineProcess::Start(args);
      ASSERT_TRUE(engine) << engine.error().message;
      EnvList env = env_;
      if (open_gateway && i == 1) env.emplace_back("BMAS_CONFIG", open_config);
      auto gateway = GatewayProcess::Start({"--backend", (*engine)->url()}, env);
      ASSERT_TRUE(gateway) << gateway.error().message;
      engines_.push_back(std::move(*engine));
      gateways_.push_back(std::move(*gateway));
      HttpClient health(gateways_.back()->port());
      ASSERT_TRUE(Eventually([&] {
        auto r = health.Get("/health");
        return r && r->status == 200;
      })) << gateways_.back()->process().StderrText();
    }
  }

  Result<HttpResponse> Post(int gateway, const std::string& body) {
    HttpClient client(gateways_[gateway]->port());
    client.SetDefaultHeader("Authorization", "Bearer " + key_);
    return client.Post("/v1/completions", body);
  }

  TempDir dir_;
  std::unique_ptr<PgServer> pg_;
  EnvList env_;
  std::string user_, key_;
  std::vector<std::unique_ptr<EngineProcess>> engines_;
  std::vector<std::unique_ptr<GatewayProcess>> gateways_;
};

TEST_F(SharedLimitsTest, TokensPerMinuteHoldAcrossTwoGateways) {
  constexpr int kTpm = 1000, kMaxTokens = 100, kRequests = 40;
  ASSERT_NO_FATAL_FAILURE(StartCluster({"--tpm", std::to_string(kTpm)}));
  std::mutex mu;
  int64_t used = 0;
  int admitted = 0, refused = 0;
  std::vector<std::string> other;
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      auto r = Post(i % 2, Completion(kMaxTokens));
      std::lock_guard lock(mu);
      if (r && r->status == 200) {
        ++admitted;
        used += Int(At(At(ParseJson(r->body), "usage"), "total_tokens"));
      } else if (r && r->status == 429 && r->body.find("tpm") != std::string::npos &&
                 r->Header("Retry-After")) {
        ++refused;
      } else {
        other.push_back(r ? fmt::format("{} {}", r->status, r->body) : r.error().message);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_THAT(other, ::testing::IsEmpty());
  // Each reservation is the prompt's estimate + max_tokens: a little over 100 tokens.
  EXPECT_LE(used, kTpm + kMaxTokens + 10) << admitted << " admitted";
  EXPECT_GE(admitted, 1);
  EXPECT_GE(refused, kRequests - kTpm / kMaxTokens);
}

TEST_F(SharedLimitsTest, RequestsPerMinuteHoldAcrossTwoGateways) {
  constexpr int kRpm = 6;
  ASSERT_NO_FATAL_FAILURE(StartCluster({"--rpm", std::to_string(kRpm)}));
  int admitted = 0, refused = 0;
  for (int i = 0; i < 3 * kRpm; ++i) {
    auto r = Post(i % 2, Completion(5));
    ASSERT_TRUE(r) << r.error().message;
    if (r->status == 200) ++admitted;
    if (r->status == 429) {
      ++refused;
      EXPECT_THAT(r->body, HasSubstr("rpm"));
    }
  }
  EXPECT_EQ(admitted, kRpm);
  EXPECT_EQ(refused, 2 * kRpm);
}

TEST_F(SharedLimitsTest, ConcurrencyHoldsAcrossTwoGatewaysAndFreesWhenStreamsEnd) {
  // Streams of the calibrated profile take seconds: they are in flight while the test asks.
  ASSERT_NO_FATAL_FAILURE(
      StartCluster({"--max-concurrent", "2"}, false, {"--profile", "llama-3.1-8b-h100"}));
  std::vector<std::unique_ptr<SseStream>> streams;
  for (int g = 0; g < 2; ++g) {
    auto s = SseStream::Open(gateways_[g]->port(), "/v1/completions", Completion(4000, true),
                             std::chrono::seconds(20), {{"Authorization", "Bearer " + key_}});
    ASSERT_TRUE(s) << s.error().message;
    ASSERT_EQ((*s)->status(), 200);
    auto first = (*s)->Next();
    ASSERT_TRUE(first && *first);
    streams.push_back(std::move(*s));
  }
  for (int g = 0; g < 2; ++g) {
    auto r = Post(g, Completion(5));
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, 429) << r->body;
    EXPECT_THAT(r->body, HasSubstr("max_concurrent"));
  }
  // The clients leave: both gateways settle their reservations, and a request goes through.
  streams.clear();
  EXPECT_TRUE(Eventually(
      [&] {
        auto r = Post(0, Completion(5));
        return r && r->status == 200;
      },
      std::chrono::seconds(20)));
}

// Each gateway holds a pool of store connections: 4 by default on PostgreSQL, or [gateway]
// store_connections (2 for the second gateway here).
TEST_F(SharedLimitsTest, EachGatewayHoldsItsPoolOfStoreConnections) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({"--tpm", "100000"}, /*open_gateway=*/true));
  auto count = pg_->Psql("bmas",
                         "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = 'bmas'");
  ASSERT_TRUE(count && count->exit_code == 0) << (count ? count->err : count.error().message);
  EXPECT_EQ(count->out, "6\n");
  // Requests through both still reserve and settle.
  for (int i = 0; i < 8; ++i) {
    auto r = Post(i % 2, Completion(5));
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : r.error().message);
  }
}

// The store goes away: the closed gateway refuses (503 naming the setting); the open one falls
// back on its own limits, and fairness across gateways falls back on this gateway's own queue
// (issue 27: the store-unreachable path of the report loop).
TEST_F(SharedLimitsTest, StoreDownClosedRefusesAndOpenFallsBackOnOwnLimits) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({"--tpm", "100000"}, /*open_gateway=*/true));
  for (int g = 0; g < 2; ++g) {  // both admitted (and each gateway has the key in its cache)
    auto r = Post(g, Completion(5));
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : r.error().message);
  }
  pg_.reset();  // PostgreSQL stops
  auto closed = Post(0, Completion(5));
  ASSERT_TRUE(closed) << closed.error().message;
  EXPECT_EQ(closed->status, 503);
  EXPECT_THAT(closed->body, HasSubstr("limits_when_store_down"));
  EXPECT_THAT(closed->body, HasSubstr("store"));
  auto open = Post(1, Completion(5));
  ASSERT_TRUE(open) << open.error().message;
  EXPECT_EQ(open->status, 200) << open->body;
  // Fairness across gateways (gateway/fair_share.h) cannot exchange its reports either: the
  // open gateway says so, once, and fills every backend slot as a gateway alone does, so it
  // goes on serving.
  EXPECT_TRUE(Eventually([&] {
    return gateways_[1]->process().StderrText().find(
               "cannot exchange reports through the store") != std::string::npos;
  })) << gateways_[1]->process().StderrText();
  const std::string log = gateways_[1]->process().StderrText();
  const size_t first = log.find("fills every backend slot until the store answers");
  EXPECT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("fills every backend slot", first + 1), std::string::npos) << log;
  for (int i = 0; i < 3; ++i) {
    auto again = Post(1, Completion(5));
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_EQ(again->status, 200) << again->body;
  }
}

}  // namespace
}  // namespace bmas::testing
