#pragma once

// The store on PostgreSQL (libpq): for sites that run more than one gateway, or keep their
// state on a database server. SQLite (store.h's OpenSqliteStore) stays the embedded default;
// daemon/services.h picks between them.

#include <string>

#include "common/env.h"
#include "common/result.h"
#include "store/store.h"

namespace bmas {

// Opens (creating and migrating as needed) the store in the PostgreSQL database at `url`
// (postgresql://USER@HOST:PORT/DATABASE, or with ?host=/socket/dir). Safe for several processes
// at once: migrations run under an advisory lock, one transaction each; a store newer than this
// bmas is refused. Errors never show a password that the URL holds.
Result<StorePtr> OpenPostgresStore(const std::string& url, Env& env = Env::Default());

// Whether `url` names a PostgreSQL store (postgresql:// or postgres://).
bool IsPostgresStoreUrl(const std::string& url);
// `url` with any password replaced by "***", for messages and logs.
std::string RedactStoreUrl(const std::string& url);
// Whether `url` holds a password (user:PASSWORD@ or password=).
bool StoreUrlHasPassword(const std::string& url);

// What to do about libpq's message `m` for a connection that failed: a server that is down,
// one that refused this host's certificate or connection, or a TLS failure.
std::string StoreConnectFailureFix(const std::string& m);

// The server a PostgreSQL store URL names, as it sets them ("" where it does not): its host (a
// name, an address, or a unix socket's directory), port and database.
struct StoreServer {
  std::string host, port, database;
};
// InvalidArgument naming the fix for a URL that libpq cannot parse.
Result<StoreServer> StoreUrlServer(const std::string& url);

}  // namespace bmas
