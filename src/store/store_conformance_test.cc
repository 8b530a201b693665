// The store conformance suite: what every Store must do, run against each one (SQLite, the
// embedded default, and MemStore, the in-memory one for tests and simulations, here; and
// PostgreSQL, against a real server, in the binary pg_store_integration_test, which builds this
// file with BMAS_STORE_CONFORMANCE_EXTERNAL and opens its stores through
// store_conformance.h). What is SQLite's own (its file, WAL, migrations, permissions) is tested
// in sqlite_store_test.cc.

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "store/mem_store.h"
#include "store/store.h"
#include "store/store_conformance.h"
#include "store/store_rules.h"

namespace bmas {
namespace {

namespace fs = std::filesystem;

class StoreConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "memory") {
      store_ = NewMemStore();
      return;
    }
    if (GetParam() != "sqlite") {
      ASSERT_TRUE(ExternalConformanceStore()) << "no opener for the store " << GetParam();
      auto s = ExternalConformanceStore()(
          ::testing::UnitTest::GetInstance()->current_test_info()->name());
      ASSERT_TRUE(s) << s.error().message;
      store_ = std::move(*s);
      return;
    }
    dir_ = fs::temp_directory_path() /
           ("bmas_store_conformance_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto s = OpenSqliteStore(StorePath(dir_.string()));
    ASSERT_TRUE(s) << s.error().message;
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Another handle on the same store, as a second gateway would have; null for MemStore, whose
  // one instance is shared (its reservations are safe across threads).
  StorePtr OpenAgain() {
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    if (GetParam() == "memory") return nullptr;
    auto s = GetParam() == "sqlite" ? OpenSqliteStore(StorePath(dir_.string()))
                                    : ExternalConformanceStore()(test);
    EXPECT_TRUE(s) << s.error().message;
    return s ? std::move(*s) : nullptr;
  }

  fs::path dir_;
  StorePtr store_;
};

// A binary built with BMAS_STORE_CONFORMANCE_EXTERNAL="kind" runs the suite on that kind only.
#ifdef BMAS_STORE_CONFORMANCE_EXTERNAL
INSTANTIATE_TEST_SUITE_P(Stores, StoreConformanceTest,
                         ::testing::Values(BMAS_STORE_CONFORMANCE_EXTERNAL),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });
#else
INSTANTIATE_TEST_SUITE_P(Stores, StoreConformanceTest, ::testing::Values("sqlite", "memory"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });
#endif

TEST_P(StoreConformanceTest, AddFindListUsers) {
  UserLimits limits;
  limits.weight = 2;
  limits.rpm = 60;
  ASSERT_TRUE(store_->AddUser("bob", limits));
  ASSERT_TRUE(store_->AddUser("alice", {}));
  auto users = store_->ListUsers();
  ASSERT_TRUE(users);
  ASSERT_EQ(users->size(), 2u);
  EXPECT_EQ((*users)[0].name, "alice");  // by name
  EXPECT_EQ((*users)[0].limits.weight, 1.0);
  EXPECT_FALSE((*users)[0].limits.rpm.has_value());  // unset = unlimited
  auto bob = store_->FindUser("bob");
  ASSERT_TRUE(bob && *bob);
  EXPECT_EQ((*bob)->limits.weight, 2.0);
  EXPECT_EQ((*bob)->limits.rpm, 60);
  EXPECT_GT((*bob)->created_at, 0);
  auto nobody = store_->FindUser("nobody");
  ASSERT_TRUE(nobody);
  EXPECT_FALSE(nobody->has_value());
}

