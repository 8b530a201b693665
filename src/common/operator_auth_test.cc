#include "common/operator_auth.h"

#include <gtest/gtest.h>

namespace bmas {
namespace {

TEST(OperatorBearerMatches, OnlyTheExactSecretAfterBearer) {
  const std::string secret = "0123456789abcdef";
  struct Case {
    std::string header;
    bool matches;
  };
  const Case cases[] = {
      {"Bearer 0123456789abcdef", true},
      {"", false},
      {"Bearer ", false},
      {"0123456789abcdef", false},
      {"bearer 0123456789abcdef", false},
      {"Basic 0123456789abcdef", false},
      {"Bearer 0123456789abcdeF", false},
      {"Bearer 0123456789abcde", false},
      {"Bearer 0123456789abcdef0", false},
      {"Bearer  0123456789abcdef", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(OperatorBearerMatches(c.header, secret), c.matches) << "'" << c.header << "'";
  }
}

TEST(OperatorBearerMatches, AnEmptySecretMatchesNothing) {
  EXPECT_FALSE(OperatorBearerMatches("Bearer ", ""));
  EXPECT_FALSE(OperatorBearerMatches("", ""));
}

}  // namespace
}  // namespace bmas
