// Token fairness across gateways (gateway/fair_share.h): two `bmas gateway` processes sharing
// a real PostgreSQL store (pg_server.h) in front of one `bmas engine`. User w1 (weight 1) sends
// only through gateway A and w2 (weight 2) only through gateway B, both backlogged. Each
// gateway alone would fill the engine's slots and the engine would serve them in arrival order
// (w2/w1 = 1, bench/RESULTS.md L3); sharing their reports through the store, the gateways split
// the slots by weight and w2 is served about twice w1's tokens.
//
// The users are Unix accounts the test makes, with weights and keys made with the CLI. The run
// is bounded by a count of completed requests, not by time.

#include <fmt/format.h>
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

constexpr std::string_view kModel = "fair-gateways-model";

TEST(FairGatewaysTest, UsersPinnedToTwoGatewaysShareOneEngineByTheirWeights) {
  // The Unix accounts, and `bmas user` on a store in PostgreSQL, need root (as pg_up_test).
  if (geteuid() != 0) GTEST_SKIP() << "needs root (test accounts, bmas user add)";
  TempDir dir;
  auto server = PgServer::Start();
  ASSERT_TRUE(server) << server.error().message;
  std::unique_ptr<PgServer> pg = std::move(*server);
  ASSERT_TRUE(pg->CreateDatabase("bmas"));
  const EnvList env = {{"BMAS_STATE_DIR", dir.path() + "/state"},
                       {"BMAS_STORE_URL", pg->Url("bmas")}};

  // w1 (weight 1) and w2 (weight 2), each with a key.
  std::vector<std::string> keys;
  for (const auto& [name, weight] : {std::pair{"bmastest1", "1"}, std::pair{"bmastest2", "2"}}) {
    const std::string user = EnsureUnixUser(name);
    auto added = RunBmas({"user", "add", user, "--weight", weight}, env);
    ASSERT_TRUE(added && added->status.Success()) << (added ? added->err : added.error().message);
    auto key = RunBmas({"key", "create", user}, env);
    ASSERT_TRUE(key && key->status.Success()) << (key ? key->err : key.error().message);
    keys.push_back(key->out.substr(0, key->out.find('\n')));
  }

  // One engine of 6 slots; streams of 32 tokens take a while in the calibrated profile, so
  // that each user keeps requests waiting on their gateway.
  constexpr int kSlots = 6;
  auto engine = EngineProcess::Start({"--profile", "llama-3.1-8b-h100", "--max-num-seqs",
                                      std::to_string(kSlots), "--model", std::string(kModel)});
  ASSERT_TRUE(engine) << engine.error().message;
  std::vector<std::unique_ptr<GatewayProcess>> gateways;
  for (int g = 0; g < 2; ++g) {
    auto gateway = GatewayProcess::Start({"--backend", (*engine)->url()}, env);
    ASSERT_TRUE(gateway) << gateway.error().message;
    gateways.push_back(std::move(*gateway));
    HttpClient health(gateways.back()->port());
    ASSERT_TRUE(Eventually([&] {
      auto r = health.Get("/health");
      return r && r->status == 200;
    })) << gateways.back()->process().StderrText();
  }

  // 8 clients per user (more than the engine's slots, so both stay backlogged), each sending
  // one request after another. The first kWarmUp completions (before the gateways have seen
  // each other's reports) are not counted; the next kCounted are; then the clients stop.
  constexpr int kClientsPerUser = 8, kWarmUp = 48, kCounted = 180;
  std::atomic<int> completed = 0;
  std::mutex mu;
  int64_t served[2] = {0, 0};
  std::vector<std::string> errors;
  std::vector<std::thread> clients;
  const std::string body = fmt::format(
      R"({{"model":"{}","prompt":"tell me a long story about gateways","max_tokens":32}})", kModel);
  for (int u = 0; u < 2; ++u) {
    for (int c = 0; c < kClientsPerUser; ++c) {
      clients.emplace_back([&, u] {
        HttpClient client(gateways[u]->port());  // w1 through A, w2 through B
        client.SetDefaultHeader("Authorization", "Bearer " + keys[u]);
        while (completed.load() < kWarmUp + kCounted) {
          auto r = client.Post("/v1/completions", body);
          std::lock_guard lock(mu);
          if (!r || r->status != 200) {
            errors.push_back(r ? fmt::format("{} {}", r->status, r->body) : r.error().message);
            return;
          }
          const int n = ++completed;
          if (n > kWarmUp && n <= kWarmUp + kCounted) {
            served[u] += Int(At(At(ParseJson(r->body), "usage"), "completion_tokens"));
          }
        }
      });
    }
  }
  for (auto& t : clients) t.join();
  ASSERT_TRUE(errors.empty()) << errors.front() << "\n"
                              << gateways[0]->process().StderrText();
  ASSERT_GT(served[0], 0);
  const double ratio = static_cast<double>(served[1]) / static_cast<double>(served[0]);
  fmt::print("w1 {} tokens, w2 {} tokens: w2/w1 {:.2f}\n", served[0], served[1], ratio);
  // The weights' ratio is 2 (each gateway alone would give 1); slots split 2 + 4 give 2.
  EXPECT_GE(ratio, 1.5) << "w1 " << served[0] << " tokens, w2 " << served[1];
  EXPECT_LE(ratio, 2.6) << "w1 " << served[0] << " tokens, w2 " << served[1];
  // Both gateways published their reports through the store.
  auto reports = pg->Psql("bmas", "SELECT COUNT(*) FROM gateway_reports");
  ASSERT_TRUE(reports && reports->exit_code == 0);
  EXPECT_EQ(reports->out, "2\n");
}

}  // namespace
}  // namespace bmas::testing