TEST_P(StoreConformanceTest, BadUsersAreRefusedAndChangeNothing) {
  ASSERT_TRUE(store_->AddUser("bob", {}));
  auto dup = store_->AddUser("bob", {});
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, ErrorCode::kAlreadyExists);
  for (const char* name : {"", "Bob", "9lives", "a b", "x/../y", "abcdefghijklmnopqrstuvwxyz0123456"}) {
    auto r = store_->AddUser(name, {});
    ASSERT_FALSE(r) << name;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << name;
  }
  UserLimits negative;
  negative.tpm = -1;
  EXPECT_FALSE(store_->AddUser("carol", negative));
  UserLimits zero_weight;
  zero_weight.weight = 0;
  EXPECT_FALSE(store_->AddUser("carol", zero_weight));
  EXPECT_EQ(store_->ListUsers()->size(), 1u);
}

TEST_P(StoreConformanceTest, ChangeUserSetsAndClearsLimits) {
  UserLimits limits;
  limits.rpm = 10;
  limits.tpm = 1000;
  ASSERT_TRUE(store_->AddUser("bob", limits));
  UserChange change;
  change.weight = 3;
  change.max_concurrent = 4;
  change.clear = {"rpm"};
  ASSERT_TRUE(store_->ChangeUser("bob", change));
  auto bob = store_->FindUser("bob");
  EXPECT_EQ((*bob)->limits.weight, 3.0);
  EXPECT_EQ((*bob)->limits.max_concurrent, 4);
  EXPECT_FALSE((*bob)->limits.rpm.has_value());
  EXPECT_EQ((*bob)->limits.tpm, 1000);
  auto missing = store_->ChangeUser("nobody", change);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  UserChange bad;
  bad.clear = {"weight"};
  EXPECT_FALSE(store_->ChangeUser("bob", bad));
  // Admin is off until set, and a change of limits leaves it as it is.
  EXPECT_FALSE((*store_->FindUser("bob"))->admin);
  UserChange admin;
  admin.admin = true;
  ASSERT_TRUE(store_->ChangeUser("bob", admin));
  ASSERT_TRUE(store_->ChangeUser("bob", change));
  EXPECT_TRUE((*store_->FindUser("bob"))->admin);
  admin.admin = false;
  ASSERT_TRUE(store_->ChangeUser("bob", admin));
  EXPECT_FALSE((*store_->ListUsers())[0].admin);
}

TEST_P(StoreConformanceTest, KeysAuthenticateUntilRevoked) {
  ASSERT_TRUE(store_->AddUser("bob", {}));
  auto key = store_->CreateKey("bob");
  ASSERT_TRUE(key);
  EXPECT_EQ(key->rfind("sk-bmas-", 0), 0u);
  auto who = store_->Authenticate(*key);
  ASSERT_TRUE(who);
  EXPECT_EQ(*who, std::optional<std::string>("bob"));

  auto keys = store_->ListKeys("bob");
  ASSERT_TRUE(keys);
  ASSERT_EQ(keys->size(), 1u);
  const std::string id = (*keys)[0].id;
  EXPECT_NE(key->find(id), std::string::npos);
  EXPECT_EQ(key->find((*keys)[0].id + "-"), 8u);
  EXPECT_FALSE((*keys)[0].revoked_at.has_value());

  ASSERT_TRUE(store_->RevokeKey(id));
  EXPECT_EQ(*store_->Authenticate(*key), std::nullopt);
  EXPECT_TRUE((*store_->ListKeys("bob"))[0].revoked_at.has_value());
  auto again = store_->RevokeKey(id);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kNotFound);
}

TEST_P(StoreConformanceTest, WrongOrMalformedKeysDoNotAuthenticate) {
  ASSERT_TRUE(store_->AddUser("bob", {}));
  std::string key = *store_->CreateKey("bob");
  std::string wrong_secret = key;
  wrong_secret.back() = wrong_secret.back() == '0' ? '1' : '0';
  for (const std::string& k : {wrong_secret, std::string(), std::string("sk-bmas-"),
                               key.substr(0, key.size() - 1), key + "0", std::string("Bearer ") + key,
                               std::string("sk-other-") + key.substr(8)}) {
    auto who = store_->Authenticate(k);
    ASSERT_TRUE(who) << k;
    EXPECT_EQ(*who, std::nullopt) << k;
  }
}

