#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>


#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "common/private_files.h"
#include "store/sqlite_statement.h"
#include "store/store.h"
#include "store/store_rules.h"

namespace bmas {
namespace {

using sqlite_internal::Statement;

// Forward migrations: schema version i+1 is kMigrations[0..i] applied in order. Append only;
// never edit a migration that has shipped.
constexpr const char* kMigrations[] = {
    R"sql(
    CREATE TABLE users (
      name TEXT PRIMARY KEY,
      weight REAL NOT NULL DEFAULT 1.0,
      rpm INTEGER,
      tpm INTEGER,
      tokens_per_day INTEGER,
      max_concurrent INTEGER,
      created_at INTEGER NOT NULL
    );
    CREATE TABLE api_keys (
      id TEXT PRIMARY KEY,
      user TEXT NOT NULL,
      secret_sha256 BLOB NOT NULL,
      created_at INTEGER NOT NULL,
      revoked_at INTEGER
    );
    CREATE INDEX api_keys_by_user ON api_keys(user);
    )sql",
    R"sql(
    CREATE TABLE usage (
      minute INTEGER NOT NULL,
      user TEXT NOT NULL,
      model TEXT NOT NULL,
      backend TEXT NOT NULL,
      requests INTEGER NOT NULL DEFAULT 0,
      prompt_tokens INTEGER NOT NULL DEFAULT 0,
      completion_tokens INTEGER NOT NULL DEFAULT 0,
      PRIMARY KEY (minute, user, model, backend)
    );
    CREATE INDEX usage_by_user ON usage(user, minute);
    CREATE TABLE backends (
      url TEXT PRIMARY KEY,
      added_at INTEGER NOT NULL
    );
    )sql",
    R"sql(
    CREATE TABLE jobs (
      cluster TEXT NOT NULL,
      id INTEGER NOT NULL,
      user TEXT NOT NULL,
      name TEXT NOT NULL,
      partition TEXT NOT NULL,
      state TEXT NOT NULL,
      gpus INTEGER NOT NULL,
      nodes TEXT NOT NULL,
      submit_time INTEGER NOT NULL,
      start_time INTEGER NOT NULL,
      end_time INTEGER NOT NULL,
      exit_code INTEGER NOT NULL,
      PRIMARY KEY (cluster, id, start_time)
    );
    CREATE INDEX jobs_by_user ON jobs(user, end_time);
    )sql",
    R"sql(
    ALTER TABLE users ADD COLUMN ws_cpus INTEGER;
    ALTER TABLE users ADD COLUMN ws_memory TEXT;
    ALTER TABLE users ADD COLUMN ws_processes INTEGER;
    ALTER TABLE users ADD COLUMN ws_disk TEXT;
    )sql",
    R"sql(
    CREATE TABLE idle_actions (
      job INTEGER NOT NULL,
      user TEXT NOT NULL,
      partition TEXT NOT NULL,
      kind TEXT NOT NULL,
      at INTEGER NOT NULL,
      idle_since INTEGER NOT NULL,
      gpus INTEGER NOT NULL,
      wasted_gpu_seconds INTEGER NOT NULL,
      reason TEXT NOT NULL,
      PRIMARY KEY (job, kind, idle_since)
    );
    CREATE INDEX idle_actions_by_user ON idle_actions(user, at);
    )sql",
    R"sql(
    ALTER TABLE users ADD COLUMN admin INTEGER NOT NULL DEFAULT 0;
    )sql",
    R"sql(
    CREATE TABLE deployments (
      model TEXT PRIMARY KEY,
      min_replicas INTEGER NOT NULL,
      max_replicas INTEGER NOT NULL,
      gpus_per_replica INTEGER NOT NULL,
      profile TEXT NOT NULL,
      ttft_slo_ms INTEGER NOT NULL,
      command TEXT NOT NULL,
      updated_at INTEGER NOT NULL
    );
    CREATE TABLE replicas (
      job_id INTEGER PRIMARY KEY,
      model TEXT NOT NULL,
      state TEXT NOT NULL,
      node TEXT NOT NULL,
      port INTEGER NOT NULL,
      url TEXT NOT NULL,
      gpus INTEGER NOT NULL,
      floor INTEGER NOT NULL,
      since INTEGER NOT NULL
    );
    )sql",
    R"sql(
    ALTER TABLE deployments ADD COLUMN gpu_slice TEXT NOT NULL DEFAULT '';
    )sql",
    // A deployment's timetable floors: a JSON array of {"days", "from", "to", "min"} (days a
    // bit mask, bit 0 = Monday; from and to minutes after local midnight).
    R"sql(
    ALTER TABLE deployments ADD COLUMN timetable TEXT NOT NULL DEFAULT '[]';
    )sql",
    R"sql(
    CREATE TABLE reservations (
      request_id TEXT PRIMARY KEY,
      user TEXT NOT NULL,
      at INTEGER NOT NULL,
      tokens INTEGER NOT NULL,
      used INTEGER
    );
    CREATE INDEX reservations_by_user ON reservations(user, at);
    )sql",
    // Each Reserve prunes reservations older than two days: by this index, not by a scan.
    R"sql(
    CREATE INDEX reservations_by_time ON reservations(at);
    )sql",
    // Token fairness across gateways (Store::PutGatewayReport): two gateways may share one
    // SQLite file on one machine, so this store keeps reports too.
    R"sql(
    CREATE TABLE gateway_reports (
      gateway TEXT PRIMARY KEY,
      at_ms INTEGER NOT NULL,
      body TEXT NOT NULL
    );
    )sql",
};
constexpr int kSchemaVersion = static_cast<int>(std::size(kMigrations));

