// The PostgreSQL store against a real PostgreSQL server that this binary starts (pg_server.h):
// the whole store conformance suite (store_conformance_test.cc, built into this binary for the
// kind "postgresql"), and what is PostgreSQL's own: versioned migrations under an advisory
// lock, a store newer than this bmas refused, many connections writing at once, and errors
// that name the server without the password.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pg_server.h"
#include "store/postgres_store.h"
#include "store/store.h"
#include "store/store_conformance.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// One server for the whole binary (ctest runs it as one test).
PgServer* g_server = nullptr;

class PgEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    auto started = PgServer::Start();
    ASSERT_TRUE(started) << started.error().message;
    server_ = std::move(*started);
    g_server = server_.get();
    ExternalConformanceStore() = [](const std::string& test) -> Result<StorePtr> {
      static std::mutex mu;
      static std::map<std::string, std::string> databases;  // by test
      std::string db;
      {
        std::lock_guard lock(mu);
        std::string& known = databases[test];
        if (known.empty()) known = NewDatabase();
        db = known;
      }
      if (db.empty()) return Internal("cannot create a database for " + test);
      return OpenPostgresStore(g_server->Url(db));
    };
  }
  void TearDown() override {
    g_server = nullptr;
    server_.reset();
  }

  // A new, empty database; "" when it cannot be made (the failure is reported).
  static std::string NewDatabase() {
    static std::atomic<int> next{0};
    if (g_server == nullptr) {
      ADD_FAILURE() << "PostgreSQL did not start";
      return "";
    }
    const std::string name = fmt::format("bmas_t{}", next++);
    auto made = g_server->CreateDatabase(name);
    if (!made) {
      ADD_FAILURE() << made.error().message;
      return "";
    }
    return name;
  }

 private:
  std::unique_ptr<PgServer> server_;
};

[[maybe_unused]] const auto* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new PgEnvironment);

std::string Query(const std::string& db, const std::string& sql) {
  auto r = g_server->Psql(db, sql);
  EXPECT_TRUE(r && r->exit_code == 0) << (r ? r->err : r.error().message);
  return r ? r->out : "";
}

