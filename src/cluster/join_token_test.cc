#include "cluster/join_token.h"

#include <gtest/gtest.h>

#include "cluster/cluster_ca.h"
#include "slurm/jwt.h"

namespace bmas::cluster {
namespace {

constexpr int64_t kNow = 1'800'000'000;  // 2027-01-15T08:00:00Z

class JoinTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = MakeClusterCa("lab", kNow);
    ASSERT_TRUE(ca);
    ca_ = *ca;
    token_.address = "10.0.0.1";
    token_.port = 6830;
    token_.ca_sha256 = *CertificateSha256(ca_.cert_pem);
    token_.secret = NewJoinSecret(env_);
    token_.expires_at = kNow + kDefaultJoinTokenTtlSeconds;
  }

  static void ExpectSame(const JoinToken& a, const JoinToken& b) {
    EXPECT_EQ(a.address, b.address);
    EXPECT_EQ(a.port, b.port);
    EXPECT_EQ(a.ca_sha256, b.ca_sha256);
    EXPECT_EQ(a.secret, b.secret);
    EXPECT_EQ(a.expires_at, b.expires_at);
  }

  ManualEnv env_;
  CertAndKey ca_;
  JoinToken token_;
};

TEST_F(JoinTokenTest, RoundTrips) {
  const std::string text = FormatJoinToken(token_);
  EXPECT_TRUE(text.starts_with("bmas1.")) << text;
  EXPECT_EQ(text.find_first_of("=+/ \n"), std::string::npos) << text;
  EXPECT_LT(text.size(), 130u) << text;
  auto back = ParseJoinToken(text, kNow);
  ASSERT_TRUE(back) << back.error().message;
  ExpectSame(*back, token_);
  // The whole printed line, and blanks around it, work as well.
  auto line = ParseJoinToken("  bmas node join " + text + "\n", kNow);
  ASSERT_TRUE(line) << line.error().message;
  ExpectSame(*line, token_);
}

TEST_F(JoinTokenTest, RoundTripsHostNamesAndIpv6) {
  for (const char* address : {"mgs1", "mgs1.cluster.example", "fd00::1"}) {
    token_.address = address;
    auto back = ParseJoinToken(FormatJoinToken(token_), kNow);
    ASSERT_TRUE(back) << address << ": " << back.error().message;
    EXPECT_EQ(back->address, address);
  }
}

TEST_F(JoinTokenTest, SecretsAreFreshAndLong) {
  EXPECT_EQ(token_.secret.size(), kJoinSecretBytes);
  EXPECT_GE(kJoinSecretBytes * 8, 128u);
  EXPECT_NE(NewJoinSecret(env_), token_.secret);
}

TEST_F(JoinTokenTest, EveryChangedByteIsCaught) {
  const std::string text = FormatJoinToken(token_);
  const std::string payload = *Base64UrlDecode(text.substr(6));
  for (size_t i = 0; i < payload.size(); ++i) {
    std::string changed = payload;
    changed[i] = static_cast<char>(changed[i] ^ 0x01);
    auto r = ParseJoinToken("bmas1." + Base64UrlEncode(changed), kNow);
    ASSERT_FALSE(r) << "byte " << i;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("damaged"), std::string::npos) << r.error().message;
  }
}

TEST_F(JoinTokenTest, CutOrPaddedTokensAreDamaged) {
  const std::string text = FormatJoinToken(token_);
  for (const std::string& bad : {text.substr(0, text.size() - 4), text.substr(0, 20), text + "AA",
                                 text.substr(0, 6), text + "!"}) {
    auto r = ParseJoinToken(bad, kNow);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("damaged"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("bmas cluster token"), std::string::npos);
  }
}

TEST_F(JoinTokenTest, ExpiredTokensSayWhen) {
  const std::string text = FormatJoinToken(token_);
  EXPECT_TRUE(ParseJoinToken(text, token_.expires_at - 1));
  auto r = ParseJoinToken(text, token_.expires_at + 90);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("expired at 2027-01-15T09:00:00Z (90 s ago)"), std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("bmas cluster token"), std::string::npos);
  EXPECT_FALSE(ParseJoinToken(text, token_.expires_at));
}

