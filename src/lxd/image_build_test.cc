#include "lxd/image_build.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "lxd/fake_lxd_api.h"

namespace bmas::lxd {
namespace {

constexpr const char* kDebian822 =
    "Types: deb\n"
    "URIs: http://mirror.example/debian\n"
    "Suites: bookworm bookworm-updates\n"
    "Components: main\n"
    "\n"
    "Types: deb\n"
    "URIs: http://mirror.example/debian-security\n"
    "Suites: bookworm-security\n"
    "Components: main\n";

constexpr const char* kThirdParty822 =
    "Types: deb\n"
    "URIs: https://thirdparty.example/node_20.x\n"
    "Suites: nodistro\n"
    "Components: main\n";

struct MirrorCase {
  const char* what;
  std::vector<AptSourceFile> files;
  std::string want;  // "" = NotFound
};

class DebianMirrorTest : public ::testing::TestWithParam<MirrorCase> {};

TEST_P(DebianMirrorTest, PicksTheSourceApt) {
  const MirrorCase& c = GetParam();
  auto mirror = DebianMirrorIn(c.files, "bookworm");
  if (c.want.empty()) {
    ASSERT_FALSE(mirror) << *mirror;
    EXPECT_EQ(mirror.error().code, ErrorCode::kNotFound);
  } else {
    ASSERT_TRUE(mirror) << mirror.error().message;
    EXPECT_EQ(*mirror, c.want);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sources, DebianMirrorTest,
    ::testing::Values(
        // A file apt does not read (a disabled one), named before the real one.
        MirrorCase{"ignored extension",
                   {{"aaa.sources.disabled", kThirdParty822}, {"debian.sources", kDebian822}},
                   "http://mirror.example/debian"},
        MirrorCase{"another suite", {{"a.sources", kThirdParty822}, {"debian.sources", kDebian822}},
                   "http://mirror.example/debian"},
        MirrorCase{"one-line with options",
                   {{"sources.list", "# comment\ndeb-src http://mirror.example/src bookworm main\n"
                                     "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian "
                                     "bookworm main\n"}},
                   "http://mirror.example/debian"},
        MirrorCase{"disabled stanza",
                   {{"debian.sources", std::string("Enabled: no\n") + kDebian822 +
                                           "\nTypes: deb\nURIs: http://other.example/debian\n"
                                           "Suites: bookworm\nComponents: main\n"}},
                   "http://other.example/debian"},
        MirrorCase{"security only",
                   {{"s.sources", "Types: deb\nURIs: http://mirror.example/debian-security\n"
                                  "Suites: bookworm-security\nComponents: main\n"}},
                   ""},
        MirrorCase{"nothing", {}, ""}),
    [](const ::testing::TestParamInfo<MirrorCase>& info) {
      std::string name = info.param.what;
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

TEST(DefaultImageTest, HoldsWhatAStudentWorksWithAndNoCuda) {
  for (const char* init : {"minimal", "systemd"}) {
    const std::vector<std::string> p = DebianPackages(init);
    for (const char* want : {"python3", "python3-venv", "python3-pip", "git", "build-essential",
                             "ca-certificates", "less", "nano"}) {
      EXPECT_NE(std::find(p.begin(), p.end(), want), p.end()) << init << " lacks " << want;
    }
    // The driver's user space comes from the host at job time (cuda_devices.h).
    for (const std::string& name : p) EXPECT_EQ(name.find("cuda"), std::string::npos) << name;
  }
  EXPECT_EQ(DebianPackages("minimal")[0], "tini");
  EXPECT_EQ(DebianPackages("systemd")[0], "systemd-sysv");
}

TEST(DefaultImageTest, TheCacheKeyNamesTheSuiteAndInitAndChangesWithThem) {
  const std::string minimal = CachedImageName("minimal");
  EXPECT_THAT(minimal, ::testing::MatchesRegex("debian-bookworm-minimal-[0-9a-f]{16}\\.tar\\.gz"));
  EXPECT_EQ(minimal, CachedImageName("minimal"));  // the same recipe, the same file
  // The digest covers the recipe, not only the name's init.
  auto digest = [](const std::string& name) { return name.substr(name.size() - 23, 16); };
  EXPECT_NE(digest(minimal), digest(CachedImageName("systemd")));
}

class ImageCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/bmas-image-cache-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    request_.work_dir = dir_ + "/work";
    request_.cache_dir = dir_ + "/cache";
    std::filesystem::create_directories(request_.cache_dir);
    cached_ = request_.cache_dir + "/" + CachedImageName("minimal");
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string dir_, cached_;
  ImageBuildRequest request_;
  FakeLxdApi lxd_;
  ManualEnv env_;
};

TEST_F(ImageCacheTest, ACachedDebianImageIsImportedWithoutDebootstrap) {
  std::ofstream(cached_) << "a tarball";
  auto built = BuildImage(lxd_, request_, env_);
  ASSERT_TRUE(built) << built.error().message;
  EXPECT_TRUE(built->from_cache);
  EXPECT_FALSE(built->existed);
  EXPECT_EQ(built->cache_file, cached_);
  EXPECT_EQ(built->size, 9);
  EXPECT_EQ(built->alias, "bmas-debian");
  ASSERT_EQ(lxd_.images.size(), 1u);
  EXPECT_EQ(lxd_.images[0].aliases, std::vector<std::string>{"bmas-debian"});
  // Nothing was built: the work dir was never made.
  EXPECT_FALSE(std::filesystem::exists(request_.work_dir));
}

TEST_F(ImageCacheTest, TheDefaultImageIsLeftAloneWhenLxdHoldsIt) {
  Image held;
  held.fingerprint = "abc";
  held.aliases = {kDefaultImageAlias};
  lxd_.images.push_back(held);
  auto ensured = EnsureDefaultImage(lxd_, request_.work_dir, request_.cache_dir, env_);
  ASSERT_TRUE(ensured) << ensured.error().message;
  EXPECT_TRUE(ensured->existed);
  EXPECT_EQ(ensured->fingerprint, "abc");
  EXPECT_EQ(lxd_.images.size(), 1u);
}

TEST_F(ImageCacheTest, TheDefaultImageComesFromTheCacheIntoAnLxdWithout) {
  std::ofstream(cached_) << "a tarball";
  auto ensured = EnsureDefaultImage(lxd_, request_.work_dir, request_.cache_dir, env_);
  ASSERT_TRUE(ensured) << ensured.error().message;
  EXPECT_TRUE(ensured->from_cache);
  ASSERT_EQ(lxd_.images.size(), 1u);
  EXPECT_EQ(lxd_.images[0].aliases, std::vector<std::string>{kDefaultImageAlias});
}

}  // namespace
}  // namespace bmas::lxd
