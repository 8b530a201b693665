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

// Each way a node's connection fails across the network names its own fix (libpq's and the
// server's words as PostgreSQL 15 and OpenSSL 3 give them).
TEST(PgStoreUrlTest, AFailedConnectionNamesItsFix) {
  const struct {
    const char* message;
    const char* fix;
  } cases[] = {
      {"connection to server at \"10.0.0.1\", port 5432 failed: Connection refused", "start it"},
      {"FATAL:  certificate authentication failed for user \"bmas_node\"", "pg_ident.conf"},
      {"FATAL:  connection requires a valid client certificate", "node.crt"},
      {"SSL error: tlsv1 alert unknown ca", "cluster CA"},
      {"FATAL:  no pg_hba.conf entry for host \"10.0.0.11\", user \"bmas_node\", database "
       "\"bmas\", no encryption",
       "hostssl"},
      {"server certificate for \"db1\" does not match host name \"mgs1\"", "store-tls"},
      {"SSL error: certificate verify failed", "sslrootcert"},
      {"could not open certificate file \"/etc/bmas/node.crt\": Permission denied", "sslkey"},
  };
  for (const auto& c : cases) {
    EXPECT_NE(StoreConnectFailureFix(c.message).find(c.fix), std::string::npos)
        << c.message << " -> " << StoreConnectFailureFix(c.message);
  }
}

}  // namespace
}  // namespace bmas
