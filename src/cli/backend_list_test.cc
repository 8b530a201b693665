#include "cli/backend_list.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas {
namespace {

using ::testing::ElementsAre;

constexpr const char* kA = "http://127.0.0.1:8001";
constexpr const char* kB = "http://127.0.0.1:8002";
constexpr const char* kC = "http://127.0.0.1:8003";
constexpr const char* kD = "http://127.0.0.1:8004";

TEST(BackendListTest, ReadsTheGatewaysBackendGauges) {
  const std::string metrics =
      "# HELP bmas_gateway_queue_depth Requests waiting in the fair queue.\n"
      "bmas_gateway_queue_depth 0\n"
      "# TYPE bmas_gateway_backend_in_flight gauge\n"
      "bmas_gateway_backend_in_flight{backend=\"http://127.0.0.1:8001\"} 3\n"
      "bmas_gateway_backend_healthy{backend=\"http://127.0.0.1:8001\"} 1\n"
      "bmas_gateway_backend_healthy{backend=\"http://h:1/a\\\"b\"} 0\n"
      "bmas_gateway_backend_added{backend=\"http://127.0.0.1:8001\"} 0\n"
      "bmas_gateway_backend_added{backend=\"http://h:1/a\\\"b\"} 1\n"
      "bmas_gateway_backend_draining{backend=\"http://127.0.0.1:8001\"} 0\n"
      "bmas_gateway_backend_draining{backend=\"http://h:1/a\\\"b\"} 1\n"
      "bmas_gateway_backend_healthy{backend=\"broken\n"
      "bmas_gateway_backend_healthy{backend=\"http://x:1\"} not-a-number\n";
  auto running = ParseRunningBackends(metrics);
  ASSERT_EQ(running.size(), 2u);
  EXPECT_EQ(running[0].url, kA);
  EXPECT_TRUE(running[0].healthy);
  EXPECT_FALSE(running[0].added);
  EXPECT_FALSE(running[0].draining);
  EXPECT_EQ(running[1].url, "http://h:1/a\"b");
  EXPECT_FALSE(running[1].healthy);
  EXPECT_TRUE(running[1].added);
  EXPECT_TRUE(running[1].draining);
  EXPECT_TRUE(ParseRunningBackends("").empty());
}

TEST(BackendListTest, EveryBackendOnceWithWhereItComesFromAndItsHealth) {
  // A from the config and added too; B added, not picked up yet; C only in the config, which
  // the running gateway did not start with; D given on the gateway's command line; E removed
  // from the store and draining; F removed, and the gateway has not seen it yet.
  const std::vector<RunningBackend> running = {{kA, true, false, false},
                                               {kD, false, false, false},
                                               {"http://127.0.0.1:8005", false, true, true},
                                               {"http://127.0.0.1:8006", true, true, false}};
  auto rows = MergeBackends({kA, kC, kA}, {kA, kB}, running);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0].url, kA);
  EXPECT_THAT(rows[0].origins, ElementsAre("config", "added"));
  EXPECT_EQ(rows[0].health, "healthy");
  EXPECT_EQ(rows[0].healthy, true);
  EXPECT_EQ(rows[1].url, kC);
  EXPECT_THAT(rows[1].origins, ElementsAre("config"));
  EXPECT_THAT(rows[1].health, ::testing::StartsWith("not used by the running gateway"));
  EXPECT_EQ(rows[1].healthy, std::nullopt);
  EXPECT_EQ(rows[2].url, kB);
  EXPECT_THAT(rows[2].origins, ElementsAre("added"));
  EXPECT_THAT(rows[2].health, ::testing::StartsWith("not in the gateway yet"));
  EXPECT_EQ(rows[3].url, kD);
  EXPECT_THAT(rows[3].origins, ElementsAre("command line"));
  EXPECT_THAT(rows[3].health, ::testing::StartsWith("down"));
  EXPECT_EQ(rows[3].healthy, false);
  for (size_t i : {4, 5}) {
    EXPECT_THAT(rows[i].origins, ElementsAre("removed"));
    EXPECT_THAT(rows[i].health, ::testing::StartsWith("draining"));
    EXPECT_EQ(rows[i].healthy, false);
  }
}

TEST(BackendListTest, WithoutAGatewayHealthIsLeftToTheCaller) {
  auto rows = MergeBackends({kA}, {kB}, std::nullopt);
  ASSERT_EQ(rows.size(), 2u);
  for (const BackendRow& r : rows) {
    EXPECT_EQ(r.health, "");
    EXPECT_EQ(r.healthy, std::nullopt);
  }
}

TEST(BackendListTest, TableAndJson) {
  std::vector<BackendRow> rows = {{kA, {"config", "added"}, "healthy", true},
                                  {kB, {"added"}, "unknown", std::nullopt}};
  EXPECT_EQ(FormatBackends(rows, false),
            "URL                    ORIGIN         HEALTH\n"
            "http://127.0.0.1:8001  config,added   healthy\n"
            "http://127.0.0.1:8002  added          unknown\n");
  EXPECT_EQ(FormatBackends(rows, true),
            R"([{"url":"http://127.0.0.1:8001","origins":["config","added"],"health":"healthy",)"
            R"("healthy":true},{"url":"http://127.0.0.1:8002","origins":["added"],)"
            R"("health":"unknown","healthy":null}])"
            "\n");
  EXPECT_EQ(FormatBackends({}, true), "[]\n");
}

}  // namespace
}  // namespace bmas
