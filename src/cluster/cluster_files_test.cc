#include "cluster/cluster_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace bmas::cluster {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kNow = 1'800'000'000;

class ClusterFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::path(::testing::TempDir()) / "cluster_files_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    state_ = (fs::path(root_) / "state").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  static mode_t ModeOf(const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  }
  static uid_t OwnerOf(const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(lstat(p.c_str(), &st), 0) << p;
    return st.st_uid;
  }
  static std::string Slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string root_;
  std::string state_;
  ManualEnv env_;
  JoinEndpoint endpoint_{"10.0.0.1", 6830};
};

TEST_F(ClusterFilesTest, MakesACaOncePrivately) {
  auto first = EnsureClusterCa(state_, "lab", endpoint_, kNow);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(first->created);
  const fs::path dir = ClusterDir(state_);
  EXPECT_EQ(ModeOf(dir), 0700u);
  for (const char* name : {"ca.key", "ca.crt", "replica-ca.key", "replica-ca.crt"}) {
    EXPECT_EQ(ModeOf(dir / name), 0600u) << name;
    EXPECT_EQ(OwnerOf(dir / name), geteuid()) << name;
  }
  EXPECT_EQ(Slurp(dir / "ca.crt"), first->ca.cert_pem);
  // The replica CA is another CA, its certificate public beside the state.
  EXPECT_NE(first->replica_ca.cert_pem, first->ca.cert_pem);
  EXPECT_EQ(Slurp(ReplicaCaPath(state_)), first->replica_ca.cert_pem);
  EXPECT_EQ(ModeOf(ReplicaCaPath(state_)), 0644u);
  EXPECT_EQ(first->ca_sha256, *CertificateSha256(first->ca.cert_pem));

  auto second = EnsureClusterCa(state_, "lab", endpoint_, kNow + 100);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_FALSE(second->created);
  EXPECT_EQ(second->ca.cert_pem, first->ca.cert_pem);
  EXPECT_EQ(second->ca.key_pem, first->ca.key_pem);
  EXPECT_EQ(second->replica_ca.key_pem, first->replica_ca.key_pem);
  auto loaded = LoadClusterCa(state_);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->ca_sha256, first->ca_sha256);
  EXPECT_EQ(loaded->replica_ca.cert_pem, first->replica_ca.cert_pem);
}

// Root writes the replica CA's public copy only into a state directory no other account can
// write (a file or link planted there by another account is never written through).
TEST_F(ClusterFilesTest, AStateDirectoryOthersMayWriteIsRefused) {
  ASSERT_TRUE(fs::create_directories(state_));
  fs::permissions(state_, fs::perms::all);
  auto r = EnsureClusterCa(state_, "lab", endpoint_, kNow);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(r.error().message.find(state_), std::string::npos) << r.error().message;
  EXPECT_FALSE(fs::exists(ReplicaCaPath(state_)));
}

TEST_F(ClusterFilesTest, WithoutACaSaysToRunInit) {
  auto loaded = LoadClusterCa(state_);
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code, ErrorCode::kNotFound);
  EXPECT_NE(loaded.error().message.find("bmas cluster init"), std::string::npos);
  auto token = IssueJoinToken(state_, env_, kNow);
  ASSERT_FALSE(token);
  EXPECT_NE(token.error().message.find("bmas cluster init"), std::string::npos);
}