TEST_P(StoreConformanceTest, RemovingAUserRevokesTheirKeys) {
  ASSERT_TRUE(store_->AddUser("bob", {}));
  std::string key = *store_->CreateKey("bob");
  ASSERT_TRUE(store_->RemoveUser("bob"));
  EXPECT_EQ(*store_->Authenticate(key), std::nullopt);
  // A new user of the same name does not inherit the old key.
  ASSERT_TRUE(store_->AddUser("bob", {}));
  EXPECT_EQ(*store_->Authenticate(key), std::nullopt);
  auto missing = store_->RemoveUser("nobody");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_FALSE(store_->CreateKey("nobody"));
}

TEST_P(StoreConformanceTest, UsageAddsUpPerUserModelBackend) {
  const int64_t minute = 29'000'000;  // some minute in 2025
  ASSERT_TRUE(store_->RecordUsage({{minute, "alice", "m", "http://a", 1, 10, 20},
                                   {minute, "alice", "m", "http://a", 2, 5, 5},
                                   {minute + 1, "alice", "m", "http://b", 1, 1, 1},
                                   {minute + 5, "bob", "m", "http://a", 1, 7, 8}}));
  auto all = store_->QueryUsage(std::nullopt, 0);
  ASSERT_TRUE(all) << all.error().message;
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].user, "alice");
  EXPECT_EQ((*all)[0].backend, "http://a");
  EXPECT_EQ((*all)[0].requests, 3);
  EXPECT_EQ((*all)[0].prompt_tokens, 15);
  EXPECT_EQ((*all)[0].completion_tokens, 25);
  auto bob = store_->QueryUsage(std::string("bob"), 0);
  ASSERT_EQ(bob->size(), 1u);
  EXPECT_EQ((*bob)[0].completion_tokens, 8);
  auto recent = store_->QueryUsage(std::nullopt, (minute + 1) * 60);
  ASSERT_EQ(recent->size(), 2u);  // the first minute is before `since`
}

TEST_P(StoreConformanceTest, FinishedJobsAreRecordedOnceAndSumToGpuSeconds) {
  JobRecord a{"c", 7, "alice", "train", "lab", "COMPLETED", 2, {"oss01"}, 100, 1000, 1600, 0};
  JobRecord b{"c", 8, "alice", "x", "lab", "FAILED", 4, {"oss01", "oss02"}, 100, 2000, 2100, 1};
  JobRecord never{"c", 9, "bob", "y", "lab", "CANCELLED", 1, {}, 100, 0, 3000, 0};
  auto added = store_->RecordJobs({a, b, never});
  ASSERT_TRUE(added) << added.error().message;
  EXPECT_EQ(*added, 3);
  EXPECT_EQ(*store_->RecordJobs({a}), 0);  // seen again by the next poll: no double count
  JobRecord requeued = a;                  // the same id, run again later
  requeued.start_time = 5000;
  requeued.end_time = 5100;
  EXPECT_EQ(*store_->RecordJobs({requeued}), 1);

  auto rows = store_->QueryJobUsage(std::nullopt, 0);
  ASSERT_TRUE(rows) << rows.error().message;
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].user, "alice");
  EXPECT_EQ((*rows)[0].jobs, 3);
  EXPECT_EQ((*rows)[0].gpu_seconds, 2 * 600 + 4 * 100 + 2 * 100);
  EXPECT_EQ((*rows)[1].user, "bob");
  EXPECT_EQ((*rows)[1].gpu_seconds, 0);  // cancelled before it started
  auto late = store_->QueryJobUsage(std::string("alice"), 2100);
  ASSERT_EQ(late->size(), 1u);
  EXPECT_EQ((*late)[0].jobs, 2);
}

