#include "gateway/backend_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas::gateway {
namespace {

TEST(BackendSourceTest, ReplicasAreBackendsWhileStartingOrReadyAndDeployedModelsAreKnown) {
  const std::vector<ReplicaRecord> replicas = {
      {1, "m", ReplicaState::kReady, "oss01", 18100, "http://127.0.0.1:18100", 1, true, 0},
      {2, "m", ReplicaState::kStarting, "oss02", 18101, "http://127.0.0.1:18101", 1, false, 0},
      {3, "m", ReplicaState::kDraining, "oss02", 18102, "http://127.0.0.1:18102", 1, false, 0},
      {4, "m", ReplicaState::kPending, "", 18103, "", 1, false, 0},
  };
  BackendSet set = MergeBackendSources({"http://10.0.0.9:8000"},
                                       {Deployment{.model = "m"}, Deployment{.model = "cold"}},
                                       replicas);
  EXPECT_THAT(set.urls, ::testing::ElementsAre("http://10.0.0.9:8000", "http://127.0.0.1:18100",
                                               "http://127.0.0.1:18101"));
  EXPECT_TRUE(set.deployed.contains("cold"));
  EXPECT_EQ(set.deployed.size(), 2u);
}

}  // namespace
}  // namespace bmas::gateway
