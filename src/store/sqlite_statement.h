#pragma once

// What the SQLite store's files share: a prepared statement. Internal to src/store.

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.h"

namespace bmas::sqlite_internal {

// One prepared statement; finalized on destruction.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  bool ok() const { return rc_ == SQLITE_OK; }
  Statement& Bind(int i, std::string_view v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& Bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Statement& Bind(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  Statement& Bind(int i, const std::optional<int64_t>& v) {
    if (v) sqlite3_bind_int64(stmt_, i, *v); else sqlite3_bind_null(stmt_, i);
    return *this;
  }
  Statement& BindOptText(int i, const std::optional<std::string>& v) {
    if (v) return Bind(i, std::string_view(*v));
    sqlite3_bind_null(stmt_, i);
    return *this;
  }
  Statement& BindBlob(int i, const void* data, int size) {
    sqlite3_bind_blob(stmt_, i, data, size, SQLITE_TRANSIENT);
    return *this;
  }
  Statement& BindNull(int i) {
    sqlite3_bind_null(stmt_, i);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(stmt_); }
  // Ready to bind and run again.
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  std::string Text(int col) const {
    auto p = sqlite3_column_text(stmt_, col);
    return p == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(p));
  }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) const { return sqlite3_column_double(stmt_, col); }
  std::optional<int64_t> OptInt(int col) const {
    if (sqlite3_column_type(stmt_, col) == SQLITE_NULL) return std::nullopt;
    return sqlite3_column_int64(stmt_, col);
  }
  std::optional<std::string> OptText(int col) const {
    if (sqlite3_column_type(stmt_, col) == SQLITE_NULL) return std::nullopt;
    return Text(col);
  }
  std::string_view Blob(int col) const {
    auto p = static_cast<const char*>(sqlite3_column_blob(stmt_, col));
    return {p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col))};
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

// Every row `s` gives, each made by `row(s)`; nullopt on a SQLite error.
template <typename F>
auto Rows(Statement& s, F row) -> std::optional<std::vector<decltype(row(s))>> {
  std::vector<decltype(row(s))> rows;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) rows.push_back(row(s));
  if (rc != SQLITE_DONE) return std::nullopt;
  return rows;
}

// The parameters of the queries that read since a time, for one user or (nullopt) everyone:
// `... >= ?1 AND (?2 IS NULL OR user = ?3)`.
inline void BindSinceAndUser(Statement& s, int64_t since, const std::optional<std::string>& user) {
  s.Bind(1, since);
  if (user) s.Bind(2, *user).Bind(3, *user); else s.BindNull(2).BindNull(3);
}

// Deployments and replicas (sqlite_deployments.cc). Each returns false / nullopt on a SQLite
// error, which the caller reports with sqlite3_errmsg.
bool PutDeployment(sqlite3* db, const Deployment& d, int64_t now);
// Whether a row was removed; the deployment's replica rows go with it.
std::optional<bool> RemoveDeployment(sqlite3* db, const std::string& model);
std::optional<std::vector<Deployment>> ListDeployments(sqlite3* db);
bool ReplaceReplicas(sqlite3* db, const std::vector<ReplicaRecord>& replicas);
std::optional<std::vector<ReplicaRecord>> ListReplicas(sqlite3* db);

// Store::Reserve's check and record for a user with `limits`, inside the caller's write
// transaction; nullopt on an SQLite error.
std::optional<Reservation> Reserve(sqlite3* db, const std::string& request_id,
                                   const std::string& user, const UserLimits& limits,
                                   int64_t tokens, int64_t now);
// Store::Settle: true when the reservation exists (settled now or before); nullopt on an error.
std::optional<bool> Settle(sqlite3* db, const std::string& request_id, int64_t used_tokens);

}  // namespace bmas::sqlite_internal