class SqliteStore final : public Store {
 public:
  SqliteStore(sqlite3* db, std::string path, Env& env)
      : db_(db), path_(std::move(path)), env_(env) {}
  ~SqliteStore() override { sqlite3_close_v2(db_); }

  Result<void> Init() {
    // Another process may hold the write lock briefly (a gateway flushing usage).
    sqlite3_busy_timeout(db_, 5000);
    // Switching to WAL can report SQLITE_BUSY at once, without the busy timeout, while another
    // process opens the same new file: retry for a while.
    Result<void> wal;
    for (int attempt = 0; attempt < 100; ++attempt) {
      wal = Exec("PRAGMA journal_mode=WAL;");
      if (wal || sqlite3_errcode(db_) != SQLITE_BUSY) break;
      sqlite3_sleep(50);
    }
    if (!wal) return wal;
    if (auto r = Exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"); !r) return r;
    // Read the version and migrate inside one write transaction, so that two processes opening
    // the same store at once cannot both migrate.
    if (auto r = Exec("BEGIN IMMEDIATE;"); !r) return r;
    int version = 0;
    {
      Statement v(db_, "PRAGMA user_version");
      if (!v.ok() || v.Step() != SQLITE_ROW) {
        (void)Exec("ROLLBACK;");  // the error being returned says more
        return Fail("reading the schema version");
      }
      version = static_cast<int>(v.Int(0));
    }
    if (version > kSchemaVersion) {
      (void)Exec("ROLLBACK;");  // the error being returned says more
      return Error{ErrorCode::kInvalidArgument,
                   fmt::format("{} has schema version {}, newer than this bmas knows ({}): use "
                               "the newer bmas that wrote it",
                               path_, version, kSchemaVersion)};
    }
    for (int i = version; i < kSchemaVersion; ++i) {
      std::string sql = fmt::format("{} PRAGMA user_version = {};", kMigrations[i], i + 1);
      if (auto r = Exec(sql.c_str()); !r) {
        (void)Exec("ROLLBACK;");  // the error being returned says more
        return r;
      }
    }
    if (auto r = Exec("COMMIT;"); !r) return r;
    version_ = kSchemaVersion;
    return {};
  }

  Result<void> AddUser(const std::string& name, const UserLimits& l) override {
    if (auto r = store_rules::CheckUserName(name); !r) return r;
    if (auto r = store_rules::CheckLimits(l); !r) return r;
    Statement s(db_,
                "INSERT INTO users (name, weight, rpm, tpm, tokens_per_day, max_concurrent, "
                "created_at, ws_cpus, ws_memory, ws_processes, ws_disk) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    s.Bind(1, name).Bind(2, l.weight).Bind(3, l.rpm).Bind(4, l.tpm).Bind(5, l.tokens_per_day);
    s.Bind(6, l.max_concurrent).Bind(7, UnixNow());
    s.Bind(8, l.workspace.cpus).BindOptText(9, l.workspace.memory);
    s.Bind(10, l.workspace.processes).BindOptText(11, l.workspace.disk);
    int rc = s.Step();
    if (rc == SQLITE_CONSTRAINT) return store_rules::UserExists(name);
    if (rc != SQLITE_DONE) return Fail("adding a user");
    return {};
  }

  Result<void> ChangeUser(const std::string& name, const UserChange& c) override {
    auto changed = store_rules::ChangedLimits(*this, name, c);
    if (!changed) return changed.error();
    const UserLimits& l = *changed;
    const WorkspaceLimits& w = l.workspace;
    Statement s(db_,
                "UPDATE users SET weight = ?, rpm = ?, tpm = ?, tokens_per_day = ?, "
                "max_concurrent = ?, ws_cpus = ?, ws_memory = ?, ws_processes = ?, ws_disk = ? "
                "WHERE name = ?");
    s.Bind(1, l.weight).Bind(2, l.rpm).Bind(3, l.tpm).Bind(4, l.tokens_per_day);
    s.Bind(5, l.max_concurrent).Bind(6, w.cpus).BindOptText(7, w.memory).Bind(8, w.processes);
    s.BindOptText(9, w.disk).Bind(10, name);
    if (s.Step() != SQLITE_DONE) return Fail("changing a user");
    if (c.admin) {
      Statement a(db_, "UPDATE users SET admin = ? WHERE name = ?");
      a.Bind(1, static_cast<int64_t>(*c.admin ? 1 : 0)).Bind(2, name);
      if (a.Step() != SQLITE_DONE) return Fail("changing a user's admin flag");
    }
    return {};
  }

  Result<void> RemoveUser(const std::string& name) override {
    if (auto r = Exec("BEGIN IMMEDIATE;"); !r) return r;
    Statement del(db_, "DELETE FROM users WHERE name = ?");
    del.Bind(1, name);
    if (del.Step() != SQLITE_DONE) {
      (void)Exec("ROLLBACK;");  // the error being returned says more
      return Fail("removing a user");
    }
    if (sqlite3_changes(db_) == 0) {
      (void)Exec("ROLLBACK;");  // the error being returned says more
      return store_rules::NoSuchUser(name);
    }
    Statement revoke(db_, "UPDATE api_keys SET revoked_at = ? WHERE user = ? AND revoked_at IS NULL");
    revoke.Bind(1, UnixNow()).Bind(2, name);
    if (revoke.Step() != SQLITE_DONE) {
      (void)Exec("ROLLBACK;");  // the error being returned says more
      return Fail("revoking a removed user's keys");
    }
    return Exec("COMMIT;");
  }

  Result<std::optional<User>> FindUser(const std::string& name) override {
    Statement s(db_, (std::string(kSelectUsers) + " WHERE name = ?").c_str());
    s.Bind(1, name);
    int rc = s.Step();
    if (rc == SQLITE_DONE) return std::optional<User>();
    if (rc != SQLITE_ROW) return Fail("reading a user");
    return std::optional<User>(ReadUser(s));
  }

  Result<std::vector<User>> ListUsers() override {
    Statement s(db_, (std::string(kSelectUsers) + " ORDER BY name").c_str());
    auto users = Rows(s, ReadUser);
    if (!users) return Fail("listing users");
    return std::move(*users);
  }

  Result<std::string> CreateKey(const std::string& user) override {
    if (auto r = store_rules::RequireUser(*this, user); !r) return r.error();
    const store_rules::NewKey key = store_rules::MintKey();
    Statement s(db_, "INSERT INTO api_keys (id, user, secret_sha256, created_at) VALUES (?, ?, ?, ?)");
    s.Bind(1, key.id).Bind(2, user);
    s.BindBlob(3, key.digest.data(), static_cast<int>(key.digest.size())).Bind(4, UnixNow());
    if (s.Step() != SQLITE_DONE) return Fail("creating a key");
    return key.key;
  }

  Result<void> RevokeKey(const std::string& key_id) override {
    Statement s(db_, "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL");
    s.Bind(1, UnixNow()).Bind(2, key_id);
    if (s.Step() != SQLITE_DONE) return Fail("revoking a key");
    if (sqlite3_changes(db_) == 0) return store_rules::NoSuchKey(key_id);
    return {};
  }

  Result<std::vector<KeyInfo>> ListKeys(const std::string& user) override {
    if (auto r = store_rules::RequireUser(*this, user); !r) return r.error();
    Statement s(db_,
                "SELECT id, user, created_at, revoked_at FROM api_keys WHERE user = ? "
                "ORDER BY created_at, id");
    s.Bind(1, user);
    auto keys = Rows(s, [](const Statement& row) {
      return KeyInfo{row.Text(0), row.Text(1), row.Int(2), row.OptInt(3)};
    });
    if (!keys) return Fail("listing keys");
    return std::move(*keys);
  }

  Result<std::optional<std::string>> Authenticate(const std::string& key) override {
    auto presented = store_rules::ParseKey(key);
    if (!presented) return std::optional<std::string>();
    Statement s(db_,
                "SELECT k.user, k.secret_sha256 FROM api_keys k JOIN users u ON u.name = k.user "
                "WHERE k.id = ? AND k.revoked_at IS NULL");
    s.Bind(1, presented->id);
    int rc = s.Step();
    if (rc == SQLITE_DONE) return std::optional<std::string>();
    if (rc != SQLITE_ROW) return Fail("checking a key");
    if (!store_rules::SameDigest(s.Blob(1), presented->digest)) return std::optional<std::string>();
    return std::optional<std::string>(s.Text(0));
  }

  Result<void> RecordUsage(const std::vector<UsageDelta>& deltas) override {
    if (deltas.empty()) return {};
    if (auto r = Exec("BEGIN IMMEDIATE;"); !r) return r;
    Statement s(db_,
                "INSERT INTO usage (minute, user, model, backend, requests, prompt_tokens, "
                "completion_tokens) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (minute, user, model, backend) DO UPDATE SET "
                "requests = requests + excluded.requests, "
                "prompt_tokens = prompt_tokens + excluded.prompt_tokens, "
                "completion_tokens = completion_tokens + excluded.completion_tokens");
    for (const UsageDelta& d : deltas) {
      s.Bind(1, d.minute).Bind(2, d.user).Bind(3, d.model).Bind(4, d.backend);
      s.Bind(5, d.requests).Bind(6, d.prompt_tokens).Bind(7, d.completion_tokens);
      if (s.Step() != SQLITE_DONE) {
        (void)Exec("ROLLBACK;");  // the error being returned says more
        return Fail("recording usage");
      }
      s.Reset();
    }
    return Exec("COMMIT;");
  }

  Result<std::vector<UsageRow>> QueryUsage(const std::optional<std::string>& user,
                                           int64_t since_unix) override {
    Statement s(db_,
                "SELECT user, model, backend, SUM(requests), SUM(prompt_tokens), "
                "SUM(completion_tokens) FROM usage WHERE minute >= ? AND (? IS NULL OR user = ?) "
                "GROUP BY user, model, backend ORDER BY user, model, backend");
    BindSinceAndUser(s, since_unix / 60, user);
    auto rows = Rows(s, [](const Statement& row) {
      return UsageRow{row.Text(0), row.Text(1), row.Text(2), row.Int(3), row.Int(4), row.Int(5)};
    });
    if (!rows) return Fail("reading usage");
    return std::move(*rows);
  }

  Result<int> RecordJobs(const std::vector<JobRecord>& jobs) override {
    if (jobs.empty()) return 0;
    if (auto r = Exec("BEGIN IMMEDIATE;"); !r) return r.error();
    Statement s(db_,
                "INSERT OR IGNORE INTO jobs (cluster, id, user, name, partition, state, gpus, "
                "nodes, submit_time, start_time, end_time, exit_code) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    int added = 0;
    for (const JobRecord& j : jobs) {
      std::string nodes;
      for (const std::string& n : j.nodes) nodes += (nodes.empty() ? "" : ",") + n;
      s.Bind(1, j.cluster).Bind(2, j.id).Bind(3, j.user).Bind(4, j.name).Bind(5, j.partition);
      s.Bind(6, j.state).Bind(7, int64_t{j.gpus}).Bind(8, nodes).Bind(9, j.submit_time);
      s.Bind(10, j.start_time).Bind(11, j.end_time).Bind(12, int64_t{j.exit_code});
      if (s.Step() != SQLITE_DONE) {
        (void)Exec("ROLLBACK;");  // the error being returned says more
        return Fail("recording jobs");
      }
      added += sqlite3_changes(db_);
      s.Reset();
    }
    if (auto r = Exec("COMMIT;"); !r) return r.error();
    return added;
  }

  Result<std::vector<JobUsageRow>> QueryJobUsage(const std::optional<std::string>& user,
                                                 int64_t since_unix) override {
    Statement s(db_,
                "SELECT user, COUNT(*), SUM(CASE WHEN start_time > 0 AND end_time > start_time "
                "THEN gpus * (end_time - start_time) ELSE 0 END) FROM jobs "
                "WHERE end_time >= ? AND (? IS NULL OR user = ?) GROUP BY user ORDER BY user");
    BindSinceAndUser(s, since_unix, user);
    auto rows = Rows(s, [](const Statement& row) {
      return JobUsageRow{row.Text(0), row.Int(1), row.Int(2)};
    });
    if (!rows) return Fail("reading job usage");
    return std::move(*rows);
  }

  Result<void> RecordIdle(const IdleRecord& r) override {
    Statement s(db_,
                "INSERT OR IGNORE INTO idle_actions (job, user, partition, kind, at, idle_since, "
                "gpus, wasted_gpu_seconds, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    s.Bind(1, r.job).Bind(2, r.user).Bind(3, r.partition).Bind(4, r.kind).Bind(5, r.at);
    s.Bind(6, r.idle_since).Bind(7, int64_t{r.gpus}).Bind(8, r.wasted_gpu_seconds);
    s.Bind(9, r.reason);
    if (s.Step() != SQLITE_DONE) return Fail("recording an idle-GPU action");
    return {};
  }

  Result<std::vector<IdleRecord>> QueryIdle(const std::optional<std::string>& user,
                                            int64_t since_unix) override {
    Statement s(db_,
                "SELECT job, user, partition, kind, at, idle_since, gpus, wasted_gpu_seconds, "
                "reason FROM idle_actions WHERE at >= ? AND (? IS NULL OR user = ?) "
                "ORDER BY at DESC, job DESC");
    BindSinceAndUser(s, since_unix, user);
    auto rows = Rows(s, [](const Statement& row) {
      return IdleRecord{row.Int(0), row.Text(1), row.Text(2), row.Text(3), row.Int(4),
                        row.Int(5), static_cast<int>(row.Int(6)), row.Int(7), row.Text(8)};
    });
    if (!rows) return Fail("reading idle-GPU actions");
    return std::move(*rows);
  }

  Result<void> AddBackend(const std::string& url) override {
    Statement s(db_, "INSERT INTO backends (url, added_at) VALUES (?, ?)");
    s.Bind(1, url).Bind(2, UnixNow());
    int rc = s.Step();
    if (rc == SQLITE_CONSTRAINT) return store_rules::BackendListed(url);
    if (rc != SQLITE_DONE) return Fail("adding a backend");
    return {};
  }

  Result<void> RemoveBackend(const std::string& url) override {
    Statement s(db_, "DELETE FROM backends WHERE url = ?");
    s.Bind(1, url);
    if (s.Step() != SQLITE_DONE) return Fail("removing a backend");
    if (sqlite3_changes(db_) == 0) return store_rules::NoSuchBackend(url);
    return {};
  }

  Result<std::vector<std::string>> ListBackends() override {
    Statement s(db_, "SELECT url FROM backends ORDER BY added_at, url");
    auto urls = Rows(s, [](const Statement& row) { return row.Text(0); });
    if (!urls) return Fail("listing backends");
    return std::move(*urls);
  }

  int schema_version() const override { return version_; }

  Result<void> PutGatewayReport(const GatewayReport& report) override {
    Statement prune(db_, "DELETE FROM gateway_reports WHERE at_ms < ?");
    prune.Bind(1, report.at_ms - store_rules::kKeptGatewayReportMs);
    if (prune.Step() != SQLITE_DONE) return Fail("pruning stopped gateways' reports");
    Statement s(db_,
                "INSERT INTO gateway_reports (gateway, at_ms, body) VALUES (?, ?, ?) "
                "ON CONFLICT (gateway) DO UPDATE SET at_ms = excluded.at_ms, body = excluded.body");
    s.Bind(1, report.gateway).Bind(2, report.at_ms).Bind(3, report.body);
    if (s.Step() != SQLITE_DONE) return Fail("saving a gateway's report");
    return {};
  }

  Result<std::vector<GatewayReport>> ListGatewayReports() override {
    Statement s(db_, "SELECT gateway, at_ms, body FROM gateway_reports ORDER BY gateway");
    auto reports = Rows(s, [](const Statement& row) {
      return GatewayReport{row.Text(0), row.Int(1), row.Text(2)};
    });
    if (!reports) return Fail("listing gateways' reports");
    return std::move(*reports);
  }

  Result<Reservation> Reserve(const std::string& request_id, const std::string& user,
                              int64_t tokens, int64_t now) override {
    if (auto r = Exec("BEGIN IMMEDIATE;"); !r) return r.error();
    auto found = FindUser(user);
    std::optional<Reservation> answer;
    if (found && *found) {
      answer = sqlite_internal::Reserve(db_, request_id, user, (*found)->limits, tokens, now);
    } else if (found) {
      answer = Reservation{false, "user"};
    }
    if (!answer) {
      Error e = found ? Fail("reserving") : found.error();
      (void)Exec("ROLLBACK;");  // the error being returned says more
      return e;
    }
    if (auto r = Exec("COMMIT;"); !r) return r.error();
    return *answer;
  }

  Result<void> Settle(const std::string& request_id, int64_t used_tokens) override {
    auto settled = sqlite_internal::Settle(db_, request_id, used_tokens);
    if (!settled) return Fail("settling a reservation");
    if (!*settled) return store_rules::NoSuchReservation(request_id);
    return {};
  }

  Result<void> PutDeployment(const Deployment& d) override {
    if (!sqlite_internal::PutDeployment(db_, d, UnixNow())) return Fail("saving a deployment");
    return {};
  }

  Result<void> RemoveDeployment(const std::string& model) override {
    if (auto r = Exec("BEGIN IMMEDIATE;"); !r) return r;
    auto removed = sqlite_internal::RemoveDeployment(db_, model);
    if (!removed) {
      (void)Exec("ROLLBACK;");  // the error being returned says more
      return Fail("removing a deployment");
    }
    if (auto r = Exec("COMMIT;"); !r) return r;
    if (!*removed) return store_rules::NoSuchDeployment(model);
    return {};
  }

  Result<std::vector<Deployment>> ListDeployments() override {
    auto rows = sqlite_internal::ListDeployments(db_);
    if (!rows) return Fail("listing deployments");
    return std::move(*rows);
  }

  Result<void> ReplaceReplicas(const std::vector<ReplicaRecord>& replicas) override {
    if (auto r = Exec("BEGIN IMMEDIATE;"); !r) return r;
    if (!sqlite_internal::ReplaceReplicas(db_, replicas)) {
      (void)Exec("ROLLBACK;");  // the error being returned says more
      return Fail("recording replicas");
    }
    return Exec("COMMIT;");
  }

  Result<std::vector<ReplicaRecord>> ListReplicas() override {
    auto rows = sqlite_internal::ListReplicas(db_);
    if (!rows) return Fail("listing replicas");
    return std::move(*rows);
  }

 private:
  static constexpr const char* kSelectUsers =
      "SELECT name, weight, rpm, tpm, tokens_per_day, max_concurrent, created_at, ws_cpus, "
      "ws_memory, ws_processes, ws_disk, admin FROM users";

  static User ReadUser(const Statement& s) {
    User u;
    u.name = s.Text(0);
    u.limits.weight = s.Double(1);
    u.limits.rpm = s.OptInt(2);
    u.limits.tpm = s.OptInt(3);
    u.limits.tokens_per_day = s.OptInt(4);
    u.limits.max_concurrent = s.OptInt(5);
    u.created_at = s.Int(6);
    u.limits.workspace.cpus = s.OptInt(7);
    u.limits.workspace.memory = s.OptText(8);
    u.admin = s.Int(11) != 0;
    u.limits.workspace.processes = s.OptInt(9);
    u.limits.workspace.disk = s.OptText(10);
    return u;
  }

  Error Fail(const char* what) const {
    return Internal(fmt::format("{}: {} failed: {}", path_, what, sqlite3_errmsg(db_)));
  }

  Result<void> Exec(const char* sql) {
    char* message = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
      std::string text = message != nullptr ? message : sqlite3_errmsg(db_);
      sqlite3_free(message);
      return Internal(fmt::format("{}: {}", path_, text));
    }
    return {};
  }

  // Unix seconds: what rows are stamped with.
  int64_t UnixNow() const { return static_cast<int64_t>(env_.UnixNow()); }

  sqlite3* db_;
  std::string path_;
  Env& env_;
  int version_ = 0;
};

}  // namespace

bool IsValidUserName(const std::string& name) {
  static const std::regex kPattern("^[a-z_][a-z0-9_-]{0,31}$");
  return std::regex_match(name, kPattern);
}

std::string CheckWorkspaceLimits(const WorkspaceLimits& limits) {
  if (limits.cpus && *limits.cpus < 1) {
    return fmt::format("a workspace's cpus must be 1 or more (got {})", *limits.cpus);
  }
  if (limits.processes && *limits.processes < 1) {
    return fmt::format("a workspace's processes must be 1 or more (got {})", *limits.processes);
  }
  // LXD's sizes: a number and a unit (B, kB, MB, ..., KiB, MiB, ...), or none (bytes).
  static const std::regex kSize(R"(^[0-9]+(\.[0-9]+)?(B|[kMGTPE]B|[KMGTPE]iB)?$)");
  static const std::regex kPercent(R"(^[0-9]+(\.[0-9]+)?%$)");
  if (limits.memory && !std::regex_match(*limits.memory, kSize) &&
      !std::regex_match(*limits.memory, kPercent)) {
    return fmt::format("'{}' is not a memory size: give e.g. 4GiB, 512MiB or 50%", *limits.memory);
  }
  if (limits.disk && !std::regex_match(*limits.disk, kSize)) {
    return fmt::format("'{}' is not a disk size: give e.g. 20GiB", *limits.disk);
  }
  return "";
}

std::string StorePath(const std::string& state_dir) { return state_dir + "/store/bmas.db"; }

namespace {

constexpr const char* kStoreFileSuffixes[] = {"", "-wal", "-shm", "-journal"};

// Closes a descriptor at the end of its scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

// The store's directory <state>/store, 0700, made when absent, opened with O_NOFOLLOW under the
// state dir. A store that an older bmas kept beside it (<state>/bmas.db, world-readable) is
// moved in, with its WAL. As root, no symlink is followed anywhere on the way (the store's
// directory belongs to the service account, which must not steer root), and the directory
// above it must be root's, that no one else may change.
Result<int> OpenStoreDir(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(path).parent_path();
  const std::string state = dir.parent_path().empty() ? "." : dir.parent_path().string();
  const bool root = geteuid() == 0;
  Result<int> state_fd = Result<int>(-1);
  if (root) {
    state_fd = OpenDirNoSymlinks(state);
  } else {
    const int fd = open(state.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    state_fd = fd >= 0 ? Result<int>(fd)
                       : Result<int>(Internal(fmt::format("cannot open {}: {}", state,
                                                          std::strerror(errno))));
  }
  if (!state_fd) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("cannot open the store {}: {}", path, state_fd.error().message)};
  }
  FdCloser state_closer(*state_fd);
  // What holds the store's directory must not be another account's to change either (a
  // sticky, world-writable one, /tmp, keeps root's entries root's).
  struct stat st;
  const auto others_change = [](const struct stat& s) {
    return s.st_uid != 0 || ((s.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (s.st_mode & S_ISVTX) == 0);
  };
  if (root && fstat(*state_fd, &st) == 0 && others_change(st)) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("refusing to open the store {} as root: {} (which holds its "
                             "directory) belongs to uid {} with mode {:o}; as root, bmas keeps its "
                             "store only in a state dir that root owns and no one else may write "
                             "(chown root {} && chmod 755 {})",
                             path, state, st.st_uid, st.st_mode & 07777, state, state)};
  }
  const std::string name = dir.filename().string();
  const bool made = mkdirat(*state_fd, name.c_str(), 0700) == 0;
  if (!made && errno != EEXIST) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("cannot open the store {}: cannot create its directory: {} (check "
                             "the state dir and its permissions)",
                             path, std::strerror(errno))};
  }
  const int fd = openat(*state_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("cannot open the store's directory {}: {}{}", dir.string(),
                             std::strerror(e),
                             e == ELOOP || e == ENOTDIR
                                 ? " (it is a symlink or a file: remove it, and find out who "
                                   "made it)"
                                 : ""),
                 {}};
  }
  if (made && name == "store") {
    const std::string base = fs::path(path).filename().string();
    for (const char* suffix : kStoreFileSuffixes) {
      renameat(*state_fd, (std::string("bmas.db") + suffix).c_str(), fd, (base + suffix).c_str());
    }
  }
  return fd;
}

}  // namespace

