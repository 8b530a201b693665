#include "slurm/jwt.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace bmas {
namespace {

const std::string kFixtures = BMAS_SOURCE_DIR "/tests/fixtures/slurmrestd";

TEST(Base64UrlTest, Rfc4648VectorsWithoutPadding) {
  const std::pair<const char*, const char*> cases[] = {
      {"", ""},           {"f", "Zg"},          {"fo", "Zm8"},          {"foo", "Zm9v"},
      {"foob", "Zm9vYg"}, {"fooba", "Zm9vYmE"}, {"foobar", "Zm9vYmFy"},
  };
  for (const auto& [in, out] : cases) EXPECT_EQ(Base64UrlEncode(in), out) << in;
}

TEST(Base64UrlTest, UsesTheUrlSafeAlphabet) {
  EXPECT_EQ(Base64UrlEncode("\xfb\xff"), "-_8");
  EXPECT_EQ(Base64UrlEncode("\xff\xff\xff"), "____");
}

// Computed in a shell: base64url of the header and payload, then
// `openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef -binary | base64 | tr '+/' '-_'`.
TEST(MintSlurmJwtTest, MatchesOpenSslHmac) {
  auto token = MintSlurmJwt("0123456789abcdef0123456789abcdef", "alice", 1700000000, 3600);
  ASSERT_TRUE(token) << token.error().message;
  EXPECT_EQ(*token,
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
            "eyJleHAiOjE3MDAwMDM2MDAsImlhdCI6MTcwMDAwMDAwMCwic3VuIjoiYWxpY2UifQ."
            "fghHkX5gg5X9ctkmZl3lHkG-pqGm57kEDYQr92BZL5E");
}

// `scontrol token username=bmas-test-a lifespan=3600`, from a slurmctld whose
// AuthAltParameters=jwt_key pointed at the fixture key: the same bytes, signature included.
TEST(MintSlurmJwtTest, MatchesScontrolToken) {
  auto key = ReadJwtKeyFile(kFixtures + "/jwt_hs256.key");
  ASSERT_TRUE(key) << key.error().message;
  EXPECT_EQ(key->size(), 32u);
  auto token = MintSlurmJwt(*key, "bmas-test-a", 1795263435, 3600);
  ASSERT_TRUE(token) << token.error().message;
  EXPECT_EQ(*token,
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
            "eyJleHAiOjE3OTUyNjcwMzUsImlhdCI6MTc5NTI2MzQzNSwic3VuIjoiYm1hcy10ZXN0LWEifQ."
            "sglJ7DTNinBEAO0v-nKpSaKsiPxj7ox1uwgcrixZ_6I");
}

TEST(MintSlurmJwtTest, EscapesTheUserName) {
  auto token = MintSlurmJwt("k", "a\"b", 0, 1);
  ASSERT_TRUE(token);
  const std::string payload = token->substr(token->find('.') + 1);
  // {"exp":1,"iat":0,"sun":"a\"b"}
  EXPECT_EQ(payload.substr(0, payload.find('.')),
            Base64UrlEncode(R"({"exp":1,"iat":0,"sun":"a\"b"})"));
}

TEST(MintSlurmJwtTest, RefusesBadInput) {
  EXPECT_EQ(MintSlurmJwt("", "alice", 0, 60).error().param, "jwt_key");
  EXPECT_EQ(MintSlurmJwt("key", "", 0, 60).error().param, "username");
  EXPECT_EQ(MintSlurmJwt("key", "alice", 0, 0).error().param, "lifetime");
}

TEST(Base64UrlTest, DecodeInvertsEncode) {
  for (std::string s : {"", "f", "fo", "foo", "foob", "fooba", "\xfb\xff", "\x00\x01\x02"}) {
    auto back = Base64UrlDecode(Base64UrlEncode(s));
    ASSERT_TRUE(back) << s;
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(*Base64UrlDecode("Zm9vYg=="), "foob");
  EXPECT_FALSE(Base64UrlDecode("Zm9v!"));
  EXPECT_FALSE(Base64UrlDecode("Z"));
}

TEST(DecodeJwtClaimsTest, ReadsWhatMintWrote) {
  auto claims = DecodeJwtClaims(*MintSlurmJwt("key", "bmas-test-a", 1795263435, 3600));
  ASSERT_TRUE(claims) << claims.error().message;
  EXPECT_EQ(claims->issued_at, 1795263435);
  EXPECT_EQ(claims->expires_at, 1795263435 + 3600);
  EXPECT_EQ(claims->username, "bmas-test-a");
}

TEST(DecodeJwtClaimsTest, RefusesNonTokens) {
  for (const char* bad : {"", "abc", "a.b", "abc.def.ghi", "x.e30.y" /* {} */}) {
    auto claims = DecodeJwtClaims(bad);
    EXPECT_FALSE(claims) << bad;
  }
}

TEST(ReadJwtKeyFileTest, MissingFileIsNotFoundAndNamesThePath) {
  auto key = ReadJwtKeyFile(kFixtures + "/no-such.key");
  ASSERT_FALSE(key);
  EXPECT_EQ(key.error().code, ErrorCode::kNotFound);
  EXPECT_NE(key.error().message.find("no-such.key"), std::string::npos);
}

TEST(ReadJwtKeyFileTest, FromKeyFileMintsAVerifiableShape) {
  auto token = MintSlurmJwtFromKeyFile(kFixtures + "/jwt_hs256.key", "bob", 1700000000, 60);
  ASSERT_TRUE(token) << token.error().message;
  EXPECT_EQ(std::count(token->begin(), token->end(), '.'), 2);
  EXPECT_EQ(token->find('='), std::string::npos);
  auto claims = DecodeJwtClaims(*token);
  ASSERT_TRUE(claims) << claims.error().message;
  EXPECT_EQ(claims->expires_at, 1700000060);
}

}  // namespace
}  // namespace bmas