TEST_P(StoreConformanceTest, BackendsAreSharedThroughTheStore) {
  ASSERT_TRUE(store_->AddBackend("http://127.0.0.1:8001"));
  ASSERT_TRUE(store_->AddBackend("http://127.0.0.1:8002"));
  EXPECT_EQ(store_->AddBackend("http://127.0.0.1:8001").error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(store_->ListBackends()->size(), 2u);
  ASSERT_TRUE(store_->RemoveBackend("http://127.0.0.1:8001"));
  EXPECT_EQ(store_->RemoveBackend("http://127.0.0.1:8001").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(*store_->ListBackends(), std::vector<std::string>{"http://127.0.0.1:8002"});
}

TEST_P(StoreConformanceTest, WorkspaceLimitsAreKeptChangedClearedAndChecked) {
  UserLimits l;
  l.workspace.cpus = 2;
  l.workspace.memory = "4GiB";
  ASSERT_TRUE(store_->AddUser("ws", l));
  UserChange c;
  c.workspace.processes = 300;
  c.workspace.disk = "20GiB";
  c.clear = {"cpus"};
  ASSERT_TRUE(store_->ChangeUser("ws", c));
  auto u = store_->FindUser("ws");
  ASSERT_TRUE(u && *u);
  const WorkspaceLimits& w = (*u)->limits.workspace;
  EXPECT_EQ(w.cpus, std::nullopt);
  EXPECT_EQ(w.memory, "4GiB");
  EXPECT_EQ(w.processes, 300);
  EXPECT_EQ(w.disk, "20GiB");

  for (const auto& [memory, disk, cpus] :
       std::vector<std::tuple<std::string, std::string, int64_t>>{
           {"4 GiB", "1GiB", 1}, {"4GB", "lots", 1}, {"50%", "1GiB", 0}}) {
    UserChange bad;
    bad.workspace.memory = memory;
    bad.workspace.disk = disk;
    bad.workspace.cpus = cpus;
    auto r = store_->ChangeUser("ws", bad);
    ASSERT_FALSE(r) << memory << " " << disk << " " << cpus;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  }
  u = store_->FindUser("ws");
  EXPECT_EQ((*u)->limits.workspace.memory, "4GiB");  // nothing changed
  EXPECT_EQ(CheckWorkspaceLimits({.memory = "50%"}), "");
  EXPECT_EQ(CheckWorkspaceLimits({.memory = "512MB", .disk = "1.5TiB"}), "");
}

// Finding 8 of issue 11: the store (every user's usage, limits and key hashes) was 0644 in a 0755
// directory. Now only its owner can enter its directory or read it.
TEST_P(StoreConformanceTest, IdleActionsAreRecordedOnceAndQueriedPerUser) {
  const IdleRecord warn{7, "alice", "lab", "warn", 1000, 100, 2, 1800, "warning: ..."};
  const IdleRecord cancel{7, "alice", "lab", "cancel", 2000, 100, 2, 3800, "cancelled: ..."};
  const IdleRecord bobs{9, "bob", "lab", "warn", 1500, 500, 1, 1000, "warning: ..."};
  for (const IdleRecord& r : {warn, cancel, bobs, warn}) ASSERT_TRUE(store_->RecordIdle(r));
  auto all = store_->QueryIdle(std::nullopt, 0);
  ASSERT_TRUE(all) << all.error().message;
  ASSERT_EQ(all->size(), 3u);  // the repeated warning is kept once
  EXPECT_EQ((*all)[0].kind, "cancel");  // newest first
  EXPECT_EQ((*all)[0].wasted_gpu_seconds, 3800);
  auto alices = store_->QueryIdle(std::string("alice"), 1500);
  ASSERT_TRUE(alices);
  ASSERT_EQ(alices->size(), 1u);
  EXPECT_EQ((*alices)[0].reason, "cancelled: ...");
  EXPECT_EQ((*alices)[0].gpus, 2);
}


TEST_P(StoreConformanceTest, DeploymentsAreCreatedUpdatedListedAndRemovedWithTheirReplicas) {
  Deployment d{.model = "m1", .min_replicas = 0, .max_replicas = 3, .gpus_per_replica = 2,
               .profile = "llama-3.1-8b-h100", .ttft_slo_ms = 500, .command = ""};
  ASSERT_TRUE(store_->PutDeployment(d));
  d.max_replicas = 4;
  // Mon-Fri 09:00-12:00 min=3, Sun 20:00-24:00 min=1.
  d.timetable = {{0x1f, 540, 720, 3}, {0x40, 1200, 1440, 1}};
  ASSERT_TRUE(store_->PutDeployment(d));  // an update, not a second row
  ASSERT_TRUE(store_->PutDeployment(Deployment{.model = "m0", .gpu_slice = "3g.40gb"}));
  auto all = store_->ListDeployments();
  ASSERT_TRUE(all) << all.error().message;
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].model, "m0");
  EXPECT_EQ((*all)[0].gpu_slice, "3g.40gb");
  EXPECT_EQ((*all)[1].gpu_slice, "");
  EXPECT_EQ((*all)[1].max_replicas, 4);
  EXPECT_EQ((*all)[1].min_replicas, 0);
  EXPECT_EQ((*all)[1].profile, "llama-3.1-8b-h100");
  EXPECT_EQ((*all)[1].timetable, d.timetable);
  EXPECT_TRUE((*all)[0].timetable.empty());
  EXPECT_GT((*all)[1].updated_at, 0);

  ASSERT_TRUE(store_->ReplaceReplicas({{11, "m1", ReplicaState::kReady, "oss01", 18100, "http://127.0.0.1:18100", 2, true, 5},
                                       {12, "m0", ReplicaState::kPending, "", 18101, "", 1, false, 6}}));
  ASSERT_TRUE(store_->ReplaceReplicas({{11, "m1", ReplicaState::kDraining, "oss01", 18100, "http://127.0.0.1:18100", 2, true, 7},
                                       {13, "m1", ReplicaState::kStarting, "oss02", 18102, "http://127.0.0.1:18102", 2, false, 8}}));
  auto replicas = store_->ListReplicas();
  ASSERT_TRUE(replicas);
  ASSERT_EQ(replicas->size(), 2u);  // replaced whole: job 12 is gone
  EXPECT_EQ((*replicas)[0].state, ReplicaState::kDraining);
  EXPECT_TRUE((*replicas)[0].floor);
  EXPECT_EQ((*replicas)[1].port, 18102);

  ASSERT_TRUE(store_->RemoveDeployment("m1"));
  EXPECT_TRUE(store_->ListReplicas()->empty());
  auto missing = store_->RemoveDeployment("m1");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("bmas inference list"), std::string::npos);
}

