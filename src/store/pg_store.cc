// The store on PostgreSQL (libpq): for sites that run more than one gateway, or keep their
// state on a database server. It answers as the SQLite store does (store/store_rules.h; the
// conformance suite runs against both). Every value reaches the server as a parameter, apart
// from the SQL text.

#include "store/pg_store.h"

#include <fmt/format.h>

#include "store/pg_conn.h"
#include "store/postgres_store.h"
#include "store/store.h"
#include "store/store_rules.h"

namespace bmas {
namespace {

using pg_internal::Bytes;
using pg_internal::Connection;
using pg_internal::P;
using pg_internal::Rows;
using pg_internal::Transaction;

// Forward migrations: schema version i+1 is kMigrations[0..i] applied in order, each in its own
// transaction that also records its number in bmas_schema. Append only; never edit a migration
// that has shipped. (Version 1 is the SQLite store's version 8 at once.)
constexpr const char* kMigrations[] = {
    R"sql(
    CREATE TABLE users (
      name TEXT PRIMARY KEY,
      weight DOUBLE PRECISION NOT NULL DEFAULT 1.0,
      rpm BIGINT,
      tpm BIGINT,
      tokens_per_day BIGINT,
      max_concurrent BIGINT,
      created_at BIGINT NOT NULL,
      ws_cpus BIGINT,
      ws_memory TEXT,
      ws_processes BIGINT,
      ws_disk TEXT,
      admin BOOLEAN NOT NULL DEFAULT false
    );
    CREATE TABLE api_keys (
      id TEXT PRIMARY KEY,
      user_name TEXT NOT NULL,
      secret_sha256 BYTEA NOT NULL,
      created_at BIGINT NOT NULL,
      revoked_at BIGINT
    );
    CREATE INDEX api_keys_by_user ON api_keys(user_name);
    CREATE TABLE usage (
      minute BIGINT NOT NULL,
      user_name TEXT NOT NULL,
      model TEXT NOT NULL,
      backend TEXT NOT NULL,
      requests BIGINT NOT NULL DEFAULT 0,
      prompt_tokens BIGINT NOT NULL DEFAULT 0,
      completion_tokens BIGINT NOT NULL DEFAULT 0,
      PRIMARY KEY (minute, user_name, model, backend)
    );
    CREATE INDEX usage_by_user ON usage(user_name, minute);
    CREATE TABLE backends (
      url TEXT PRIMARY KEY,
      added_at BIGINT NOT NULL
    );
    CREATE TABLE jobs (
      cluster TEXT NOT NULL,
      id BIGINT NOT NULL,
      user_name TEXT NOT NULL,
      name TEXT NOT NULL,
      partition_name TEXT NOT NULL,
      state TEXT NOT NULL,
      gpus BIGINT NOT NULL,
      nodes TEXT NOT NULL,
      submit_time BIGINT NOT NULL,
      start_time BIGINT NOT NULL,
      end_time BIGINT NOT NULL,
      exit_code BIGINT NOT NULL,
      PRIMARY KEY (cluster, id, start_time)
    );
    CREATE INDEX jobs_by_user ON jobs(user_name, end_time);
    CREATE TABLE idle_actions (
      job BIGINT NOT NULL,
      user_name TEXT NOT NULL,
      partition_name TEXT NOT NULL,
      kind TEXT NOT NULL,
      at BIGINT NOT NULL,
      idle_since BIGINT NOT NULL,
      gpus BIGINT NOT NULL,
      wasted_gpu_seconds BIGINT NOT NULL,
      reason TEXT NOT NULL,
      PRIMARY KEY (job, kind, idle_since)
    );
    CREATE INDEX idle_actions_by_user ON idle_actions(user_name, at);
    CREATE TABLE deployments (
      model TEXT PRIMARY KEY,
      min_replicas BIGINT NOT NULL,
      max_replicas BIGINT NOT NULL,
      gpus_per_replica BIGINT NOT NULL,
      profile TEXT NOT NULL,
      ttft_slo_ms BIGINT NOT NULL,
      command TEXT NOT NULL,
      updated_at BIGINT NOT NULL,
      gpu_slice TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE replicas (
      job_id BIGINT PRIMARY KEY,
      model TEXT NOT NULL,
      state TEXT NOT NULL,
      node TEXT NOT NULL,
      port BIGINT NOT NULL,
      url TEXT NOT NULL,
      gpus BIGINT NOT NULL,
      floor BOOLEAN NOT NULL,
      since BIGINT NOT NULL
    );
    )sql",
    R"sql(
    CREATE TABLE reservations (
      request_id TEXT PRIMARY KEY,
      user_name TEXT NOT NULL,
      at BIGINT NOT NULL,
      tokens BIGINT NOT NULL,
      used BIGINT
    );
    CREATE INDEX reservations_by_user ON reservations(user_name, at);
    )sql",
    // A deployment's timetable floors (store_rules::TimetableJson).
    R"sql(
    ALTER TABLE deployments ADD COLUMN timetable TEXT NOT NULL DEFAULT '[]';
    )sql",
    // Each Reserve prunes reservations older than two days: by this index, not by a scan.
    R"sql(
    CREATE INDEX reservations_by_time ON reservations(at);
    )sql",
    // Reserve and Settle as one statement each (pg_reservations.cc): server-side functions,
    // and per-user counters by second and by UTC day, so that a Reserve reads at most 60 + 2
    // counter rows rather than summing every reservation of the day.
    R"sql(
    CREATE TABLE reserved_seconds (
      user_name TEXT NOT NULL,
      second BIGINT NOT NULL,
      requests BIGINT NOT NULL,
      tokens BIGINT NOT NULL,
      PRIMARY KEY (user_name, second)
    );
    CREATE TABLE reserved_days (
      user_name TEXT NOT NULL,
      day BIGINT NOT NULL,
      tokens BIGINT NOT NULL,
      PRIMARY KEY (user_name, day)
    );
    INSERT INTO reserved_seconds
      SELECT user_name, at, COUNT(*), SUM(COALESCE(used, tokens)) FROM reservations
      GROUP BY user_name, at;
    INSERT INTO reserved_days
      SELECT user_name, at - at % 86400, SUM(COALESCE(used, tokens)) FROM reservations
      GROUP BY user_name, at - at % 86400;
    DROP INDEX reservations_by_user;
    CREATE INDEX reservations_unsettled ON reservations(user_name, at) WHERE used IS NULL;

    -- The user's refusal ('user', 'rpm', 'tpm', 'tokens_per_day', 'max_concurrent'), or '' when
    -- admitted and recorded. The same rule as store_rules::Admit. Each statement of a plpgsql
    -- function reads the rows committed before it started, so the sums below, read after the
    -- user's row lock is held, include every reservation a concurrent gateway committed.
    CREATE FUNCTION bmas_reserve(p_request TEXT, p_user TEXT, p_tokens BIGINT, p_now BIGINT,
                                 p_kept BIGINT, p_stale BIGINT) RETURNS TEXT
    LANGUAGE plpgsql AS $$
    DECLARE
      l_rpm BIGINT; l_tpm BIGINT; l_day BIGINT; l_concurrent BIGINT;
      minute_requests BIGINT; minute_tokens BIGINT; day_tokens BIGINT; in_flight BIGINT;
      today BIGINT := p_now - p_now % 86400;
    BEGIN
      -- Until the end of this statement's transaction: see pg_reservations.cc.
      PERFORM set_config('synchronous_commit', 'off', true);
      SELECT rpm, tpm, tokens_per_day, max_concurrent INTO l_rpm, l_tpm, l_day, l_concurrent
        FROM users WHERE name = p_user FOR UPDATE;
      IF NOT FOUND THEN RETURN 'user'; END IF;
      PERFORM 1 FROM reservations WHERE request_id = p_request;
      IF FOUND THEN RETURN ''; END IF;
      SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(tokens), 0)
        INTO minute_requests, minute_tokens
        FROM reserved_seconds WHERE user_name = p_user AND second > p_now - 60;
      SELECT COALESCE(SUM(tokens), 0) INTO day_tokens
        FROM reserved_days WHERE user_name = p_user AND day >= today;
      SELECT COUNT(*) INTO in_flight FROM reservations
        WHERE user_name = p_user AND used IS NULL AND at > p_now - p_stale;
      IF l_rpm IS NOT NULL AND minute_requests + 1 > l_rpm THEN RETURN 'rpm'; END IF;
      IF l_tpm IS NOT NULL AND minute_tokens + p_tokens > l_tpm THEN RETURN 'tpm'; END IF;
      IF l_day IS NOT NULL AND day_tokens + p_tokens > l_day THEN RETURN 'tokens_per_day'; END IF;
      IF l_concurrent IS NOT NULL AND in_flight + 1 > l_concurrent THEN
        RETURN 'max_concurrent';
      END IF;
      INSERT INTO reservations (request_id, user_name, at, tokens)
        VALUES (p_request, p_user, p_now, p_tokens);
      INSERT INTO reserved_seconds VALUES (p_user, p_now, 1, p_tokens)
        ON CONFLICT (user_name, second) DO UPDATE
        SET requests = reserved_seconds.requests + 1,
            tokens = reserved_seconds.tokens + excluded.tokens;
      INSERT INTO reserved_days VALUES (p_user, today, p_tokens)
        ON CONFLICT (user_name, day) DO UPDATE SET tokens = reserved_days.tokens + excluded.tokens;
      DELETE FROM reservations WHERE at < p_now - p_kept;
      DELETE FROM reserved_seconds WHERE user_name = p_user AND second < p_now - p_stale;
      DELETE FROM reserved_days WHERE user_name = p_user AND day < p_now - p_kept;
      RETURN '';
    END $$;

    -- Whether request p_request holds a reservation; settles it to p_used the first time.
    CREATE FUNCTION bmas_settle(p_request TEXT, p_used BIGINT) RETURNS BOOLEAN
    LANGUAGE plpgsql AS $$
    DECLARE
      r_user TEXT; r_at BIGINT; r_tokens BIGINT;
    BEGIN
      PERFORM set_config('synchronous_commit', 'off', true);
      UPDATE reservations SET used = p_used WHERE request_id = p_request AND used IS NULL
        RETURNING user_name, at, tokens INTO r_user, r_at, r_tokens;
      IF NOT FOUND THEN
        RETURN EXISTS (SELECT 1 FROM reservations WHERE request_id = p_request);
      END IF;
      UPDATE reserved_seconds SET tokens = tokens + p_used - r_tokens
        WHERE user_name = r_user AND second = r_at;
      UPDATE reserved_days SET tokens = tokens + p_used - r_tokens
        WHERE user_name = r_user AND day = r_at - r_at % 86400;
      RETURN true;
    END $$;
    )sql",
    // Token fairness across gateways (Store::PutGatewayReport): each gateway replaces its row
    // every ~200 ms. Unlogged: the reports are worth nothing after a crash, and writing them
    // costs no WAL.
    R"sql(
    CREATE UNLOGGED TABLE gateway_reports (
      gateway TEXT PRIMARY KEY,
      at_ms BIGINT NOT NULL,
      body TEXT NOT NULL
    );
    )sql",
};
constexpr int kSchemaVersion = static_cast<int>(std::size(kMigrations));