TEST_F(ClusterFilesTest, IssuedTokensAreKeptAsHashesAndPruned) {
  auto ca = EnsureClusterCa(state_, "lab", endpoint_, kNow);
  ASSERT_TRUE(ca);
  auto token = IssueJoinToken(state_, env_, kNow);
  ASSERT_TRUE(token) << token.error().message;
  EXPECT_EQ(token->ca_sha256, ca->ca_sha256);
  EXPECT_EQ(token->expires_at, kNow + kDefaultJoinTokenTtlSeconds);
  auto parsed = ParseJoinToken(FormatJoinToken(*token), kNow);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->address, "10.0.0.1");
  EXPECT_EQ(parsed->port, 6830);

  const fs::path tokens = fs::path(ClusterDir(state_)) / "join-tokens";
  EXPECT_EQ(ModeOf(tokens), 0600u);
  EXPECT_EQ(Slurp(tokens).find(Hex(token->secret)), std::string::npos);
  auto records = LoadTokenRecords(state_);
  ASSERT_TRUE(records) << records.error().message;
  ASSERT_EQ(records->size(), 1u);
  EXPECT_TRUE(CheckJoinSecret(*records, token->secret, kNow + 10));

  auto second = IssueJoinToken(state_, env_, kNow + 10, 60);
  ASSERT_TRUE(second);
  EXPECT_NE(second->secret, token->secret);
  EXPECT_EQ(LoadTokenRecords(state_)->size(), 2u);
  // Past the first token's hour, a new token drops both expired records.
  auto third = IssueJoinToken(state_, env_, kNow + kDefaultJoinTokenTtlSeconds, 60);
  ASSERT_TRUE(third);
  records = LoadTokenRecords(state_);
  ASSERT_EQ(records->size(), 1u);
  EXPECT_FALSE(CheckJoinSecret(*records, token->secret, kNow + kDefaultJoinTokenTtlSeconds));
  EXPECT_TRUE(CheckJoinSecret(*records, third->secret, kNow + kDefaultJoinTokenTtlSeconds));
}

TEST_F(ClusterFilesTest, RefusesABadEndpointOrLifetime) {
  for (const JoinEndpoint& bad :
       {JoinEndpoint{"", 6830}, JoinEndpoint{"10.0.0.1", 0}, JoinEndpoint{"10.0.0.1 ; rm", 6830}}) {
    auto r = EnsureClusterCa(state_, "lab", bad, kNow);
    ASSERT_FALSE(r) << bad.address;
    EXPECT_EQ(r.error().param, "address");
  }
  EXPECT_FALSE(fs::exists(ClusterDir(state_)));
  ASSERT_TRUE(EnsureClusterCa(state_, "lab", endpoint_, kNow));
  EXPECT_FALSE(IssueJoinToken(state_, env_, kNow, 0));
  EXPECT_FALSE(fs::exists(fs::path(ClusterDir(state_)) / "join-tokens"));
}

TEST_F(ClusterFilesTest, ASecondInitKeepsTheCaAndMovesTheEndpoint) {
  auto first = EnsureClusterCa(state_, "lab", endpoint_, kNow);
  ASSERT_TRUE(first);
  auto second = EnsureClusterCa(state_, "lab", {"mgs1", 7000}, kNow);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->ca_sha256, first->ca_sha256);
  auto token = IssueJoinToken(state_, env_, kNow);
  ASSERT_TRUE(token);
  EXPECT_EQ(token->address, "mgs1");
  EXPECT_EQ(token->port, 7000);
}

TEST_F(ClusterFilesTest, RefusesADirectoryOthersMayWriteOrALink) {
  fs::create_directories(ClusterDir(state_));
  chmod(ClusterDir(state_).c_str(), 0777);
  auto open = EnsureClusterCa(state_, "lab", endpoint_, kNow);
  ASSERT_FALSE(open);
  EXPECT_EQ(open.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(open.error().message.find(ClusterDir(state_)), std::string::npos)
      << open.error().message;

  fs::remove_all(ClusterDir(state_));
  const fs::path elsewhere = fs::path(root_) / "elsewhere";
  fs::create_directories(elsewhere);
  chmod(elsewhere.c_str(), 0700);
  fs::create_directory_symlink(elsewhere, ClusterDir(state_));
  auto linked = EnsureClusterCa(state_, "lab", endpoint_, kNow);
  ASSERT_FALSE(linked);
  EXPECT_FALSE(fs::exists(elsewhere / "ca.key"));
}

TEST_F(ClusterFilesTest, ACertificateWithoutItsKeyIsNamed) {
  ASSERT_TRUE(EnsureClusterCa(state_, "lab", endpoint_, kNow));
  fs::remove(fs::path(ClusterDir(state_)) / "ca.key");
  auto again = EnsureClusterCa(state_, "lab", endpoint_, kNow);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message.find("ca.key"), std::string::npos) << again.error().message;
}

}  // namespace
}  // namespace bmas::cluster