TEST_P(StoreConformanceTest, GatewayReportsAreReplacedSharedAndPrunedWhenOld) {
  const int64_t t = 1'800'000'000'000;
  EXPECT_TRUE(store_->ListGatewayReports()->empty());
  ASSERT_TRUE(store_->PutGatewayReport({"gw-a", t, "first\tline\n"}));
  ASSERT_TRUE(store_->PutGatewayReport({"gw-b", t + 5, ""}));
  ASSERT_TRUE(store_->PutGatewayReport({"gw-a", t + 200, "second"}));
  // Another handle (a second gateway) reads what both wrote; each gateway's latest only.
  StorePtr again = OpenAgain();
  Store& other = again ? *again : *store_;
  auto reports = other.ListGatewayReports();
  ASSERT_TRUE(reports) << reports.error().message;
  EXPECT_EQ(*reports, (std::vector<GatewayReport>{{"gw-a", t + 200, "second"}, {"gw-b", t + 5, ""}}));
  // A put long after gw-b's last one drops gw-b's report (its gateway stopped).
  ASSERT_TRUE(other.PutGatewayReport({"gw-a", t + 6 + store_rules::kKeptGatewayReportMs, "third"}));
  EXPECT_EQ(*store_->ListGatewayReports(),
            (std::vector<GatewayReport>{
                {"gw-a", t + 6 + store_rules::kKeptGatewayReportMs, "third"}}));
}