TEST_F(JoinTokenTest, OtherVersionsAndOtherTextAreNamed) {
  const std::string body = FormatJoinToken(token_).substr(6);
  auto v2 = ParseJoinToken("bmas2." + body, kNow);
  ASSERT_FALSE(v2);
  EXPECT_NE(v2.error().message.find("version 2"), std::string::npos) << v2.error().message;
  EXPECT_NE(v2.error().message.find("version 1"), std::string::npos) << v2.error().message;
  for (const char* other : {"hello", "bmas.abc", "K10abc::server:xyz", "bmasx.abc", "bmas1"}) {
    auto r = ParseJoinToken(other, kNow);
    ASSERT_FALSE(r) << other;
    EXPECT_NE(r.error().message.find("not a bmas join token"), std::string::npos)
        << r.error().message;
  }
  auto empty = ParseJoinToken("  ", kNow);
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message.find("no join token"), std::string::npos);
}

TEST_F(JoinTokenTest, PinsTheControllersCa) {
  EXPECT_TRUE(CheckControllerCa(token_, ca_.cert_pem));
  auto impostor = MakeClusterCa("lab", kNow);
  ASSERT_TRUE(impostor);
  auto r = CheckControllerCa(token_, impostor->cert_pem);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(r.error().message.find(Hex(token_.ca_sha256)), std::string::npos) << r.error().message;
  EXPECT_FALSE(CheckControllerCa(token_, "junk"));
}

TEST_F(JoinTokenTest, ControllerChecksTheSecretAgainstItsHash) {
  const std::vector<TokenRecord> records = {RecordOf(token_)};
  EXPECT_NE(records[0].secret_sha256, token_.secret);
  EXPECT_EQ(records[0].secret_sha256.size(), kSha256Bytes);
  EXPECT_TRUE(CheckJoinSecret(records, token_.secret, kNow));

  std::string wrong = token_.secret;
  wrong.back() = static_cast<char>(wrong.back() ^ 0x80);
  for (const std::string& bad : {wrong, std::string(), token_.secret.substr(1)}) {
    auto r = CheckJoinSecret(records, bad, kNow);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
    EXPECT_NE(r.error().message.find("not one this controller issued"), std::string::npos);
  }
  EXPECT_FALSE(CheckJoinSecret({}, token_.secret, kNow));

  auto late = CheckJoinSecret(records, token_.secret, token_.expires_at);
  ASSERT_FALSE(late);
  EXPECT_NE(late.error().message.find("expired at 2027-01-15T09:00:00Z"), std::string::npos)
      << late.error().message;
}

TEST_F(JoinTokenTest, ASecretMatchesAmongManyRecords) {
  std::vector<TokenRecord> records;
  for (int i = 0; i < 5; ++i) {
    JoinToken other = token_;
    other.secret = NewJoinSecret(env_);
    records.push_back(RecordOf(other));
  }
  records.insert(records.begin() + 2, RecordOf(token_));
  EXPECT_TRUE(CheckJoinSecret(records, token_.secret, kNow));
}

TEST_F(JoinTokenTest, RecordsRoundTripAndExpire) {
  JoinToken old = token_;
  old.secret = NewJoinSecret(env_);
  old.expires_at = kNow - 1;
  const std::vector<TokenRecord> records = {RecordOf(old), RecordOf(token_)};
  const std::string text = FormatTokenRecords(records);
  EXPECT_EQ(text.find(Hex(token_.secret)), std::string::npos);
  auto back = ParseTokenRecords(text);
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].secret_sha256, records[1].secret_sha256);
  EXPECT_EQ((*back)[1].expires_at, records[1].expires_at);
  auto kept = Unexpired(*back, kNow);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].secret_sha256, RecordOf(token_).secret_sha256);
}

TEST_F(JoinTokenTest, BadRecordLinesAreNamed) {
  const std::string good = FormatTokenRecords({RecordOf(token_)});
  for (const std::string& bad : {std::string("v2 ") + good.substr(3), good.substr(0, 20) + "\n",
                                 good.substr(0, 3) + std::string(64, 'g') + good.substr(67),
                                 good.substr(0, 68) + "x\n", good.substr(0, 67) + "\n"}) {
    auto r = ParseTokenRecords(good + bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("line 2"), std::string::npos) << r.error().message;
  }
  auto empty = ParseTokenRecords("");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

}  // namespace
}  // namespace bmas::cluster
