// `bmas cluster init` and `bmas cluster token` as an admin runs them on the controller: the
// real binary on a state dir of the test's own, as root, and refused for a non-root account
// the test creates.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cluster/cluster_files.h"
#include "engine_process.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class ClusterCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "cluster init is root's; run the tests as root";
    // Every account may enter the directory: a student runs the shared binary copied there.
    fs::permissions(dir_.path(), fs::perms::owner_all | fs::perms::group_read |
                                     fs::perms::group_exec | fs::perms::others_read |
                                     fs::perms::others_exec);
    state_ = dir_.path() + "/state";
    inventory_ = dir_.path() + "/cluster.toml";
    fs::copy_file(std::string(BMAS_SOURCE_DIR) + "/examples/cluster-12x4.toml", inventory_);
    fs::permissions(inventory_, fs::perms::owner_read | fs::perms::owner_write |
                                    fs::perms::group_read | fs::perms::others_read);
  }

  CommandOutput Bmas(const std::vector<std::string>& args, const std::string& user = "") {
    auto r = RunBmasIn(dir_.path(), state_, args, user);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  // The token of the one line a command printed on stdout, parsed at `now`.
  static cluster::JoinToken TokenOf(const CommandOutput& r, int64_t now) {
    static const std::regex kLine("bmas node join (bmas1\\.[A-Za-z0-9_-]+)\n");
    std::smatch m;
    EXPECT_TRUE(std::regex_match(r.out, m, kLine)) << "stdout: " << r.out;
    if (m.empty()) return {};
    auto token = cluster::ParseJoinToken(m[1].str(), now);
    EXPECT_TRUE(token) << token.error().message;
    return token ? *token : cluster::JoinToken{};
  }

  static mode_t ModeOf(const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  }

  TempDir dir_;
  std::string state_;
  std::string inventory_;
};

TEST_F(ClusterCliTest, InitMakesTheCaAndPrintsOneJoinLine) {
  const int64_t before = UnixNow();
  CommandOutput init = Bmas({"cluster", "init", "--cluster", inventory_});
  ASSERT_EQ(init.exit_code, 0) << init.err;
  EXPECT_THAT(init.err, HasSubstr("Made the cluster CA " + state_ + "/cluster/ca.crt"));
  const cluster::JoinToken token = TokenOf(init, before);
  // The inventory's controller, the default join port, an hour.
  EXPECT_EQ(token.address, "10.0.0.1");
  EXPECT_EQ(token.port, cluster::kDefaultJoinPort);
  EXPECT_GE(token.expires_at, before + 3600);
  EXPECT_LE(token.expires_at, UnixNow() + 3600);

  const fs::path dir = state_ + "/cluster";
  EXPECT_EQ(ModeOf(dir), 0700u);
  for (const char* name : {"ca.key", "ca.crt", "join-tokens", "join-endpoint"}) {
    EXPECT_EQ(ModeOf(dir / name), 0600u) << name;
  }
  auto sha = cluster::CertificateSha256(Slurp(dir / "ca.crt"));
  ASSERT_TRUE(sha);
  EXPECT_EQ(token.ca_sha256, *sha);
  EXPECT_THAT(init.err, HasSubstr("sha256:" + cluster::Hex(*sha)));
  // The controller kept the secret's hash, not the secret.
  EXPECT_EQ(Slurp(dir / "join-tokens").find(cluster::Hex(token.secret)), std::string::npos);
  auto records = cluster::LoadTokenRecords(state_);
  ASSERT_TRUE(records) << records.error().message;
  EXPECT_TRUE(cluster::CheckJoinSecret(*records, token.secret, UnixNow()));
}

TEST_F(ClusterCliTest, ASecondInitKeepsTheCaAndTokenMakesNewTokens) {
  CommandOutput first = Bmas({"cluster", "init", "--cluster", inventory_});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string ca = Slurp(state_ + "/cluster/ca.crt");
  const std::string key = Slurp(state_ + "/cluster/ca.key");

  CommandOutput second =
      Bmas({"cluster", "init", "--cluster", inventory_, "--address", "mgs1", "--port", "7443"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_THAT(second.err, HasSubstr("Kept the cluster CA"));
  EXPECT_EQ(Slurp(state_ + "/cluster/ca.crt"), ca);
  EXPECT_EQ(Slurp(state_ + "/cluster/ca.key"), key);

  const int64_t before = UnixNow();
  CommandOutput more = Bmas({"cluster", "token", "--ttl-s", "60"});
  ASSERT_EQ(more.exit_code, 0) << more.err;
  const cluster::JoinToken a = TokenOf(first, before);
  const cluster::JoinToken b = TokenOf(second, before);
  const cluster::JoinToken c = TokenOf(more, before);
  EXPECT_EQ(c.address, "mgs1");
  EXPECT_EQ(c.port, 7443);
  EXPECT_GE(c.expires_at, before + 60);
  EXPECT_LE(c.expires_at, UnixNow() + 60);
  EXPECT_EQ(a.ca_sha256, c.ca_sha256);
  EXPECT_NE(a.secret, b.secret);
  EXPECT_NE(b.secret, c.secret);
  auto records = cluster::LoadTokenRecords(state_);
  ASSERT_TRUE(records);
  EXPECT_EQ(records->size(), 3u);
  for (const auto* t : {&a, &b, &c}) {
    EXPECT_TRUE(cluster::CheckJoinSecret(*records, t->secret, before));
  }
}

TEST_F(ClusterCliTest, TokenBeforeInitAndABadInventoryAreClearErrors) {
  CommandOutput token = Bmas({"cluster", "token"});
  EXPECT_EQ(token.exit_code, 1);
  EXPECT_THAT(token.err, HasSubstr("run `bmas cluster init --cluster INVENTORY` first"));
  EXPECT_EQ(token.out, "");

  const std::string bad = dir_.WriteFile("bad.toml", "[cluster]\nnodes = 3\n");
  CommandOutput init = Bmas({"cluster", "init", "--cluster", bad});
  EXPECT_EQ(init.exit_code, 2);
  EXPECT_THAT(init.err, HasSubstr("bad.toml"));
  EXPECT_FALSE(fs::exists(state_ + "/cluster/ca.key"));

  CommandOutput bad_address =
      Bmas({"cluster", "init", "--cluster", inventory_, "--address", "10.0.0.1;reboot"});
  EXPECT_EQ(bad_address.exit_code, 2);
  EXPECT_THAT(bad_address.err, HasSubstr("is not an address and port that nodes can join at"));
}

TEST_F(ClusterCliTest, ANonRootAccountIsRefusedAndCannotReadTheKey) {
  const std::string student = EnsureUnixUser("bmastest1");
  CommandOutput init = Bmas({"cluster", "init", "--cluster", inventory_}, student);
  EXPECT_EQ(init.exit_code, 2);
  EXPECT_THAT(init.err, HasSubstr("only root sets up the cluster"));
  EXPECT_EQ(init.out, "");
  EXPECT_FALSE(fs::exists(state_ + "/cluster"));

  ASSERT_EQ(Bmas({"cluster", "init", "--cluster", inventory_}).exit_code, 0);
  CommandOutput token = Bmas({"cluster", "token"}, student);
  EXPECT_EQ(token.exit_code, 2);
  EXPECT_THAT(token.err, HasSubstr("only root makes join tokens"));
  EXPECT_EQ(token.out, "");
  for (const char* name : {"ca.key", "join-tokens"}) {
    EXPECT_FALSE(UserCanRead(student, state_ + "/cluster/" + name)) << name;
  }
}

}  // namespace
}  // namespace bmas::testing
