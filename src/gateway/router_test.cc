#include "gateway/router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace bmas::gateway {
namespace {

std::vector<BackendState> Backends(int n) {
  std::vector<BackendState> backends(n);
  for (int i = 0; i < n; ++i) backends[i].id = "engine-" + std::to_string(i);
  return backends;
}

// The backend id each of `keys` keys goes to.
std::vector<std::string> Assign(Router& router, const std::vector<BackendState>& backends,
                                int keys) {
  std::vector<std::string> ids;
  for (int k = 0; k < keys; ++k) {
    auto i = router.Pick(backends, static_cast<uint64_t>(k));
    ids.push_back(i ? backends[*i].id : "");
  }
  return ids;
}

struct SpreadCase {
  int virtual_nodes;
  double tolerance;  // of the mean; about 2.5 standard deviations (1 / sqrt(virtual_nodes))
};

class PrefixSpreadTest : public testing::TestWithParam<SpreadCase> {};

TEST_P(PrefixSpreadTest, DistinctKeysSpreadEvenly) {
  Router router(RoutingPolicy::kPrefixAffinity, 1.25, GetParam().virtual_nodes);
  const auto backends = Backends(4);
  std::map<std::string, int> counts;
  for (const std::string& id : Assign(router, backends, 10000)) ++counts[id];
  ASSERT_EQ(counts.size(), 4u);
  for (const auto& [id, count] : counts) {
    EXPECT_NEAR(count, 2500, GetParam().tolerance * 2500) << id;
  }
}

INSTANTIATE_TEST_SUITE_P(VirtualNodes, PrefixSpreadTest,
                         testing::Values(SpreadCase{64, 0.30}, SpreadCase{256, 0.15},
                                         SpreadCase{1024, 0.08}));

TEST(RouterTest, KeyStaysWhileLoadAllows) {
  Router router(RoutingPolicy::kPrefixAffinity);
  auto backends = Backends(4);
  for (auto& b : backends) b.in_flight = 2;
  const auto home = router.Pick(backends, 42);
  ASSERT_TRUE(home);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(router.Pick(backends, 42), home);
  // Other loads change the bound but not the choice while home is within it.
  backends[(*home + 1) % 4].in_flight = 0;
  EXPECT_EQ(router.Pick(backends, 42), home);
}

TEST(RouterTest, KeyMovesWhenItsBackendIsOverTheBound) {
  Router router(RoutingPolicy::kPrefixAffinity, 1.25);
  auto backends = Backends(4);
  for (auto& b : backends) b.in_flight = 2;
  const size_t home = *router.Pick(backends, 42);
  // Total 8 + 2 = 10; bound ceil(1.25 * 11 / 4) = 4; home would take its 5th.
  backends[home].in_flight = 4;
  const auto moved = router.Pick(backends, 42);
  ASSERT_TRUE(moved);
  EXPECT_NE(*moved, home);
  EXPECT_EQ(router.Pick(backends, 42), moved);  // the next one clockwise, consistently
  backends[home].in_flight = 2;
  EXPECT_EQ(router.Pick(backends, 42), home);  // back home once the load allows
}

TEST(RouterTest, KeyMovesWhenItsBackendIsAtCapacity) {
  Router router(RoutingPolicy::kPrefixAffinity, 100);
  auto backends = Backends(3);
  const size_t home = *router.Pick(backends, 7);
  backends[home].capacity = 3;
  backends[home].in_flight = 2;
  EXPECT_EQ(router.Pick(backends, 7), home);
  backends[home].in_flight = 3;
  EXPECT_NE(router.Pick(backends, 7), home);
}

TEST(RouterTest, OneHotKeyNeverExceedsTheLoadBound) {
  Router router(RoutingPolicy::kPrefixAffinity, 1.25);
  auto backends = Backends(4);
  int total = 0;
  for (int r = 0; r < 400; ++r) {
    const auto i = router.Pick(backends, 99);
    ASSERT_TRUE(i);
    ++backends[*i].in_flight;
    ++total;
    const int bound = static_cast<int>(std::ceil(1.25 * total / 4));
    for (const auto& b : backends) EXPECT_LE(b.in_flight, bound);
  }
}

TEST(RouterTest, FallsBackToLeastLoadWhenNoneQualifies) {
  Router router(RoutingPolicy::kPrefixAffinity);
  auto backends = Backends(3);
  for (auto& b : backends) {
    b.capacity = 1;
    b.in_flight = 1;
    b.outstanding_tokens = 500;
  }
  backends[1].outstanding_tokens = 100;
  EXPECT_EQ(router.Pick(backends, 5), 1u);
}

TEST(RouterTest, RemovingABackendMovesOnlyItsKeys) {
  Router router(RoutingPolicy::kPrefixAffinity);
  auto backends = Backends(4);
  const auto before = Assign(router, backends, 10000);
  backends.erase(backends.begin() + 2);
  const auto after = Assign(router, backends, 10000);
  int moved = 0;
  for (size_t k = 0; k < before.size(); ++k) {
    if (before[k] == "engine-2") {
      ++moved;
      EXPECT_NE(after[k], "engine-2");
    } else {
      EXPECT_EQ(after[k], before[k]) << "key " << k;
    }
  }
  EXPECT_GT(moved, 1500);  // engine-2 had about a quarter
  // Adding it back restores the original assignment.
  EXPECT_EQ(Assign(router, Backends(4), 10000), before);
}

TEST(RouterTest, UnhealthyBackendLosesOnlyItsKeys) {
  Router router(RoutingPolicy::kPrefixAffinity);
  auto backends = Backends(4);
  const auto before = Assign(router, backends, 2000);
  backends[1].healthy = false;
  const auto after = Assign(router, backends, 2000);
  for (size_t k = 0; k < before.size(); ++k) {
    if (before[k] == "engine-1") {
      EXPECT_NE(after[k], "engine-1");
    } else {
      EXPECT_EQ(after[k], before[k]);
    }
  }
}

class CandidateTest : public testing::TestWithParam<RoutingPolicy> {};

TEST_P(CandidateTest, SkipsUnhealthyAndDraining) {
  Router router(GetParam());
  auto backends = Backends(3);
  backends[0].healthy = false;
  backends[1].draining = true;
  backends[2].in_flight = 50;
  backends[2].outstanding_tokens = 100000;
  for (uint64_t key = 0; key < 20; ++key) EXPECT_EQ(router.Pick(backends, key), 2u);
  EXPECT_EQ(router.Pick(backends, std::nullopt), 2u);
  backends[2].healthy = false;
  EXPECT_EQ(router.Pick(backends, 1), std::nullopt);
  EXPECT_EQ(router.Pick({}, 1), std::nullopt);
}

INSTANTIATE_TEST_SUITE_P(Policies, CandidateTest,
                         testing::Values(RoutingPolicy::kCacheAware,
                                         RoutingPolicy::kPrefixAffinity, RoutingPolicy::kLeastLoad,
                                         RoutingPolicy::kRoundRobin));

struct LeastLoadCase {
  const char* name;
  BackendState a, b;  // b should win
};

BackendState Load(int64_t tokens, int in_flight, int waiting, double kv) {
  BackendState s;
  s.outstanding_tokens = tokens;
  s.in_flight = in_flight;
  s.engine_waiting = waiting;
  s.kv_usage = kv;
  return s;
}

class LeastLoadTest : public testing::TestWithParam<LeastLoadCase> {};

TEST_P(LeastLoadTest, PicksTheLighterInEitherOrder) {
  std::vector<BackendState> backends = {GetParam().a, GetParam().b};
  backends[0].id = "a";
  backends[1].id = "b";
  Router router(RoutingPolicy::kLeastLoad);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(router.Pick(backends, std::nullopt), 1u);
  std::swap(backends[0], backends[1]);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(router.Pick(backends, std::nullopt), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Order, LeastLoadTest,
    testing::Values(LeastLoadCase{"OutstandingTokensFirst", Load(200, 0, 0, 0),
                                  Load(100, 9, 9, 0.9)},
                    LeastLoadCase{"ThenInFlight", Load(100, 3, 0, 0), Load(100, 2, 9, 0.9)},
                    LeastLoadCase{"ThenEngineWaiting", Load(100, 2, 5, 0), Load(100, 2, 4, 0.9)},
                    LeastLoadCase{"ThenKvUsage", Load(100, 2, 4, 0.5), Load(100, 2, 4, 0.4)}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(RouterTest, LeastLoadTiesRotate) {
  Router router(RoutingPolicy::kLeastLoad);
  auto backends = Backends(4);
  backends[1].outstanding_tokens = 10;  // the other three tie
  std::vector<size_t> picks;
  for (int i = 0; i < 6; ++i) picks.push_back(*router.Pick(backends, std::nullopt));
  EXPECT_EQ(picks, (std::vector<size_t>{0, 2, 3, 0, 2, 3}));
}

TEST(RouterTest, RoundRobinRotates) {
  Router router(RoutingPolicy::kRoundRobin);
  auto backends = Backends(3);
  backends[0].outstanding_tokens = 1000000;  // load is ignored
  std::vector<size_t> picks;
  for (int i = 0; i < 6; ++i) picks.push_back(*router.Pick(backends, 1));
  EXPECT_EQ(picks, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
  backends[1].healthy = false;
  picks.clear();
  for (int i = 0; i < 4; ++i) picks.push_back(*router.Pick(backends, 1));
  EXPECT_EQ(picks, (std::vector<size_t>{0, 2, 0, 2}));
}

TEST(RouterTest, PrefixAffinityWithoutAKeyRotates) {
  Router router(RoutingPolicy::kPrefixAffinity);
  auto backends = Backends(3);
  std::vector<size_t> picks;
  for (int i = 0; i < 3; ++i) picks.push_back(*router.Pick(backends, std::nullopt));
  EXPECT_EQ(picks, (std::vector<size_t>{0, 1, 2}));
}

struct PolicyNameCase {
  const char* name;
  RoutingPolicy policy;
};

class ParseRoutingPolicyTest : public testing::TestWithParam<PolicyNameCase> {};

TEST_P(ParseRoutingPolicyTest, RoundTrips) {
  const auto parsed = ParseRoutingPolicy(GetParam().name);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(*parsed, GetParam().policy);
  EXPECT_STREQ(RoutingPolicyName(*parsed), GetParam().name);
  EXPECT_EQ(Router(*parsed).policy(), GetParam().policy);
}

INSTANTIATE_TEST_SUITE_P(
    Names, ParseRoutingPolicyTest,
    testing::Values(PolicyNameCase{"cache_aware", RoutingPolicy::kCacheAware},
                    PolicyNameCase{"prefix_affinity", RoutingPolicy::kPrefixAffinity},
                    PolicyNameCase{"least_load", RoutingPolicy::kLeastLoad},
                    PolicyNameCase{"round_robin", RoutingPolicy::kRoundRobin}));

TEST(ParseRoutingPolicyTest, RejectsOthersNamingTheAllowed) {
  for (const char* bad : {"", "random", "Least_Load", "round-robin"}) {
    const auto parsed = ParseRoutingPolicy(bad);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument);
    for (const char* allowed : {"cache_aware", "prefix_affinity", "least_load", "round_robin"}) {
      EXPECT_NE(parsed.error().message.find(allowed), std::string::npos) << allowed;
    }
  }
}

TEST(PrefixKeyTest, ShortPromptHasNoKey) {
  EXPECT_EQ(PrefixKey(""), std::nullopt);
  EXPECT_EQ(PrefixKey(std::string(255, 'x')), std::nullopt);
  EXPECT_NE(PrefixKey(std::string(256, 'x')), std::nullopt);
  EXPECT_EQ(PrefixKey(std::string(1000, 'x'), 0), std::nullopt);
}

TEST(PrefixKeyTest, SameLeadingBlocksSameKey) {
  const std::string system(256, 's');
  // Both have one full block; what follows it differs.
  EXPECT_EQ(PrefixKey(system + "hello"), PrefixKey(system + "goodbye, cruel world"));
  std::string other = system;
  other[0] = 't';
  EXPECT_NE(PrefixKey(system + "hello"), PrefixKey(other + "hello"));
  other = system;
  other[255] = 't';  // the last byte of the first block counts too
  EXPECT_NE(PrefixKey(system + "hello"), PrefixKey(other + "hello"));
}

TEST(PrefixKeyTest, TextBeyondMaxBlocksIsIgnored) {
  std::string a(8 * 256, 'p');
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<char>('a' + i % 26);
  EXPECT_EQ(PrefixKey(a + std::string(5000, 'x')), PrefixKey(a + std::string(3000, 'y')));
  EXPECT_EQ(PrefixKey(a), PrefixKey(a + "z"));
  // Within max_blocks, a further full block changes the key.
  const std::string one_block = a.substr(0, 256);
  EXPECT_NE(PrefixKey(one_block), PrefixKey(a.substr(0, 512)));
  EXPECT_EQ(PrefixKey(a.substr(0, 300), 256, 1), PrefixKey(a, 256, 1));
}

}  // namespace
}  // namespace bmas::gateway