TEST_P(StoreConformanceTest, ReservationsHoldEachLimitAndSettleOnce) {
  const int64_t now = 1'800'000'000;
  UserLimits rpm;
  rpm.rpm = 2;
  ASSERT_TRUE(store_->AddUser("r", rpm));
  EXPECT_TRUE(store_->Reserve("r1", "r", 10, now)->admitted);
  EXPECT_TRUE(store_->Reserve("r2", "r", 10, now)->admitted);
  EXPECT_EQ(store_->Reserve("r3", "r", 10, now)->refused_by, "rpm");
  EXPECT_TRUE(store_->Reserve("r1", "r", 10, now)->admitted);  // the same id: counted once
  EXPECT_TRUE(store_->Reserve("r3", "r", 10, now + 61)->admitted);  // a minute on

  UserLimits tpm;
  tpm.tpm = 100;
  ASSERT_TRUE(store_->AddUser("t", tpm));
  EXPECT_TRUE(store_->Reserve("t1", "t", 60, now)->admitted);
  EXPECT_EQ(store_->Reserve("t2", "t", 50, now)->refused_by, "tpm");  // 60 + 50 > 100
  ASSERT_TRUE(store_->Settle("t1", 30));  // it used less than its worst case
  ASSERT_TRUE(store_->Settle("t1", 60));  // a retried settlement changes nothing
  EXPECT_TRUE(store_->Reserve("t2", "t", 50, now)->admitted);   // 30 + 50
  EXPECT_TRUE(store_->Reserve("t3", "t", 20, now)->admitted);   // 30 + 50 + 20 = 100
  EXPECT_EQ(store_->Reserve("t4", "t", 1, now)->refused_by, "tpm");

  UserLimits day;
  day.tokens_per_day = 100;
  ASSERT_TRUE(store_->AddUser("d", day));
  EXPECT_TRUE(store_->Reserve("d1", "d", 100, now)->admitted);
  EXPECT_EQ(store_->Reserve("d2", "d", 1, now + 3600)->refused_by, "tokens_per_day");
  EXPECT_TRUE(store_->Reserve("d2", "d", 1, now - now % 86400 + 86400)->admitted);  // next day

  UserLimits one;
  one.max_concurrent = 1;
  ASSERT_TRUE(store_->AddUser("c", one));
  EXPECT_TRUE(store_->Reserve("c1", "c", 5, now)->admitted);
  EXPECT_EQ(store_->Reserve("c2", "c", 5, now)->refused_by, "max_concurrent");
  ASSERT_TRUE(store_->Settle("c1", 5));
  EXPECT_TRUE(store_->Reserve("c2", "c", 5, now)->admitted);
  // One its gateway never settled stops counting as in flight after an hour.
  EXPECT_TRUE(store_->Reserve("c3", "c", 5, now + 3601)->admitted);

  ASSERT_TRUE(store_->AddUser("free", {}));
  EXPECT_TRUE(store_->Reserve("f1", "free", 1'000'000, now)->admitted);
  EXPECT_EQ(store_->Reserve("x1", "nobody", 1, now)->refused_by, "user");
  auto unknown = store_->Settle("never-reserved", 1);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);
}

// One case of ReservationDecisionsAreStoreRulesAdmit: a user's reservations so far (each at a
// time, with what it settled to, or unsettled), then the limits and one more request.
struct PastReservation {
  int64_t ago = 0;  // seconds before `now` (negative: after, a gateway whose clock runs ahead)
  int64_t tokens = 0;
  std::optional<int64_t> used;  // settled to this; unsettled when unset
};
struct DecisionCase {
  const char* what;
  UserLimits limits;
  std::vector<PastReservation> past;
  int64_t tokens = 0;
  const char* refused_by = "";  // "" = admitted
};