// The session-level advisory lock that processes opening the store take in turn while they
// read the schema version and migrate (any number, unique to bmas: "bmas" in ASCII).
constexpr const char* kMigrationLock = "1651335539";

class PgStore final : public Store {
 public:
  PgStore(std::unique_ptr<Connection> c, Env& env) : c_(std::move(c)), env_(env) {}

  Result<void> Init() {
    if (auto r = c_->Exec("waiting for the schema lock", "SELECT pg_advisory_lock($1::bigint)",
                          {P(kMigrationLock)});
        !r) {
      return r.error();
    }
    auto migrated = Migrate();
    (void)c_->Exec("releasing the schema lock", "SELECT pg_advisory_unlock($1::bigint)",
                   {P(kMigrationLock)});
    return migrated;
  }

  Result<void> AddUser(const std::string& name, const UserLimits& l) override {
    if (auto r = store_rules::CheckUserName(name); !r) return r;
    if (auto r = store_rules::CheckLimits(l); !r) return r;
    auto r = c_->Exec("adding a user",
                      "INSERT INTO users (name, weight, rpm, tpm, tokens_per_day, max_concurrent, "
                      "created_at, ws_cpus, ws_memory, ws_processes, ws_disk) "
                      "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                      {P(name), P(l.weight), P(l.rpm), P(l.tpm), P(l.tokens_per_day),
                       P(l.max_concurrent), P(UnixNow()), P(l.workspace.cpus),
                       P(l.workspace.memory), P(l.workspace.processes), P(l.workspace.disk)});
    if (!r && c_->last_state() == pg_internal::kUniqueViolation) {
      return store_rules::UserExists(name);
    }
    if (!r) return r.error();
    return {};
  }

  Result<void> ChangeUser(const std::string& name, const UserChange& c) override {
    auto changed = store_rules::ChangedLimits(*this, name, c);
    if (!changed) return changed.error();
    const UserLimits& l = *changed;
    const WorkspaceLimits& w = l.workspace;
    auto r = c_->Exec(
        "changing a user",
        "UPDATE users SET weight = $1, rpm = $2, tpm = $3, tokens_per_day = $4, "
        "max_concurrent = $5, ws_cpus = $6, ws_memory = $7, ws_processes = $8, "
        "ws_disk = $9, admin = COALESCE($10::boolean, admin) WHERE name = $11",
        {P(l.weight), P(l.rpm), P(l.tpm), P(l.tokens_per_day), P(l.max_concurrent), P(w.cpus),
         P(w.memory), P(w.processes), P(w.disk), c.admin ? P(*c.admin) : std::nullopt, P(name)});
    if (!r) return r.error();
    return {};
  }

  Result<void> RemoveUser(const std::string& name) override {
    Transaction t(*c_);
    if (auto r = t.Begin(); !r) return r;
    auto del = c_->Exec("removing a user", "DELETE FROM users WHERE name = $1", {P(name)});
    if (!del) return del.error();
    if (del->Changed() == 0) return store_rules::NoSuchUser(name);
    auto revoke = c_->Exec("revoking a removed user's keys",
                           "UPDATE api_keys SET revoked_at = $1 "
                           "WHERE user_name = $2 AND revoked_at IS NULL",
                           {P(UnixNow()), P(name)});
    if (!revoke) return revoke.error();
    return t.Commit();
  }

  Result<std::optional<User>> FindUser(const std::string& name) override {
    auto rows = c_->Exec("reading a user", (std::string(kSelectUsers) + " WHERE name = $1").c_str(),
                         {P(name)});
    if (!rows) return rows.error();
    if (rows->size() == 0) return std::optional<User>();
    return std::optional<User>(ReadUser(*rows, 0));
  }

  Result<std::vector<User>> ListUsers() override {
    auto rows = c_->Exec("listing users", (std::string(kSelectUsers) + " ORDER BY name").c_str());
    if (!rows) return rows.error();
    std::vector<User> users;
    for (int i = 0; i < rows->size(); ++i) users.push_back(ReadUser(*rows, i));
    return users;
  }

  Result<std::string> CreateKey(const std::string& user) override {
    if (auto r = store_rules::RequireUser(*this, user); !r) return r.error();
    const store_rules::NewKey key = store_rules::MintKey();
    auto r =
        c_->Exec("creating a key",
                 "INSERT INTO api_keys (id, user_name, secret_sha256, created_at) "
                 "VALUES ($1, $2, $3::bytea, $4)",
                 {P(key.id), P(user), Bytes(key.digest.data(), key.digest.size()), P(UnixNow())});
    if (!r) return r.error();
    return key.key;
  }

  Result<void> RevokeKey(const std::string& key_id) override {
    auto r = c_->Exec("revoking a key",
                      "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
                      {P(UnixNow()), P(key_id)});
    if (!r) return r.error();
    if (r->Changed() == 0) return store_rules::NoSuchKey(key_id);
    return {};
  }

  Result<std::vector<KeyInfo>> ListKeys(const std::string& user) override {
    if (auto r = store_rules::RequireUser(*this, user); !r) return r.error();
    auto rows = c_->Exec("listing keys",
                         "SELECT id, user_name, created_at, revoked_at FROM api_keys "
                         "WHERE user_name = $1 ORDER BY created_at, id",
                         {P(user)});
    if (!rows) return rows.error();
    std::vector<KeyInfo> keys;
    for (int i = 0; i < rows->size(); ++i) {
      keys.push_back(
          KeyInfo{rows->Text(i, 0), rows->Text(i, 1), rows->Int(i, 2), rows->OptInt(i, 3)});
    }
    return keys;
  }

  Result<std::optional<std::string>> Authenticate(const std::string& key) override {
    auto presented = store_rules::ParseKey(key);
    if (!presented) return std::optional<std::string>();
    auto rows = c_->Exec("checking a key",
                         "SELECT k.user_name, k.secret_sha256 FROM api_keys k "
                         "JOIN users u ON u.name = k.user_name "
                         "WHERE k.id = $1 AND k.revoked_at IS NULL",
                         {P(presented->id)});
    if (!rows) return rows.error();
    if (rows->size() == 0) return std::optional<std::string>();
    if (!store_rules::SameDigest(rows->Bytes(0, 1), presented->digest)) {
      return std::optional<std::string>();
    }
    return std::optional<std::string>(rows->Text(0, 0));
  }

  Result<void> RecordUsage(const std::vector<UsageDelta>& deltas) override {
    if (deltas.empty()) return {};
    Transaction t(*c_);
    if (auto r = t.Begin(); !r) return r;
    for (const UsageDelta& d : deltas) {
      auto r = c_->Exec("recording usage",
                        "INSERT INTO usage (minute, user_name, model, backend, requests, "
                        "prompt_tokens, completion_tokens) VALUES ($1, $2, $3, $4, $5, $6, $7) "
                        "ON CONFLICT (minute, user_name, model, backend) DO UPDATE SET "
                        "requests = usage.requests + excluded.requests, "
                        "prompt_tokens = usage.prompt_tokens + excluded.prompt_tokens, "
                        "completion_tokens = usage.completion_tokens + excluded.completion_tokens",
                        {P(d.minute), P(d.user), P(d.model), P(d.backend), P(d.requests),
                         P(d.prompt_tokens), P(d.completion_tokens)});
      if (!r) return r.error();
    }
    return t.Commit();
  }

  Result<std::vector<UsageRow>> QueryUsage(const std::optional<std::string>& user,
                                           int64_t since_unix) override {
    auto rows = c_->Exec("reading usage",
                         "SELECT user_name, model, backend, SUM(requests)::bigint, "
                         "SUM(prompt_tokens)::bigint, SUM(completion_tokens)::bigint FROM usage "
                         "WHERE minute >= $1 AND ($2::text IS NULL OR user_name = $2) "
                         "GROUP BY user_name, model, backend ORDER BY user_name, model, backend",
                         {P(since_unix / 60), P(user)});
    if (!rows) return rows.error();
    std::vector<UsageRow> out;
    for (int i = 0; i < rows->size(); ++i) {
      const Rows& r = *rows;
      out.push_back(UsageRow{r.Text(i, 0), r.Text(i, 1), r.Text(i, 2), r.Int(i, 3), r.Int(i, 4),
                             r.Int(i, 5)});
    }
    return out;
  }

  Result<int> RecordJobs(const std::vector<JobRecord>& jobs) override {
    if (jobs.empty()) return 0;
    Transaction t(*c_);
    if (auto r = t.Begin(); !r) return r.error();
    int added = 0;
    for (const JobRecord& j : jobs) {
      std::string nodes;
      for (const std::string& n : j.nodes) nodes += (nodes.empty() ? "" : ",") + n;
      auto r = c_->Exec(
          "recording jobs",
          "INSERT INTO jobs (cluster, id, user_name, name, partition_name, state, "
          "gpus, nodes, submit_time, start_time, end_time, exit_code) "
          "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) "
          "ON CONFLICT DO NOTHING",
          {P(j.cluster), P(j.id), P(j.user), P(j.name), P(j.partition), P(j.state), P(j.gpus),
           P(nodes), P(j.submit_time), P(j.start_time), P(j.end_time), P(j.exit_code)});
      if (!r) return r.error();
      added += static_cast<int>(r->Changed());
    }
    if (auto r = t.Commit(); !r) return r.error();
    return added;
  }

  Result<std::vector<JobUsageRow>> QueryJobUsage(const std::optional<std::string>& user,
                                                 int64_t since_unix) override {
    auto rows =
        c_->Exec("reading job usage",
                 "SELECT user_name, COUNT(*), COALESCE(SUM(CASE WHEN start_time > 0 AND "
                 "end_time > start_time THEN gpus * (end_time - start_time) ELSE 0 END), "
                 "0)::bigint FROM jobs WHERE end_time >= $1 AND "
                 "($2::text IS NULL OR user_name = $2) GROUP BY user_name ORDER BY user_name",
                 {P(since_unix), P(user)});
    if (!rows) return rows.error();
    std::vector<JobUsageRow> out;
    for (int i = 0; i < rows->size(); ++i) {
      out.push_back(JobUsageRow{rows->Text(i, 0), rows->Int(i, 1), rows->Int(i, 2)});
    }
    return out;
  }

  Result<void> RecordIdle(const IdleRecord& r) override {
    auto done = c_->Exec("recording an idle-GPU action",
                         "INSERT INTO idle_actions (job, user_name, partition_name, kind, at, "
                         "idle_since, gpus, wasted_gpu_seconds, reason) "
                         "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING",
                         {P(r.job), P(r.user), P(r.partition), P(r.kind), P(r.at), P(r.idle_since),
                          P(r.gpus), P(r.wasted_gpu_seconds), P(r.reason)});
    if (!done) return done.error();
    return {};
  }

  Result<std::vector<IdleRecord>> QueryIdle(const std::optional<std::string>& user,
                                            int64_t since_unix) override {
    auto rows = c_->Exec("reading idle-GPU actions",
                         "SELECT job, user_name, partition_name, kind, at, idle_since, gpus, "
                         "wasted_gpu_seconds, reason FROM idle_actions WHERE at >= $1 AND "
                         "($2::text IS NULL OR user_name = $2) ORDER BY at DESC, job DESC",
                         {P(since_unix), P(user)});
    if (!rows) return rows.error();
    std::vector<IdleRecord> out;
    for (int i = 0; i < rows->size(); ++i) {
      const Rows& r = *rows;
      out.push_back(IdleRecord{r.Int(i, 0), r.Text(i, 1), r.Text(i, 2), r.Text(i, 3), r.Int(i, 4),
                               r.Int(i, 5), static_cast<int>(r.Int(i, 6)), r.Int(i, 7),
                               r.Text(i, 8)});
    }
    return out;
  }

  Result<void> AddBackend(const std::string& url) override {
    auto r = c_->Exec("adding a backend", "INSERT INTO backends (url, added_at) VALUES ($1, $2)",
                      {P(url), P(UnixNow())});
    if (!r && c_->last_state() == pg_internal::kUniqueViolation) {
      return store_rules::BackendListed(url);
    }
    if (!r) return r.error();
    return {};
  }

  Result<void> RemoveBackend(const std::string& url) override {
    auto r = c_->Exec("removing a backend", "DELETE FROM backends WHERE url = $1", {P(url)});
    if (!r) return r.error();
    if (r->Changed() == 0) return store_rules::NoSuchBackend(url);
    return {};
  }

  Result<std::vector<std::string>> ListBackends() override {
    auto rows = c_->Exec("listing backends", "SELECT url FROM backends ORDER BY added_at, url");
    if (!rows) return rows.error();
    std::vector<std::string> urls;
    for (int i = 0; i < rows->size(); ++i) urls.push_back(rows->Text(i, 0));
    return urls;
  }

  Result<void> PutDeployment(const Deployment& d) override {
    return pg_internal::PutDeployment(*c_, d, UnixNow());
  }
  Result<void> RemoveDeployment(const std::string& model) override {
    return pg_internal::RemoveDeployment(*c_, model);
  }
  Result<std::vector<Deployment>> ListDeployments() override {
    return pg_internal::ListDeployments(*c_);
  }
  Result<void> ReplaceReplicas(const std::vector<ReplicaRecord>& replicas) override {
    return pg_internal::ReplaceReplicas(*c_, replicas);
  }
  Result<std::vector<ReplicaRecord>> ListReplicas() override {
    return pg_internal::ListReplicas(*c_);
  }

  Result<Reservation> Reserve(const std::string& request_id, const std::string& user,
                              int64_t tokens, int64_t now) override {
    return pg_internal::Reserve(*c_, request_id, user, tokens, now);
  }
  Result<void> Settle(const std::string& request_id, int64_t used_tokens) override {
    return pg_internal::Settle(*c_, request_id, used_tokens);
  }

  Result<void> PutGatewayReport(const GatewayReport& report) override {
    auto r = c_->Exec(
        "saving a gateway's report",
        "WITH pruned AS (DELETE FROM gateway_reports WHERE at_ms < $2::bigint - $4::bigint) "
        "INSERT INTO gateway_reports (gateway, at_ms, body) VALUES ($1, $2, $3) "
        "ON CONFLICT (gateway) DO UPDATE SET at_ms = excluded.at_ms, body = excluded.body",
        {P(report.gateway), P(report.at_ms), P(report.body),
         P(store_rules::kKeptGatewayReportMs)});
    if (!r) return r.error();
    return {};
  }

  Result<std::vector<GatewayReport>> ListGatewayReports() override {
    auto rows = c_->Exec("listing gateways' reports",
                         "SELECT gateway, at_ms, body FROM gateway_reports ORDER BY gateway");
    if (!rows) return rows.error();
    std::vector<GatewayReport> out;
    for (int i = 0; i < rows->size(); ++i) {
      out.push_back(GatewayReport{rows->Text(i, 0), rows->Int(i, 1), rows->Text(i, 2)});
    }
    return out;
  }

  int schema_version() const override { return version_; }

 private:
  static constexpr const char* kSelectUsers =
      "SELECT name, weight, rpm, tpm, tokens_per_day, max_concurrent, created_at, ws_cpus, "
      "ws_memory, ws_processes, ws_disk, admin FROM users";

  // Under the schema lock: the version table, the version, then each missing migration in a
  // transaction of its own.
  // A store that is already at this version is only read: a role that may not create tables
  // (a node's, `bmas cluster store-tls`) opens it too.
  Result<void> Migrate() {
    auto exists = c_->Exec("looking for the schema version table",
                           "SELECT to_regclass('bmas_schema') IS NOT NULL");
    if (!exists) return exists.error();
    if (exists->Text(0, 0) != "t") {
      if (auto r = c_->Script("creating the schema version table",
                              "CREATE TABLE IF NOT EXISTS bmas_schema (version INTEGER PRIMARY "
                              "KEY, applied_at BIGINT NOT NULL)");
          !r) {
        return NeedsOwner(r.error(), 0);
      }
    }
    auto rows =
        c_->Exec("reading the schema version", "SELECT COALESCE(MAX(version), 0) FROM bmas_schema");
    if (!rows) return rows.error();
    const int version = static_cast<int>(rows->Int(0, 0));
    if (version > kSchemaVersion) {
      return Error{ErrorCode::kInvalidArgument,
                   fmt::format("the store in PostgreSQL at {} has schema version {}, newer than "
                               "this bmas knows ({}): use the newer bmas that wrote it",
                               c_->where(), version, kSchemaVersion)};
    }
    for (int i = version; i < kSchemaVersion; ++i) {
      Transaction t(*c_);
      if (auto r = t.Begin(); !r) return r;
      if (auto r = c_->Script("migrating the schema", kMigrations[i]); !r) {
        return NeedsOwner(
            Error{r.error().code, fmt::format("{} (to version {})", r.error().message, i + 1)},
            version);
      }
      auto mark = c_->Exec("recording the schema version",
                           "INSERT INTO bmas_schema (version, applied_at) VALUES ($1, $2)",
                           {P(i + 1), P(UnixNow())});
      if (!mark) return mark.error();
      if (auto r = t.Commit(); !r) return r;
    }
    version_ = kSchemaVersion;
    return {};
  }

  // A migration this role may not make (SQLSTATE 42501): name who can.
  Error NeedsOwner(Error e, int version) const {
    if (c_->last_state() != "42501") return e;
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("{}: the store at {} is at schema version {} and this bmas needs "
                             "{}, which this role may not make: run any bmas command against the "
                             "store as its owner first (on the controller: `bmas user list`)",
                             e.message, c_->where(), version, kSchemaVersion)};
  }

  static User ReadUser(const Rows& r, int i) {
    User u;
    u.name = r.Text(i, 0);
    u.limits.weight = r.Double(i, 1);
    u.limits.rpm = r.OptInt(i, 2);
    u.limits.tpm = r.OptInt(i, 3);
    u.limits.tokens_per_day = r.OptInt(i, 4);
    u.limits.max_concurrent = r.OptInt(i, 5);
    u.created_at = r.Int(i, 6);
    u.limits.workspace.cpus = r.OptInt(i, 7);
    u.limits.workspace.memory = r.OptText(i, 8);
    u.limits.workspace.processes = r.OptInt(i, 9);
    u.limits.workspace.disk = r.OptText(i, 10);
    u.admin = r.Text(i, 11) == "t";
    return u;
  }

  int64_t UnixNow() const { return static_cast<int64_t>(env_.UnixNow()); }

  std::unique_ptr<Connection> c_;
  Env& env_;
  int version_ = 0;
};

}  // namespace

namespace pg_internal {
int PgSchemaVersion() { return kSchemaVersion; }
}  // namespace pg_internal

bool IsPostgresStoreUrl(const std::string& url) { return pg_internal::IsPostgresUrl(url); }

std::string RedactStoreUrl(const std::string& url) { return pg_internal::RedactUrl(url); }

bool StoreUrlHasPassword(const std::string& url) { return pg_internal::UrlHasPassword(url); }

Result<StoreServer> StoreUrlServer(const std::string& url) {
  auto parts = pg_internal::UrlParts(url);
  if (!parts) return parts.error();
  return StoreServer{parts->host, parts->port, parts->dbname};
}

Result<StorePtr> OpenPostgresStore(const std::string& url, Env& env) {
  if (!pg_internal::IsPostgresUrl(url)) {
    return InvalidArgument(
        fmt::format("'{}' is not a PostgreSQL URL: give "
                    "postgresql://USER@HOST:PORT/DATABASE",
                    pg_internal::RedactUrl(url)));
  }
  auto c = Connection::Open(url);
  if (!c) return c.error();
  auto store = std::make_unique<PgStore>(std::move(*c), env);
  if (auto r = store->Init(); !r) return r.error();
  return StorePtr(std::move(store));
}

}  // namespace bmas
