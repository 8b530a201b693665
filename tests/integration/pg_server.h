#pragma once

// A real, throwaway PostgreSQL server for tests: a fresh cluster (initdb) in a temporary
// directory, listening only on a unix socket there, started with pg_ctl from Debian's
// PostgreSQL 15 (/usr/lib/postgresql/15/bin, or $BMAS_PG_BIN). PostgreSQL refuses to run as
// root, so as root it runs as the `postgres` account (the package's) or else a test account.
// Trust authentication: for throwaway test clusters only. Stopped and removed by the
// destructor, whatever the test's outcome.

#include <memory>
#include <string>
#include <vector>

#include "common/process.h"
#include "common/result.h"

namespace bmas::testing {

// How a server differs from the default one (a unix socket only, trust).
struct PgServerOptions {
  // Prefixed to each server command (pg_ctl): e.g. nsenter into a test bed host's namespaces.
  std::vector<std::string> wrap;
  // Appended to the new cluster's postgresql.conf, pg_hba.conf and pg_ident.conf. With `conf`
  // set, listen_addresses is left to it.
  std::string conf, hba, ident;
  int port = 0;  // 0 = a free one
};

class PgServer {
 public:
  // Starts a new cluster; the error says what is missing (a CI machine without the server
  // fails here, naming the package to install).
  static Result<std::unique_ptr<PgServer>> Start(const PgServerOptions& options = {});
  // The account the server runs as when the test runs as root.
  static std::string ServerAccount();
  ~PgServer();
  PgServer(const PgServer&) = delete;
  PgServer& operator=(const PgServer&) = delete;

  // Creates database `name` (owned by the superuser "postgres").
  Result<void> CreateDatabase(const std::string& name);
  // Runs `sql` in database `db` with psql as the superuser; its output.
  Result<CommandOutput> Psql(const std::string& db, const std::string& sql);

  // A libpq URL for database `db` as the superuser, over the unix socket.
  std::string Url(const std::string& db) const;
  const std::string& socket_dir() const { return socket_dir_; }
  int port() const { return port_; }

 private:
  PgServer() = default;
  std::vector<std::string> AsServerAccount(std::vector<std::string> args) const;

  std::string dir_, data_dir_, socket_dir_, bin_, account_;
  std::vector<std::string> wrap_;
  int port_ = 0;
  bool started_ = false;
};

}  // namespace bmas::testing