UserLimits Limits(std::optional<int64_t> rpm, std::optional<int64_t> tpm,
                  std::optional<int64_t> day, std::optional<int64_t> concurrent) {
  UserLimits l;
  l.rpm = rpm;
  l.tpm = tpm;
  l.tokens_per_day = day;
  l.max_concurrent = concurrent;
  return l;
}

// Every store decides as store_rules::Admit does, on totals this test sums itself from the
// reservations it made: limits at their edge, the minute and day windows at theirs, settled
// and unsettled reservations, stale ones, and the order in which limits refuse.
TEST_P(StoreConformanceTest, ReservationDecisionsAreStoreRulesAdmit) {
  const int64_t now = 1'800'000'000;           // 08:00 UTC
  const int64_t since_midnight = now % 86400;  // 28800
  constexpr auto kNone = std::nullopt;
  const std::vector<DecisionCase> cases = {
      {"rpm, one below", Limits(3, kNone, kNone, kNone), {{10, 5}, {20, 5, 5}}, 5, ""},
      {"rpm, at it", Limits(3, kNone, kNone, kNone), {{10, 5}, {20, 5, 5}, {30, 5, 1}}, 5, "rpm"},
      {"rpm 0", Limits(0, kNone, kNone, kNone), {}, 1, "rpm"},
      {"rpm, a minute ago leaves", Limits(1, kNone, kNone, kNone), {{60, 5, 5}}, 5, ""},
      {"rpm, 59 s ago stays", Limits(1, kNone, kNone, kNone), {{59, 5, 5}}, 5, "rpm"},
      {"rpm, a clock ahead", Limits(1, kNone, kNone, kNone), {{-5, 5}}, 5, "rpm"},
      {"tpm, to the token", Limits(kNone, 100, kNone, kNone), {{5, 60}}, 40, ""},
      {"tpm, one over", Limits(kNone, 100, kNone, kNone), {{5, 60}}, 41, "tpm"},
      {"tpm, settled lower", Limits(kNone, 100, kNone, kNone), {{5, 60, 20}}, 80, ""},
      {"tpm, settled lower, one over", Limits(kNone, 100, kNone, kNone), {{5, 60, 20}}, 81,
       "tpm"},
      {"tpm, settled higher", Limits(kNone, 100, kNone, kNone), {{5, 10, 50}}, 51, "tpm"},
      {"tpm, a minute ago leaves", Limits(kNone, 100, kNone, kNone), {{60, 100}}, 100, ""},
      {"tpm, larger than the limit alone", Limits(kNone, 100, kNone, kNone), {}, 101, "tpm"},
      {"day, to the token", Limits(kNone, kNone, 1000, kNone), {{since_midnight, 600, 600}}, 400,
       ""},
      {"day, one over", Limits(kNone, kNone, 1000, kNone), {{since_midnight, 600, 600}}, 401,
       "tokens_per_day"},
      {"day, yesterday leaves", Limits(kNone, kNone, 1000, kNone),
       {{since_midnight + 1, 900, 900}}, 1000, ""},
      {"day, earlier today, minute free", Limits(kNone, 600, 1000, kNone), {{7200, 500, 500}}, 501,
       "tokens_per_day"},
      {"concurrent, at it", Limits(kNone, kNone, kNone, 2), {{1, 5}, {2, 5}}, 5, "max_concurrent"},
      {"concurrent, one settled", Limits(kNone, kNone, kNone, 2), {{1, 5}, {2, 5, 3}}, 5, ""},
      {"concurrent, stale after an hour", Limits(kNone, kNone, kNone, 1), {{3600, 5}}, 5, ""},
      {"concurrent, not yet stale", Limits(kNone, kNone, kNone, 1), {{3599, 5}}, 5,
       "max_concurrent"},
      {"rpm refuses before tpm", Limits(1, 10, kNone, kNone), {{1, 10}}, 10, "rpm"},
      {"tpm refuses before day", Limits(kNone, 10, 10, kNone), {{1, 10}}, 10, "tpm"},
      {"day refuses before concurrent", Limits(kNone, kNone, 10, 1), {{1, 10}}, 10,
       "tokens_per_day"},
      {"everything set, all fit", Limits(3, 100, 1000, 2), {{1, 30, 20}, {70, 500, 400}}, 80, ""},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const DecisionCase& c = cases[i];
    SCOPED_TRACE(c.what);
    const std::string user = fmt::format("u{}", i);
    // The past is made with no limits, then the case's limits are set.
    ASSERT_TRUE(store_->AddUser(user, {}));
    store_rules::ReservationTotals totals;
    for (size_t j = 0; j < c.past.size(); ++j) {
      const PastReservation& p = c.past[j];
      const std::string id = fmt::format("{}-{}", user, j);
      ASSERT_TRUE(store_->Reserve(id, user, p.tokens, now - p.ago)->admitted);
      if (p.used) {
        ASSERT_TRUE(store_->Settle(id, *p.used));
      }
      const int64_t counted = p.used.value_or(p.tokens);
      const int64_t at = now - p.ago;
      if (at > now - 60) {
        ++totals.requests_minute;
        totals.tokens_minute += counted;
      }
      if (at >= now - since_midnight) totals.tokens_day += counted;
      if (!p.used && at > now - store_rules::kStaleReservationSeconds) ++totals.in_flight;
    }
    UserChange change;
    change.rpm = c.limits.rpm;
    change.tpm = c.limits.tpm;
    change.tokens_per_day = c.limits.tokens_per_day;
    change.max_concurrent = c.limits.max_concurrent;
    ASSERT_TRUE(store_->ChangeUser(user, change));
    const Reservation rule = store_rules::Admit(c.limits, totals, c.tokens);
    EXPECT_EQ(rule.refused_by, c.refused_by);
    auto decided = store_->Reserve(user + "-probe", user, c.tokens, now);
    ASSERT_TRUE(decided) << decided.error().message;
    EXPECT_EQ(decided->admitted, rule.admitted);
    EXPECT_EQ(decided->refused_by, rule.refused_by);
  }
}

