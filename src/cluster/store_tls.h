#pragma once

// What the controller's PostgreSQL needs so that the nodes' agents reach the store across the
// network (issue 25), made by `bmas cluster store-tls`:
// - TLS only off loopback: a server certificate from the cluster CA for the controller's name and
//   address (nodes connect with sslmode=verify-full), and the cluster CA as ssl_ca_file;
// - one `hostssl DATABASE bmas_node ADDRESS/32 cert map=bmas-NODE` line per node in pg_hba.conf,
//   and one `bmas-NODE NODE bmas_node` line in pg_ident.conf: a node's certificate (its CN is the
//   node's name) opens the role only from that node's own address; no `host` line, so plain
//   text is refused, and no password is ever asked or sent;
// - the role kNodeStoreRole (cluster/node_store.h) with least privilege: it reads the schema's
//   version and the users' limits, reads and adds idle-GPU records, and nothing else (no API
//   keys, no usage, no change to users).

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cluster/cluster_ca.h"
#include "common/result.h"
#include "core/cluster.h"

namespace bmas::cluster {

// Where the files go when not told: root's, read by PostgreSQL (the key is its own).
inline constexpr const char* kDefaultStoreTlsDir = "/etc/bmas/postgresql";

// The texts of the files PostgreSQL reads (pure).
struct StoreTlsTexts {
  std::string conf;    // bmas-store.conf: listen_addresses and the ssl_* settings
  std::string hba;     // lines to add to pg_hba.conf
  std::string ident;   // lines to add to pg_ident.conf
  std::string grants;  // SQL, run as a superuser in the store's database once it exists
};

// The texts for `inventory`'s controller and nodes, the store's database `database`, with the
// certificate, key and CA files in `dir`.
StoreTlsTexts RenderStoreTls(const Cluster& inventory, const std::string& dir,
                             const std::string& database);

struct StoreTlsPaths {
  std::string dir = kDefaultStoreTlsDir;
  std::string database = "bmas";
  uid_t uid = 0;  // PostgreSQL's account, which owns the key (0600) as PostgreSQL requires
  gid_t gid = 0;
};

// Issues the server's certificate (the controller's name and address, from `ca`) and writes it,
// its key, the CA's certificate and the RenderStoreTls texts into `paths.dir` (root's alone;
// created when absent). The files written, in order. Errors name the file and why.
Result<std::vector<std::string>> WriteStoreTls(const CertAndKey& ca, const Cluster& inventory,
                                               const StoreTlsPaths& paths, int64_t unix_now);

// What the admin runs after WriteStoreTls, as shell lines for PostgreSQL's configuration in
// `pg_conf_dir` (Debian: /etc/postgresql/15/main).
std::string StoreTlsSteps(const StoreTlsPaths& paths, const std::string& pg_conf_dir);

}  // namespace bmas::cluster