TEST(PgStoreTest, MigrationsAreNumberedAndAStoreNewerThanThisBmasIsRefused) {
  ASSERT_NE(g_server, nullptr);
  const std::string db = PgEnvironment::NewDatabase();
  auto store = OpenPostgresStore(g_server->Url(db));
  ASSERT_TRUE(store) << store.error().message;
  EXPECT_GE((*store)->schema_version(), 1);
  const int version = (*store)->schema_version();
  EXPECT_EQ(Query(db, "SELECT COUNT(*), MAX(version) FROM bmas_schema"),
            fmt::format("{}|{}\n", version, version));
  store->reset();

  // Opening again applies nothing.
  auto again = OpenPostgresStore(g_server->Url(db));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ((*again)->schema_version(), version);
  EXPECT_EQ(Query(db, "SELECT COUNT(*) FROM bmas_schema"), fmt::format("{}\n", version));
  again->reset();

  // A later bmas migrated it further: this one refuses it rather than write a schema it does
  // not know.
  Query(db, fmt::format("INSERT INTO bmas_schema VALUES ({}, 0)", version + 1));
  auto newer = OpenPostgresStore(g_server->Url(db));
  ASSERT_FALSE(newer);
  EXPECT_EQ(newer.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(newer.error().message,
              HasSubstr(fmt::format("schema version {}, newer than this bmas knows ({})",
                                    version + 1, version)));
  EXPECT_THAT(newer.error().message, HasSubstr("use the newer bmas"));
}

TEST(PgStoreTest, ManyProcessesOpeningANewStoreAtOnceMigrateItOnce) {
  ASSERT_NE(g_server, nullptr);
  const std::string db = PgEnvironment::NewDatabase();
  // Each opener has its own connection, as a gateway and the CLI would.
  constexpr int kOpeners = 8;
  std::vector<std::thread> threads;
  std::atomic<int> opened{0};
  std::vector<std::string> errors(kOpeners);
  for (int i = 0; i < kOpeners; ++i) {
    threads.emplace_back([&, i] {
      auto s = OpenPostgresStore(g_server->Url(db));
      if (s) {
        ++opened;
      } else {
        errors[i] = s.error().message;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(opened.load(), kOpeners) << ::testing::PrintToString(errors);
  auto store = OpenPostgresStore(g_server->Url(db));
  ASSERT_TRUE(store) << store.error().message;
  EXPECT_EQ(Query(db, "SELECT COUNT(*) FROM bmas_schema"),
            fmt::format("{}\n", (*store)->schema_version()));
}

TEST(PgStoreTest, UsageFromManyConnectionsAtOnceAddsUpExactly) {
  ASSERT_NE(g_server, nullptr);
  const std::string db = PgEnvironment::NewDatabase();
  constexpr int kWriters = 6;
  constexpr int kBatches = 25;
  {
    auto first = OpenPostgresStore(g_server->Url(db));
    ASSERT_TRUE(first) << first.error().message;
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&] {
      auto s = OpenPostgresStore(g_server->Url(db));
      if (!s) {
        ++failures;
        return;
      }
      for (int b = 0; b < kBatches; ++b) {
        // Two rows per batch, the same ones for every writer: each batch's upserts contend.
        if (!(*s)->RecordUsage(
                {{100, "alice", "m", "b1", 1, 10, 5}, {100, "bob", "m", "b1", 1, 3, 2}})) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto store = OpenPostgresStore(g_server->Url(db));
  ASSERT_TRUE(store);
  auto rows = (*store)->QueryUsage(std::nullopt, 0);
  ASSERT_TRUE(rows) << rows.error().message;
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].requests, kWriters * kBatches);
  EXPECT_EQ((*rows)[0].prompt_tokens, kWriters * kBatches * 10);
  EXPECT_EQ((*rows)[1].completion_tokens, kWriters * kBatches * 2);
}

TEST(PgStoreTest, AServerThatIsNotThereIsNamedWithTheFixAndNeverThePassword) {
  ASSERT_NE(g_server, nullptr);
  // The test server's socket directory, on a port nothing listens on.
  const std::string url =
      fmt::format("postgresql://bmas:s3cr3t-pw@/bmas?host={}&port=1", g_server->socket_dir());
  auto store = OpenPostgresStore(url);
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(store.error().message, HasSubstr(fmt::format("cannot reach PostgreSQL at {}:1/bmas",
                                                           g_server->socket_dir())));
  EXPECT_THAT(store.error().message, HasSubstr("start it, or fix [store] url or BMAS_STORE_URL"));
  EXPECT_THAT(store.error().message, Not(HasSubstr("s3cr3t")));

  // A database that does not exist, on the running server.
  auto missing =
      OpenPostgresStore(fmt::format("postgresql://postgres:s3cr3t-pw@/no_such_db?host={}&port={}",
                                    g_server->socket_dir(), g_server->port()));
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, HasSubstr("no_such_db"));
  EXPECT_THAT(missing.error().message, Not(HasSubstr("s3cr3t")));

  auto not_pg = OpenPostgresStore("mysql://root:s3cr3t-pw@host/db");
  ASSERT_FALSE(not_pg);
  EXPECT_EQ(not_pg.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(not_pg.error().message, Not(HasSubstr("s3cr3t")));
}

TEST(PgStoreTest, ValuesThatLookLikeSqlAreStoredAsTheyAre) {
  ASSERT_NE(g_server, nullptr);
  auto store = OpenPostgresStore(g_server->Url(PgEnvironment::NewDatabase()));
  ASSERT_TRUE(store) << store.error().message;
  const std::string url = "http://x/'); DROP TABLE users; --";
  ASSERT_TRUE((*store)->AddBackend(url));
  auto backends = (*store)->ListBackends();
  ASSERT_TRUE(backends);
  ASSERT_EQ(backends->size(), 1u);
  EXPECT_EQ((*backends)[0], url);
  ASSERT_TRUE((*store)->AddUser("alice", {}));
  auto users = (*store)->ListUsers();
  ASSERT_TRUE(users) << users.error().message;
  EXPECT_EQ(users->size(), 1u);
}

}  // namespace
}  // namespace bmas::testing
