#include "lxd/image_build.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace bmas::lxd
