#include "cluster/node_store.h"

#include <fmt/format.h>

#include "store/postgres_store.h"

namespace bmas::cluster {
namespace {

// A host nodes cannot use as it stands: a unix socket's directory, loopback, or libpq's default.
bool LocalOnly(const std::string& host) {
  return host.empty() || host.starts_with('/') || host.starts_with('@') || host == "localhost" ||
         host.starts_with("127.") || host == "::1";
}

}  // namespace

Result<std::optional<NodeStoreServer>> NodeStoreServerFor(const std::string& controller_url,
                                                          const std::string& controller) {
  if (!IsPostgresStoreUrl(controller_url)) return std::optional<NodeStoreServer>();
  auto parts = StoreUrlServer(controller_url);
  if (!parts) return parts.error();
  NodeStoreServer server;
  // libpq takes a comma-separated list of hosts; nodes use the first.
  const std::string host = parts->host.substr(0, parts->host.find(','));
  server.host = LocalOnly(host) ? controller : host;
  if (!parts->port.empty()) server.port = parts->port.substr(0, parts->port.find(','));
  if (!parts->database.empty()) server.database = parts->database;
  if (server.host.empty()) {
    return InvalidArgument(
        "the inventory's [store] url names no host nodes can reach and [cluster] controller has "
        "no name: set [cluster] controller's name");
  }
  return std::optional<NodeStoreServer>(server);
}

std::string NodeStoreUrl(const NodeStoreServer& server, const std::string& config_dir) {
  return fmt::format(
      "postgresql://{}@{}:{}/{}?sslmode=verify-full&sslrootcert={}/ca.crt&sslcert={}/node.crt"
      "&sslkey={}/node.key",
      kNodeStoreRole, server.host, server.port, server.database, config_dir, config_dir,
      config_dir);
}

}  // namespace bmas::cluster
