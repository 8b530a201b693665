// The PostgreSQL store's URLs, without a server: which are taken, and that a password never
// reaches a message. (The store itself runs against a real server in
// pg_store_integration_test.)

#include <gtest/gtest.h>

#include "store/postgres_store.h"
#include "store/store.h"

namespace bmas {
namespace {

TEST(PgStoreUrlTest, OnlyPostgresUrlsNameThePostgresStore) {
  EXPECT_TRUE(IsPostgresStoreUrl("postgresql://bmas@db1:5432/bmas"));
  EXPECT_TRUE(IsPostgresStoreUrl("postgres:///bmas?host=/run/postgresql"));
  EXPECT_FALSE(IsPostgresStoreUrl(""));
  EXPECT_FALSE(IsPostgresStoreUrl("/var/lib/bmas/store/bmas.db"));
  EXPECT_FALSE(IsPostgresStoreUrl("mysql://db1/bmas"));
}

TEST(PgStoreUrlTest, PasswordsAreRedactedWhereverTheUrlPutsThem) {
  EXPECT_EQ(RedactStoreUrl("postgresql://bmas:hunter2@db1:5432/bmas"),
            "postgresql://bmas:***@db1:5432/bmas");
  EXPECT_EQ(RedactStoreUrl("postgresql://db1/bmas?user=bmas&password=hunter2&sslmode=require"),
            "postgresql://db1/bmas?user=bmas&password=***&sslmode=require");
  EXPECT_EQ(RedactStoreUrl("postgresql://db1/bmas?password=hunter2"),
            "postgresql://db1/bmas?password=***");
  EXPECT_TRUE(StoreUrlHasPassword("postgresql://bmas:hunter2@db1/bmas"));
  EXPECT_TRUE(StoreUrlHasPassword("postgresql://db1/bmas?password=x"));
  // No password: nothing changes.
  for (const char* url : {"postgresql://bmas@db1:5432/bmas", "postgresql:///bmas?host=/run/pg",
                          "postgresql://db1/bmas?passfile=/etc/bmas/pgpass"}) {
    EXPECT_EQ(RedactStoreUrl(url), url);
    EXPECT_FALSE(StoreUrlHasPassword(url));
  }
}

}  // namespace
}  // namespace bmas