Result<void> HandStoreTo(const std::string& state_dir, uid_t uid, gid_t gid) {
  const std::string path = StorePath(state_dir);
  auto dir_fd = OpenStoreDir(path);
  if (!dir_fd) return dir_fd.error();
  FdCloser closer(*dir_fd);
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (fchown(*dir_fd, uid, gid) != 0 || fchmod(*dir_fd, 0700) != 0) {
    return Internal(fmt::format("cannot give {} to uid {}: {}", dir, uid, std::strerror(errno)));
  }
  const std::string base = std::filesystem::path(path).filename().string();
  for (const char* suffix : kStoreFileSuffixes) {
    if (auto r = HandOverInDir(*dir_fd, dir, base + suffix, {uid, gid, 0600, std::nullopt}); !r) {
      return Error{r.error().code,
                   fmt::format("cannot give the store to uid {}: {}", uid, r.error().message)};
    }
  }
  return {};
}

Result<StorePtr> OpenSqliteStore(const std::string& path, Env& env) {
  auto dir_fd = OpenStoreDir(path);
  if (!dir_fd) return dir_fd.error();
  FdCloser closer(*dir_fd);
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const std::string base = std::filesystem::path(path).filename().string();
  // As root, in the service account's directory: SQLite follows no link either (in any
  // component; it opens the WAL and the shared memory with O_NOFOLLOW), and files that are not
  // plain store files are refused up front with a clear message.
  const bool root = geteuid() == 0;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
  if (root) {
    struct stat st;
    if (fstat(*dir_fd, &st) != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      return Error{ErrorCode::kPermissionDenied,
                   fmt::format("refusing to open the store {} as root: others may write its "
                               "directory {} (chmod 700 {})",
                               path, dir, dir)};
    }
    for (const char* suffix : kStoreFileSuffixes) {
      if (auto r = HandOverInDir(*dir_fd, dir, base + suffix, {}); !r) {
        return Error{r.error().code, fmt::format("cannot open the store: {}", r.error().message)};
      }
    }
    flags |= SQLITE_OPEN_NOFOLLOW;
  }
  sqlite3* db = nullptr;
  const std::string full = std::filesystem::absolute(path).string();
  int rc = sqlite3_open_v2(full.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    if (sqlite3_extended_errcode(db) == SQLITE_CANTOPEN_SYMLINK) {
      message += " (a symlink on its path: as root, bmas follows none there; give the state "
                 "dir's real path)";
    }
    sqlite3_close_v2(db);
    return Error{ErrorCode::kUnavailable,
                 fmt::format("cannot open the store {}: {} (check the state dir and its "
                             "permissions)",
                             path, message)};
  }
  auto store = std::make_unique<SqliteStore>(db, path, env);
  if (auto r = store->Init(); !r) return r.error();
  // SQLite creates it, and its WAL after it, with the umask's mode: readable by all.
  for (const char* suffix : kStoreFileSuffixes) {
    const HandOver tighten{std::nullopt, std::nullopt, 0600, geteuid()};
    if (auto r = HandOverInDir(*dir_fd, dir, base + suffix, tighten); !r) return r.error();
  }
  return StorePtr(std::move(store));
}

}  // namespace bmas
