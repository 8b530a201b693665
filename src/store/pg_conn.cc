#include "store/pg_conn.h"
#include "store/postgres_store.h"

#include <fmt/format.h>

#include <cstdlib>
#include <regex>

namespace bmas::pg_internal {
namespace {

// The value of each of `url`'s connection options that is set, by keyword; empty when libpq
// cannot parse it (its message in `error`).
struct Options {
  std::string host, port, dbname, user, password;
  bool parsed = false;
  std::string error;
};

Options ParseOptions(const std::string& url) {
  Options o;
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(url.c_str(), &err);
  if (opts == nullptr) {
    o.error = err != nullptr ? err : "out of memory";
    PQfreemem(err);
    return o;
  }
  for (PQconninfoOption* opt = opts; opt->keyword != nullptr; ++opt) {
    if (opt->val == nullptr) continue;
    const std::string key = opt->keyword;
    if (key == "host" || (key == "hostaddr" && o.host.empty())) o.host = opt->val;
    if (key == "port") o.port = opt->val;
    if (key == "dbname") o.dbname = opt->val;
    if (key == "user") o.user = opt->val;
    if (key == "password") o.password = opt->val;
  }
  PQconninfoFree(opts);
  o.parsed = true;
  return o;
}

// "HOST:PORT/DATABASE" as libpq would resolve the unset parts (its environment variables,
// then its defaults).
std::string Where(const Options& o) {
  const auto pick = [](const std::string& set, const char* env, const char* fallback) {
    if (!set.empty()) return set;
    const char* value = std::getenv(env);
    return std::string(value != nullptr && *value != '\0' ? value : fallback);
  };
  return fmt::format("{}:{}/{}", pick(o.host, "PGHOST", "/var/run/postgresql"),
                     pick(o.port, "PGPORT", "5432"), pick(o.dbname, "PGDATABASE", "(default)"));
}

// `text` with every occurrence of `secret` replaced (a server's message never echoes the
// password, but a parse error might echo part of the URL).
std::string Scrub(std::string text, const std::string& secret) {
  if (secret.empty()) return text;
  for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at)) {
    text.replace(at, secret.size(), "***");
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

Error UnparsableUrl(const std::string& url, const Options& o) {
  return InvalidArgument(fmt::format(
      "the store URL {} is not one PostgreSQL takes: {}: fix [store] url or BMAS_STORE_URL",
      RedactUrl(url), Scrub(o.error, o.password)));
}

}  // namespace

Param P(const std::string& s) { return s; }
Param P(const char* s) { return std::string(s); }
Param P(int64_t v) { return std::to_string(v); }
Param P(int v) { return std::to_string(v); }
Param P(double v) { return fmt::format("{}", v); }
Param P(bool v) { return std::string(v ? "true" : "false"); }
Param P(const std::optional<int64_t>& v) { return v ? P(*v) : std::nullopt; }
Param P(const std::optional<std::string>& v) { return v; }

Param Bytes(const unsigned char* data, size_t size) {
  std::string hex = "\\x";
  for (size_t i = 0; i < size; ++i) hex += fmt::format("{:02x}", data[i]);
  return hex;
}

int64_t Rows::Int(int row, int col) const {
  return std::strtoll(PQgetvalue(r_.get(), row, col), nullptr, 10);
}

double Rows::Double(int row, int col) const {
  return std::strtod(PQgetvalue(r_.get(), row, col), nullptr);
}

std::optional<int64_t> Rows::OptInt(int row, int col) const {
  if (Null(row, col)) return std::nullopt;
  return Int(row, col);
}

std::optional<std::string> Rows::OptText(int row, int col) const {
  if (Null(row, col)) return std::nullopt;
  return Text(row, col);
}

std::string Rows::Bytes(int row, int col) const {
  size_t size = 0;
  unsigned char* raw = PQunescapeBytea(
      reinterpret_cast<const unsigned char*>(PQgetvalue(r_.get(), row, col)), &size);
  if (raw == nullptr) return {};
  std::string bytes(reinterpret_cast<const char*>(raw), size);
  PQfreemem(raw);
  return bytes;
}

int64_t Rows::Changed() const { return std::strtoll(PQcmdTuples(r_.get()), nullptr, 10); }

bool IsPostgresUrl(const std::string& url) {
  return url.starts_with("postgresql://") || url.starts_with("postgres://");
}

std::string RedactUrl(const std::string& url) {
  // scheme://user:PASSWORD@rest, and password=VALUE among the query's parameters.
  static const std::regex kUserinfo(R"(^([a-z]+://[^:@/?]*):[^@/?]*@)");
  static const std::regex kQuery(R"(([?&]password=)[^&]*)");
  std::string out = std::regex_replace(url, kUserinfo, "$1:***@");
  return std::regex_replace(out, kQuery, "$1***");
}

bool UrlHasPassword(const std::string& url) { return RedactUrl(url) != url; }

Result<UrlOptions> UrlParts(const std::string& url) {
  const Options o = ParseOptions(url);
  if (!o.parsed) return UnparsableUrl(url, o);
  return UrlOptions{o.host, o.port, o.dbname, o.user};
}

}  // namespace bmas::pg_internal

