#include "common/backend_identity.h"

#include <gtest/gtest.h>

namespace bmas {
namespace {

TEST(BackendIdentityTest, KeysArePerPortAndStable) {
  const std::string a = DeriveBackendKey("secret", 18100);
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a, DeriveBackendKey("secret", 18100));
  EXPECT_NE(a, DeriveBackendKey("secret", 18101));
  EXPECT_NE(a, DeriveBackendKey("other", 18100));
}

TEST(BackendIdentityTest, AnswersDependOnKeyAndNonce) {
  const std::string nonce = NewChallengeNonce();
  EXPECT_TRUE(IsChallengeNonce(nonce));
  EXPECT_NE(nonce, NewChallengeNonce());
  const std::string answer = ChallengeAnswer("k1", nonce);
  EXPECT_TRUE(SecretsEqual(answer, ChallengeAnswer("k1", nonce)));
  EXPECT_FALSE(SecretsEqual(answer, ChallengeAnswer("k2", nonce)));
  EXPECT_FALSE(SecretsEqual(answer, ChallengeAnswer("k1", NewChallengeNonce())));
  EXPECT_FALSE(SecretsEqual(answer, answer.substr(1)));
}

TEST(BackendIdentityTest, NoncesAreBoundedHex) {
  EXPECT_FALSE(IsChallengeNonce(""));
  EXPECT_FALSE(IsChallengeNonce("0123456789abcde"));  // 15
  EXPECT_TRUE(IsChallengeNonce("0123456789abcdef"));
  EXPECT_FALSE(IsChallengeNonce(std::string(129, 'a')));
  EXPECT_FALSE(IsChallengeNonce("0123456789abcdeg"));
}

}  // namespace
}  // namespace bmas
