#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "store/store.h"

namespace bmas {
namespace {

namespace fs = std::filesystem;

class SqliteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bmas_store_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    store_ = Open();
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  StorePtr Open() {
    auto s = OpenSqliteStore(StorePath(dir_.string()));
    EXPECT_TRUE(s) << s.error().message;
    return s ? std::move(*s) : nullptr;
  }

  fs::path dir_;
  StorePtr store_;
};

TEST_F(SqliteStoreTest, NewStoreIsAtTheCurrentSchemaInWalMode) {
  EXPECT_EQ(store_->schema_version(), 12);
  sqlite3* db;
  ASSERT_EQ(sqlite3_open(StorePath(dir_.string()).c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST_F(SqliteStoreTest, TheKeyItselfIsNeverStored) {
  ASSERT_TRUE(store_->AddUser("bob", {}));
  std::string key = *store_->CreateKey("bob");
  std::string secret = key.substr(key.rfind('-') + 1);
  store_.reset();
  for (const auto& entry : fs::recursive_directory_iterator(dir_)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.find(secret), std::string::npos) << entry.path();
  }
}

TEST_F(SqliteStoreTest, DataSurvivesReopeningAndTwoOpenHandlesShareIt) {
  ASSERT_TRUE(store_->AddUser("bob", {}));
  std::string key = *store_->CreateKey("bob");
  StorePtr other = Open();  // as a running gateway and `bmas user` would
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(*other->Authenticate(key), std::optional<std::string>("bob"));
  ASSERT_TRUE(other->AddUser("carol", {}));
  EXPECT_EQ(store_->ListUsers()->size(), 2u);
  store_.reset();
  other.reset();
  store_ = Open();
  EXPECT_EQ(store_->ListUsers()->size(), 2u);
  EXPECT_EQ(*store_->Authenticate(key), std::optional<std::string>("bob"));
}

TEST_F(SqliteStoreTest, AStoreFromANewerBmasIsRefused) {
  store_.reset();
  sqlite3* db;
  ASSERT_EQ(sqlite3_open(StorePath(dir_.string()).c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 999", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto s = OpenSqliteStore(StorePath(dir_.string()));
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("newer"), std::string::npos) << s.error().message;
}

// A store written by the first schema version keeps its users and keys when a newer bmas
// migrates it forward.
TEST_F(SqliteStoreTest, MigratingFromVersionOneKeepsUsersAndKeys) {
  store_.reset();
  const std::string path = StorePath(dir_.string());
  fs::remove(path);
  sqlite3* db;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* v1 = R"sql(
    CREATE TABLE users (name TEXT PRIMARY KEY, weight REAL NOT NULL DEFAULT 1.0, rpm INTEGER,
      tpm INTEGER, tokens_per_day INTEGER, max_concurrent INTEGER, created_at INTEGER NOT NULL);
    CREATE TABLE api_keys (id TEXT PRIMARY KEY, user TEXT NOT NULL, secret_sha256 BLOB NOT NULL,
      created_at INTEGER NOT NULL, revoked_at INTEGER);
    CREATE INDEX api_keys_by_user ON api_keys(user);
    INSERT INTO users (name, weight, rpm, created_at) VALUES ('old', 2.0, 5, 1);
    PRAGMA user_version = 1;)sql";
  ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  store_ = Open();
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(store_->schema_version(), 12);
  auto old = store_->FindUser("old");
  ASSERT_TRUE(old && *old);
  EXPECT_EQ((*old)->limits.rpm, 5);
  EXPECT_TRUE(store_->RecordUsage({{1, "old", "m", "b", 1, 1, 1}}));
}

TEST_F(SqliteStoreTest, TheStoreIsPrivateToItsOwnerAndAnOldOneIsMovedIn) {
  struct stat st;
  const std::string path = StorePath(dir_.string());
  ASSERT_EQ(stat(fs::path(path).parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);
  ASSERT_TRUE(store_->AddBackend("http://127.0.0.1:9009"));
  store_.reset();

  // An older bmas's store, world-readable beside the state dir's other files, is moved in.
  const fs::path old_dir = dir_ / "old";
  fs::create_directories(old_dir);
  fs::copy_file(path, old_dir / "bmas.db");
  fs::permissions(old_dir / "bmas.db", fs::perms(0644));
  auto moved = OpenSqliteStore(StorePath(old_dir.string()));
  ASSERT_TRUE(moved) << moved.error().message;
  EXPECT_FALSE(fs::exists(old_dir / "bmas.db"));
  auto backends = (*moved)->ListBackends();
  ASSERT_TRUE(backends);
  EXPECT_EQ(backends->size(), 1u);
  ASSERT_EQ(stat(StorePath(old_dir.string()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);

  if (geteuid() != 0) return;
  // A plain user (nobody) can neither open it nor list its directory.
  pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(99);
    _exit(access(path.c_str(), R_OK) == 0 ? 1 : 0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "nobody could read " << path;
}

TEST_F(SqliteStoreTest, AnUnopenablePathIsAClearError) {
  auto s = OpenSqliteStore("/nonexistent-dir/for/bmas.db");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("/nonexistent-dir/for/bmas.db"), std::string::npos);
}

}  // namespace
}  // namespace bmas
