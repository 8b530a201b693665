// UntraversableAncestor: the first directory above a path that other users cannot pass through.

#include "common/traversable.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace bmas {
namespace {

namespace fs = std::filesystem;

class TraversableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = fs::temp_directory_path() / "bmas-traversable-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    base_ = tmpl;
    chmod(base_.c_str(), 0755);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(base_ / "closed", fs::perms::owner_all, ec);
    fs::remove_all(base_, ec);
  }
  fs::path base_;
};

TEST_F(TraversableTest, AllOpenIsNothing) {
  fs::create_directories(base_ / "a" / "b");
  chmod((base_ / "a").c_str(), 0755);
  chmod((base_ / "a" / "b").c_str(), 0711);
  // The temporary directory's own ancestors (/tmp, /) let others through.
  EXPECT_EQ(UntraversableAncestor(base_ / "a" / "b" / "state"), std::nullopt);
}

TEST_F(TraversableTest, NamesTheFirstClosedDirectoryAbove) {
  fs::create_directories(base_ / "closed" / "open");
  chmod((base_ / "closed" / "open").c_str(), 0755);
  chmod((base_ / "closed").c_str(), 0750);
  EXPECT_EQ(UntraversableAncestor(base_ / "closed" / "open" / "state"), base_ / "closed");
  // The path itself is not asked about, only what is above it.
  EXPECT_EQ(UntraversableAncestor(base_ / "closed"), std::nullopt);
}

TEST_F(TraversableTest, DirectoriesNotMadeYetArePassedOver) {
  EXPECT_EQ(UntraversableAncestor(base_ / "not" / "yet" / "there"), std::nullopt);
}

}  // namespace
}  // namespace bmas
