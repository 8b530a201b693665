#include "gateway/usage_report.h"

#include <gtest/gtest.h>

namespace bmas::gateway {
namespace {

TEST(UsageReportJsonTest, SumsPerModelAndHidesBackends) {
  std::vector<UsageRow> rows = {
      {"alice", "m1", "http://10.0.0.1:8000", 2, 10, 20},
      {"alice", "m1", "http://10.0.0.2:8000", 1, 5, 6},
      {"alice", "m2", "http://10.0.0.1:8000", 1, 1, 1},
  };
  UserLimits limits;
  limits.weight = 2;
  limits.rpm = 60;
  EXPECT_EQ(
      UsageReportJson("alice", 86400, rows, limits),
      R"({"object":"usage","user":"alice","since":86400,"requests":4,"prompt_tokens":16,)"
      R"("completion_tokens":27,"total_tokens":43,"models":[)"
      R"({"model":"m1","requests":3,"prompt_tokens":15,"completion_tokens":26,"total_tokens":41},)"
      R"({"model":"m2","requests":1,"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}],)"
      R"("limits":{"weight":2.0,"rpm":60,"tpm":null,"tokens_per_day":null,"max_concurrent":null}})");
}

TEST(UsageReportJsonTest, NoUsageIsZeros) {
  EXPECT_EQ(
      UsageReportJson("bob", 0, {}, UserLimits{}),
      R"({"object":"usage","user":"bob","since":0,"requests":0,"prompt_tokens":0,)"
      R"("completion_tokens":0,"total_tokens":0,"models":[],)"
      R"("limits":{"weight":1.0,"rpm":null,"tpm":null,"tokens_per_day":null,"max_concurrent":null}})");
}

}  // namespace
}  // namespace bmas::gateway