// Gateways reserving for one user at once, each with its own handle on the store: the tokens
// admitted never pass the limit, so overshoot is bounded by one request's reservation (here
// it is none: the check and the record are one transaction).
TEST_P(StoreConformanceTest, ConcurrentReservationsNeverPassTheLimit) {
  const int64_t now = 1'800'000'000;
  UserLimits l;
  l.tpm = 1000;
  ASSERT_TRUE(store_->AddUser("alice", l));
  constexpr int kGateways = 6, kRequests = 12, kTokens = 30;
  std::vector<StorePtr> handles;
  for (int i = 0; i < kGateways; ++i) handles.push_back(OpenAgain());
  std::atomic<int> admitted{0}, failed{0};
  std::vector<std::thread> threads;
  for (int g = 0; g < kGateways; ++g) {
    threads.emplace_back([&, g] {
      Store& s = handles[g] ? *handles[g] : *store_;
      for (int i = 0; i < kRequests; ++i) {
        auto r = s.Reserve(fmt::format("g{}-{}", g, i), "alice", kTokens, now);
        if (!r) {
          ++failed;
        } else if (r->admitted) {
          ++admitted;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_LE(admitted.load() * kTokens, 1000 + kTokens);
  EXPECT_EQ(admitted.load(), 1000 / kTokens);  // exact: 33 of the 72 asked
}

}  // namespace
}  // namespace bmas
