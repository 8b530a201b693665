#pragma once

// A thin layer over libpq for the PostgreSQL store: one connection, statements with
// parameters passed apart from the SQL text (never spliced into it), and errors that name the
// server (host, port, database) but never the URL, which may hold a password.

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace bmas::pg_internal {

// A statement's parameter: text, or NULL.
using Param = std::optional<std::string>;

Param P(const std::string& s);
Param P(const char* s);
Param P(int64_t v);
Param P(int v);
Param P(double v);
Param P(bool v);
Param P(const std::optional<int64_t>& v);
Param P(const std::optional<std::string>& v);
// A bytea parameter, in PostgreSQL's hex text form.
Param Bytes(const unsigned char* data, size_t size);

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};

// A statement's result rows, read as text.
class Rows {
 public:
  explicit Rows(PGresult* r) : r_(r) {}
  int size() const { return PQntuples(r_.get()); }
  bool Null(int row, int col) const { return PQgetisnull(r_.get(), row, col) != 0; }
  std::string Text(int row, int col) const { return PQgetvalue(r_.get(), row, col); }
  int64_t Int(int row, int col) const;
  double Double(int row, int col) const;
  std::optional<int64_t> OptInt(int row, int col) const;
  std::optional<std::string> OptText(int row, int col) const;
  // A bytea column's bytes.
  std::string Bytes(int row, int col) const;
  // Rows a command changed (INSERT, UPDATE, DELETE).
  int64_t Changed() const;

 private:
  std::unique_ptr<PGresult, ResultDeleter> r_;
};

// Whether `url` is one the PostgreSQL store takes (postgresql:// or postgres://).
bool IsPostgresUrl(const std::string& url);

// `url` with any password in it replaced by "***", for messages.
std::string RedactUrl(const std::string& url);

// Whether `url` carries a password (user:PASSWORD@ or password=...).
bool UrlHasPassword(const std::string& url);

// The connection options `url` sets ("" where it does not). InvalidArgument naming the fix when
// libpq cannot parse it.
struct UrlOptions {
  std::string host, port, dbname, user;
};
Result<UrlOptions> UrlParts(const std::string& url);

class Connection {
 public:
  // Connects; the error says which server could not be reached and what to do.
  static Result<std::unique_ptr<Connection>> Open(const std::string& url);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one statement with its parameters ($1, $2, ...). `what` names it in errors.
  Result<Rows> Exec(const char* what, const char* sql, const std::vector<Param>& params = {});
  // Runs SQL without parameters, possibly several statements (migrations, BEGIN, COMMIT).
  Result<void> Script(const char* what, const char* sql);
  // ROLLBACK, for a transaction being abandoned (its error says more).
  void Rollback();

  // "HOST:PORT/DATABASE", for messages.
  const std::string& where() const { return where_; }
  // The SQLSTATE of the last failed statement ("23505" = a unique key already held).
  const std::string& last_state() const { return last_state_; }

 private:
  explicit Connection(PGconn* conn);
  Error Fail(const char* what, PGresult* r);
  // Reconnects once when the server dropped the connection (a restart).
  void EnsureConnected();

  PGconn* conn_;
  std::string where_;
  std::string last_state_;
};

inline constexpr const char* kUniqueViolation = "23505";

}  // namespace bmas::pg_internal