namespace bmas {
std::string StoreConnectFailureFix(const std::string& m) {
  const auto has = [&m](const char* s) { return m.find(s) != std::string::npos; };
  if (has("server certificate") || has("root certificate") || has("certificate verify failed")) {
    return "the server's certificate does not chain to the URL's sslrootcert or does not name "
           "the host dialled: give PostgreSQL the certificate `bmas cluster store-tls` issues";
  }
  if (has("certificate authentication failed") || has("valid client certificate") ||
      has("alert")) {
    return "the server refused this host's certificate: check that [store] url's sslcert is "
           "this node's certificate from the cluster CA (/etc/bmas/node.crt) and that the "
           "server's pg_ident.conf maps this node (`bmas cluster store-tls` on the controller "
           "writes both lines)";
  }
  if (has("no pg_hba.conf entry")) {
    return "the server takes no connection from this host, role and database this way: on the "
           "server, add the lines `bmas cluster store-tls` writes (hostssl ... cert), and connect "
           "with sslmode=verify-full and this node's certificate";
  }
  if (has("SSL") || has("certificate")) {
    return "the TLS handshake failed: check [store] url's sslrootcert, sslcert and sslkey (root "
           "reads node.key, mode 0600) and the server's ssl settings";
  }
  return "start it, or fix [store] url or BMAS_STORE_URL";
}
}  // namespace bmas

namespace bmas::pg_internal {

Result<std::unique_ptr<Connection>> Connection::Open(const std::string& url) {
  const Options o = ParseOptions(url);
  if (!o.parsed) return UnparsableUrl(url, o);
  // Defaults first: what the URL sets overrides them (libpq keeps the last value of a key).
  const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {"10", "bmas", url.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (conn == nullptr) return Internal("cannot allocate a PostgreSQL connection");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = Scrub(PQerrorMessage(conn), o.password);
    PQfinish(conn);
    return Error{ErrorCode::kUnavailable,
                 fmt::format("cannot reach PostgreSQL at {} ({}): {}", Where(o), message,
                             StoreConnectFailureFix(message))};
  }
  auto c = std::unique_ptr<Connection>(new Connection(conn));
  c->where_ = Where(o);
  // Quiet NOTICEs (CREATE ... IF NOT EXISTS says "already exists, skipping").
  PQsetNoticeProcessor(
      conn, [](void*, const char*) {}, nullptr);
  return c;
}

Connection::Connection(PGconn* conn) : conn_(conn) {}

Connection::~Connection() { PQfinish(conn_); }

void Connection::EnsureConnected() {
  if (PQstatus(conn_) != CONNECTION_OK) PQreset(conn_);
}

Error Connection::Fail(const char* what, PGresult* r) {
  const char* state = r != nullptr ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  last_state_ = state != nullptr ? state : "";
  std::string message = r != nullptr ? PQresultErrorMessage(r) : PQerrorMessage(conn_);
  if (message.empty()) message = PQerrorMessage(conn_);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  PQclear(r);
  const bool down = PQstatus(conn_) != CONNECTION_OK;
  return Error{down ? ErrorCode::kUnavailable : ErrorCode::kInternal,
               fmt::format("PostgreSQL at {}: {} failed: {}{}", where_, what, message,
                           down ? " (the connection was lost: is the server up?)" : "")};
}

Result<Rows> Connection::Exec(const char* what, const char* sql, const std::vector<Param>& params) {
  EnsureConnected();
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const Param& p : params) values.push_back(p ? p->c_str() : nullptr);
  PGresult* r = PQexecParams(conn_, sql, static_cast<int>(values.size()), nullptr, values.data(),
                             nullptr, nullptr, 0);
  const ExecStatusType status = r != nullptr ? PQresultStatus(r) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) return Fail(what, r);
  last_state_.clear();
  return Rows(r);
}

Result<void> Connection::Script(const char* what, const char* sql) {
  EnsureConnected();
  PGresult* r = PQexec(conn_, sql);
  const ExecStatusType status = r != nullptr ? PQresultStatus(r) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) return Fail(what, r);
  PQclear(r);
  return {};
}

void Connection::Rollback() { PQclear(PQexec(conn_, "ROLLBACK")); }

}  // namespace bmas::pg_internal
