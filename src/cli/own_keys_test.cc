#include "cli/own_keys.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>

#include "store/mem_store.h"

namespace bmas {
namespace {

using ::testing::HasSubstr;

class OwnKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = NewMemStore([this] { return now_; });
    ASSERT_TRUE(store_->AddUser("alice", UserLimits{}));
    ASSERT_TRUE(store_->AddUser("bob", UserLimits{}));
  }
  Result<std::string> Ask(const std::string& user, const std::string& action,
                          const std::string& id = "") {
    return AnswerOwnKeys(*store_, user, action, id, now_);
  }

  StorePtr store_;
  int64_t now_ = std::time(nullptr);  // the store stamps keys with it
};

TEST_F(OwnKeysTest, AUserCreatesListsAndRevokesTheirOwnKeys) {
  auto created = Ask("alice", "create");
  ASSERT_TRUE(created) << created.error().message;
  EXPECT_THAT(*created, HasSubstr("\"key\":\"sk-bmas-"));
  auto listed = Ask("alice", "list");
  ASSERT_TRUE(listed);
  auto keys = ParseOwnKeys(*listed);
  ASSERT_TRUE(keys) << keys.error().message;
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_FALSE((*keys)[0].revoked_at);
  EXPECT_THAT(*created, HasSubstr((*keys)[0].id));
  // Bob can neither see nor revoke it.
  auto bobs = ParseOwnKeys(*Ask("bob", "list"));
  ASSERT_TRUE(bobs);
  EXPECT_TRUE(bobs->empty());
  auto stolen = Ask("bob", "revoke", (*keys)[0].id);
  ASSERT_FALSE(stolen);
  EXPECT_THAT(stolen.error().message, HasSubstr("no active key"));
  ASSERT_TRUE(Ask("alice", "revoke", (*keys)[0].id));
  auto after = ParseOwnKeys(*Ask("alice", "list"));
  ASSERT_TRUE(after);
  EXPECT_TRUE((*after)[0].revoked_at);
}

TEST_F(OwnKeysTest, ActiveKeysAreCappedAndStrangersAreSentToTheAdmin) {
  for (size_t i = 0; i < kMaxOwnKeys; ++i) ASSERT_TRUE(Ask("alice", "create"));
  auto sixth = Ask("alice", "create");
  ASSERT_FALSE(sixth);
  EXPECT_THAT(sixth.error().message, HasSubstr("revoke one first"));
  auto stranger = Ask("mallory", "create");
  ASSERT_FALSE(stranger);
  EXPECT_THAT(stranger.error().message, HasSubstr("bmas user add mallory"));
  EXPECT_FALSE(Ask("alice", "delete-all"));
  EXPECT_FALSE(ParseOwnKeys(R"({"keys":[{"id":1}]})"));
}

}  // namespace
}  // namespace bmas

namespace bmas {
namespace {

// The id of the key in a {"key": "sk-bmas-ID-SECRET"} reply.
std::string ParseCreatedId(const std::string& reply) {
  const size_t at = reply.find("sk-bmas-") + 8;
  return reply.substr(at, reply.find('-', at) - at);
}

TEST_F(OwnKeysTest, CreatingAndRevokingInALoopStopsAtTheDailyCap) {
  for (size_t i = 0; i < kMaxOwnKeysPerDay; ++i) {
    auto created = Ask("alice", "create");
    ASSERT_TRUE(created) << i << ": " << created.error().message;
    const std::string id = ParseCreatedId(*created);
    ASSERT_TRUE(Ask("alice", "revoke", id)) << id;
  }
  auto refused = Ask("alice", "create");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kPermissionDenied);
  EXPECT_THAT(refused.error().message, ::testing::HasSubstr("20 keys in the last 24 hours"));
  // Bob is not held back by Alice's loop, and Alice may create again a day later.
  EXPECT_TRUE(Ask("bob", "create"));
  now_ += 24 * 3600 + 1;
  EXPECT_TRUE(Ask("alice", "create"));
}

}  // namespace
}  // namespace bmas
