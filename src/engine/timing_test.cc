#include "engine/timing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "common/config_table.h"

namespace bmas::engine {
namespace {

using testing::HasSubstr;

// The ConfigError message thrown by `fn`, or "" when it does not throw.
std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

struct StepCase {
  int decode;
  int prefill;
  int64_t context;
  double want;
};

class StepSecondsTest : public testing::TestWithParam<StepCase> {};

TEST_P(StepSecondsTest, IsBasePlusPerTokenTerms) {
  StepTimeModel m{.base_s = 0.004,
                  .per_decode_token_s = 2e-5,
                  .per_prefill_token_s = 3e-5,
                  .per_context_token_s = 5e-8};
  const StepCase& c = GetParam();
  EXPECT_NEAR(m.StepSeconds(c.decode, c.prefill, c.context), c.want, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Cases, StepSecondsTest,
                         testing::Values(StepCase{0, 0, 0, 0.004}, StepCase{1, 0, 0, 0.00402},
                                         StepCase{0, 100, 0, 0.007}, StepCase{0, 0, 1000000, 0.054},
                                         StepCase{64, 128, 20000,
                                                  0.004 + 64 * 2e-5 + 128 * 3e-5 + 20000 * 5e-8}));

TEST(StepSecondsTest, ZeroModelIsZero) {
  EXPECT_EQ(StepTimeModel{}.StepSeconds(100, 1000, 100000), 0);
}

TEST(StepSecondsTest, FrontendTimeIsNotPartOfAStep) {
  EXPECT_EQ(StepTimeModel{.frontend_s = 1}.StepSeconds(10, 10, 10), 0);
}

TEST(BuiltinProfilesTest, HasLlamaOnH100) {
  const ProfileMap& profiles = BuiltinProfiles();
  auto it = profiles.find("llama-3.1-8b-h100");
  ASSERT_NE(it, profiles.end());
  const Profile& p = it->second;
  EXPECT_EQ(p.name, "llama-3.1-8b-h100");
  EXPECT_EQ(p.max_model_len, 131072);
  EXPECT_EQ(p.max_num_seqs, 1024);
  EXPECT_EQ(p.max_num_batched_tokens, 8192);
  EXPECT_EQ(p.block_size, 16);
  EXPECT_GT(p.time.base_s, 0);
  EXPECT_GT(p.time.per_decode_token_s, 0);
  EXPECT_GT(p.time.per_prefill_token_s, 0);
  EXPECT_GT(p.time.per_context_token_s, 0);
  EXPECT_FALSE(p.description.empty());
  // vLLM takes tens of seconds to start an 8B model (the figures are in profiles.toml).
  EXPECT_GE(p.startup_s, 20);
  EXPECT_LE(p.startup_s, 180);
  // vLLM's blog: a level-1 sleeping small model wakes in 0.26-0.82 s; level 2 reads the
  // weights again: longer, and far shorter than a cold start.
  EXPECT_GE(p.wake_s_level1, 0.26);
  EXPECT_LE(p.wake_s_level1, 0.82);
  EXPECT_GT(p.wake_s_level2, p.wake_s_level1);
  EXPECT_LT(p.wake_s_level2, p.startup_s / 4);
}

TEST(BuiltinProfilesTest, InstantHasAnAllZeroTimeModel) {
  const ProfileMap& profiles = BuiltinProfiles();
  auto it = profiles.find("instant");
  ASSERT_NE(it, profiles.end());
  const StepTimeModel& t = it->second.time;
  EXPECT_EQ(t.base_s, 0);
  EXPECT_EQ(t.per_decode_token_s, 0);
  EXPECT_EQ(t.per_prefill_token_s, 0);
  EXPECT_EQ(t.per_context_token_s, 0);
  EXPECT_EQ(it->second.max_model_len, 131072);
  EXPECT_EQ(it->second.startup_s, 0);
}

TEST(BuiltinProfilesTest, TextIsTheProfilesFile) {
  EXPECT_THAT(std::string(BuiltinProfilesToml()), HasSubstr("llama-3.1-8b-h100"));
  EXPECT_THAT(std::string(BuiltinProfilesToml()), HasSubstr("[profile.instant]"));
  EXPECT_EQ(ParseProfiles(BuiltinProfilesToml(), "x").size(), BuiltinProfiles().size());
}

TEST(DerivedKvBlocksTest, H100With8BModelGivesAboutTwentyEightThousandBlocks) {
  Profile p;  // the defaults are the H100 80 GiB / Llama-3.1-8B figures
  // (0.9 x 80 - 15 - 2) GiB = 55 GiB; a 16-token block holds 16 x 128 KiB = 2 MiB.
  EXPECT_EQ(p.DerivedKvBlocks(16), 55 * 512);
  EXPECT_GT(p.DerivedKvBlocks(16), 20000);
  EXPECT_LT(p.DerivedKvBlocks(16), 35000);
  EXPECT_EQ(p.DerivedKvBlocks(32), 55 * 256);
  EXPECT_EQ(BuiltinProfiles().at("llama-3.1-8b-h100").DerivedKvBlocks(16), 55 * 512);
}

TEST(DerivedKvBlocksTest, NoRoomGivesZero) {
  Profile p;
  p.weights_gib = 100;
  EXPECT_EQ(p.DerivedKvBlocks(16), 0);
}

TEST(ParseProfilesTest, MissingKeysTakeDefaults) {
  ProfileMap m = ParseProfiles("[profile.p]\n", "x.toml");
  ASSERT_EQ(m.count("p"), 1u);
  const Profile& p = m.at("p");
  EXPECT_EQ(p.name, "p");
  EXPECT_EQ(p.description, "");
  EXPECT_EQ(p.time.base_s, 0);
  EXPECT_EQ(p.max_model_len, 131072);
  EXPECT_EQ(p.max_num_seqs, 1024);
  EXPECT_EQ(p.max_num_batched_tokens, 8192);
  EXPECT_EQ(p.block_size, 16);
  EXPECT_EQ(p.num_kv_blocks, 0);
  EXPECT_EQ(p.kv_bytes_per_token, 131072);
  EXPECT_EQ(p.startup_s, 0);
  EXPECT_EQ(p.wake_s_level1, 0);
  EXPECT_EQ(p.wake_s_level2, 0);
}

TEST(ParseProfilesTest, ReadsEveryKey) {
  ProfileMap m = ParseProfiles(
      "[profile.small]\n"
      "description = \"a test GPU\"\n"
      "frontend_overhead_s = 0.002\n"
      "step_base_s = 0.01\n"
      "per_decode_token_s = 0.001\n"
      "per_prefill_token_s = 0.0001\n"
      "per_context_token_s = 0.00001\n"
      "max_model_len = 2048\n"
      "max_num_seqs = 8\n"
      "max_num_batched_tokens = 512\n"
      "block_size = 32\n"
      "num_kv_blocks = 100\n"
      "gpu_memory_gib = 24\n"
      "gpu_memory_utilization = 0.5\n"
      "weights_gib = 4\n"
      "activation_peak_gib = 1\n"
      "kv_bytes_per_token = 1024\n"
      "startup_s = 42.5\n"
      "wake_s_level1 = 0.5\n"
      "wake_s_level2 = 3.5\n",
      "x.toml");
  const Profile& p = m.at("small");
  EXPECT_EQ(p.description, "a test GPU");
  EXPECT_DOUBLE_EQ(p.time.frontend_s, 0.002);
  EXPECT_DOUBLE_EQ(p.time.base_s, 0.01);
  EXPECT_DOUBLE_EQ(p.time.per_decode_token_s, 0.001);
  EXPECT_DOUBLE_EQ(p.time.per_prefill_token_s, 0.0001);
  EXPECT_DOUBLE_EQ(p.time.per_context_token_s, 0.00001);
  EXPECT_EQ(p.max_model_len, 2048);
  EXPECT_EQ(p.max_num_seqs, 8);
  EXPECT_EQ(p.max_num_batched_tokens, 512);
  EXPECT_EQ(p.block_size, 32);
  EXPECT_EQ(p.num_kv_blocks, 100);
  EXPECT_DOUBLE_EQ(p.gpu_memory_gib, 24);
  EXPECT_DOUBLE_EQ(p.gpu_memory_utilization, 0.5);
  EXPECT_DOUBLE_EQ(p.weights_gib, 4);
  EXPECT_DOUBLE_EQ(p.activation_peak_gib, 1);
  EXPECT_EQ(p.kv_bytes_per_token, 1024);
  EXPECT_DOUBLE_EQ(p.startup_s, 42.5);
  EXPECT_DOUBLE_EQ(p.wake_s_level1, 0.5);
  EXPECT_DOUBLE_EQ(p.wake_s_level2, 3.5);
}

struct BadProfileCase {
  std::string name;
  std::string text;
  std::string want;  // expected substring of the error
};

class ParseProfilesErrorTest : public testing::TestWithParam<BadProfileCase> {};

TEST_P(ParseProfilesErrorTest, FailsNamingFileAndLine) {
  const BadProfileCase& c = GetParam();
  EXPECT_THAT(ErrorOf([&] { ParseProfiles(c.text, "x.toml"); }), HasSubstr(c.want));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ParseProfilesErrorTest,
    testing::Values(BadProfileCase{"UnknownKey", "[profile.p]\nstep_base_s = 0.1\nfoo = 1\n",
                                   "x.toml:3: unknown key 'profile.p.foo'"},
                    BadProfileCase{"UnknownTopLevelKey", "other = 1\n[profile.p]\n",
                                   "x.toml:1: unknown key 'other'"},
                    BadProfileCase{"BadType", "[profile.p]\nstep_base_s = \"fast\"\n",
                                   "x.toml:2: profile.p.step_base_s: expected a number"},
                    BadProfileCase{"OutOfRange", "[profile.p]\n\nmax_num_seqs = 0\n",
                                   "x.toml:3: profile.p.max_num_seqs: 0 is out of range"},
                    BadProfileCase{"NegativeStartup", "[profile.p]\nstartup_s = -1\n",
                                   "x.toml:2: profile.p.startup_s: -1 is out of range"},
                    BadProfileCase{"ProfileNotATable", "[profile]\np = 3\n",
                                   "x.toml:2: profile.p: "},
                    BadProfileCase{"SyntaxError", "[profile.p]\nstep_base_s = = 1\n", "x.toml:2: "},
                    BadProfileCase{"NoRoomForKvCache", "[profile.p]\nweights_gib = 100\n",
                                   "profile.p: the memory figures leave no room for a KV cache"}),
    [](const testing::TestParamInfo<BadProfileCase>& info) { return info.param.name; });

TEST(ParseProfilesTest, GivenKvBlocksNeedNoMemoryRoom) {
  ProfileMap m = ParseProfiles("[profile.p]\nweights_gib = 100\nnum_kv_blocks = 10\n", "x.toml");
  EXPECT_EQ(m.at("p").num_kv_blocks, 10);
}

class LoadProfilesTest : public testing::Test {
 protected:
  std::string WriteFile(const std::string& text) {
    std::filesystem::path dir = std::filesystem::path(testing::TempDir()) /
                                ("bmas_timing_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    path_ = dir / "profiles.toml";
    std::ofstream(path_) << text;
    return path_.string();
  }
  void TearDown() override {
    if (!path_.empty()) std::filesystem::remove_all(path_.parent_path());
  }

  std::filesystem::path path_;
};

TEST_F(LoadProfilesTest, EmptyFileNameGivesTheBuiltins) {
  ProfileMap m = LoadProfiles("");
  EXPECT_EQ(m.size(), BuiltinProfiles().size());
  EXPECT_EQ(m.count("instant"), 1u);
}

TEST_F(LoadProfilesTest, FileAddsAndReplacesProfiles) {
  std::string file = WriteFile(
      "[profile.instant]\n"
      "step_base_s = 0.5\n"
      "\n"
      "[profile.custom]\n"
      "max_model_len = 4096\n");
  ProfileMap m = LoadProfiles(file);
  EXPECT_EQ(m.size(), BuiltinProfiles().size() + 1);
  EXPECT_DOUBLE_EQ(m.at("instant").time.base_s, 0.5);
  EXPECT_EQ(m.at("custom").max_model_len, 4096);
  // Untouched built-ins stay as they are.
  EXPECT_DOUBLE_EQ(m.at("llama-3.1-8b-h100").time.base_s,
                   BuiltinProfiles().at("llama-3.1-8b-h100").time.base_s);
}

TEST_F(LoadProfilesTest, ErrorsNameTheFile) {
  std::string file = WriteFile("[profile.custom]\nbogus = 1\n");
  EXPECT_THAT(ErrorOf([&] { LoadProfiles(file); }),
              HasSubstr(file + ":2: unknown key 'profile.custom.bogus'"));
}

TEST_F(LoadProfilesTest, MissingFileIsAnError) {
  std::string missing = testing::TempDir() + "/bmas_no_such_profiles.toml";
  EXPECT_THAT(ErrorOf([&] { LoadProfiles(missing); }), HasSubstr(missing));
}

}  // namespace
}  // namespace bmas::engine

namespace bmas::engine {
namespace {

// Issue 26: a replica on a MIG slice. Llama-3.1-8B's H100 profile on a 3g.40gb: half the memory
// (4 of 8 memory slices), so its bandwidth-bound terms take twice as long, and 3 of 7 SMs, so
// its compute-bound terms take 7/3 as long; a 1g.10gb cannot hold its 17 GiB.
TEST(MigSliceProfileTest, ASliceScalesMemoryBandwidthAndCompute) {
  const Profile& whole = BuiltinProfiles().at("llama-3.1-8b-h100");
  auto slice = FindProfile(BuiltinProfiles(), "llama-3.1-8b-h100@3g.40gb");
  ASSERT_TRUE(slice) << slice.error().message;
  EXPECT_EQ(slice->name, "llama-3.1-8b-h100@3g.40gb");
  EXPECT_DOUBLE_EQ(slice->gpu_memory_gib, 40);
  EXPECT_DOUBLE_EQ(slice->time.base_s, whole.time.base_s * 2);
  EXPECT_DOUBLE_EQ(slice->time.per_context_token_s, whole.time.per_context_token_s * 2);
  EXPECT_DOUBLE_EQ(slice->time.per_decode_token_s, whole.time.per_decode_token_s * 7 / 3);
  EXPECT_DOUBLE_EQ(slice->time.per_prefill_token_s, whole.time.per_prefill_token_s * 7 / 3);
  EXPECT_DOUBLE_EQ(slice->time.frontend_s, whole.time.frontend_s);
  // What is left for the KV cache: 0.9 x 40 - 15 - 2 GiB, against 0.9 x 80 - 17 on the GPU.
  EXPECT_GT(slice->DerivedKvBlocks(16), 0);
  EXPECT_NEAR(static_cast<double>(slice->DerivedKvBlocks(16)) / whole.DerivedKvBlocks(16),
              (0.9 * 40 - 17) / (0.9 * 80 - 17), 0.01);
  auto small = FindProfile(BuiltinProfiles(), "llama-3.1-8b-h100@1g.10gb");
  ASSERT_FALSE(small);
  EXPECT_THAT(small.error().message, ::testing::HasSubstr("a 1g.10gb slice has 10.0 GiB"));
  EXPECT_FALSE(FindProfile(BuiltinProfiles(), "llama-3.1-8b-h100@h100"));
  auto unknown = FindProfile(BuiltinProfiles(), "nope@3g.40gb");
  ASSERT_FALSE(unknown);
  EXPECT_THAT(unknown.error().message, ::testing::HasSubstr("unknown profile 'nope'"));
}

}  // namespace
}  // namespace bmas::engine
