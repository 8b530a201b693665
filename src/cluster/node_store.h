#pragma once

// How a node reaches the controller's store (issue 25): the controller's PostgreSQL over TLS,
// authenticated by the node's own certificate from the cluster CA (no password crosses the
// network), as the role kNodeStoreRole, which may only read what a node reads (users' limits)
// and add idle-GPU records (cluster/store_tls.h grants it that).

#include <optional>
#include <string>

#include "common/result.h"

namespace bmas::cluster {

// The database role every node's certificate maps to (pg_ident.conf, one line per node).
inline constexpr const char* kNodeStoreRole = "bmas_node";
inline constexpr const char* kDefaultStorePort = "5432";
inline constexpr const char* kDefaultStoreDatabase = "bmas";

// Where nodes reach the store that `controller_url` (the controller's [store] url) names: its
// host when that is a name or address other than loopback, else the controller's name
// `controller`; its port and database, or PostgreSQL's defaults.
struct NodeStoreServer {
  std::string host;
  std::string port = kDefaultStorePort;
  std::string database = kDefaultStoreDatabase;
};
// nullopt when `controller_url` names no PostgreSQL store (SQLite: each node keeps its own).
// InvalidArgument naming the fix for a URL libpq cannot parse.
Result<std::optional<NodeStoreServer>> NodeStoreServerFor(const std::string& controller_url,
                                                          const std::string& controller);

// The node's [store] url: `server` as kNodeStoreRole with sslmode=verify-full, the cluster CA
// (`config_dir`/ca.crt) as sslrootcert, and the node's node.crt and node.key there.
std::string NodeStoreUrl(const NodeStoreServer& server, const std::string& config_dir);

}  // namespace bmas::cluster
