#include "cluster/store_tls.h"

#include <fmt/format.h>

#include <filesystem>

#include "cluster/node_files.h"
#include "cluster/node_store.h"

namespace bmas::cluster {
namespace {

std::string In(const std::string& dir, const char* name) {
  return (std::filesystem::path(dir) / name).string();
}

// A SQL identifier, quoted.
std::string Ident(const std::string& name) {
  std::string out = "\"";
  for (char c : name) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// An address as a pg_hba.conf CIDR of one host.
std::string OneHost(const std::string& address) {
  return address + (address.find(':') != std::string::npos ? "/128" : "/32");
}

}  // namespace

StoreTlsTexts RenderStoreTls(const Cluster& inventory, const std::string& dir,
                             const std::string& database) {
  StoreTlsTexts t;
  const std::string listen = inventory.controller.address.empty() ? inventory.controller.name
                                                                  : inventory.controller.address;
  t.conf = fmt::format(
      "# Written by `bmas cluster store-tls`: the nodes' agents reach the store over TLS with\n"
      "# their certificates from the cluster CA (pg_hba.conf's hostssl ... cert lines).\n"
      "listen_addresses = 'localhost,{}'\n"
      "ssl = on\n"
      "ssl_cert_file = '{}'\n"
      "ssl_key_file = '{}'\n"
      "ssl_ca_file = '{}'\n"
      "ssl_min_protocol_version = 'TLSv1.2'\n",
      listen, In(dir, "server.crt"), In(dir, "server.key"), In(dir, "ca.crt"));
  t.hba =
      "# bmas nodes (`bmas cluster store-tls`): TLS and the node's certificate, from its own "
      "address only\n";
  t.ident = "# bmas nodes (`bmas cluster store-tls`): each node's certificate CN, to the role\n";
  for (const Node& n : inventory.nodes) {
    if (!n.host.empty() || n.address.empty()) continue;  // a layout node shares its host's
    t.hba += fmt::format("hostssl {} {} {} cert map=bmas-{}\n", database, kNodeStoreRole,
                         OneHost(n.address), n.name);
    t.ident += fmt::format("bmas-{} {} {}\n", n.name, n.name, kNodeStoreRole);
  }
  const std::string role = Ident(kNodeStoreRole);
  t.grants = fmt::format(
      "-- Written by `bmas cluster store-tls`: the role nodes' certificates map to, with no\n"
      "-- password and the least it needs. Run as a superuser in the store's database after\n"
      "-- bmas created its tables there; running it again changes nothing.\n"
      "DO $$ BEGIN CREATE ROLE {0} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;\n"
      "ALTER ROLE {0} NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT PASSWORD NULL;\n"
      "GRANT CONNECT ON DATABASE {1} TO {0};\n"
      "GRANT USAGE ON SCHEMA public TO {0};\n"
      "GRANT SELECT ON bmas_schema, users TO {0};\n"
      "GRANT SELECT, INSERT ON idle_actions TO {0};\n",
      role, Ident(database));
  return t;
}

Result<std::vector<std::string>> WriteStoreTls(const CertAndKey& ca, const Cluster& inventory,
                                               const StoreTlsPaths& paths, int64_t unix_now) {
  auto server = IssueNodeCertificate(
      ca, {inventory.controller.name, inventory.controller.address}, unix_now);
  if (!server) return server.error();
  const StoreTlsTexts texts = RenderStoreTls(inventory, paths.dir, paths.database);
  const std::vector<NodeFile> files = {
      {In(paths.dir, "ca.crt"), ca.cert_pem, 0644, 0, 0},
      {In(paths.dir, "server.key"), server->key_pem, 0600, paths.uid, paths.gid},
      {In(paths.dir, "server.crt"), server->cert_pem, 0644, 0, 0},
      {In(paths.dir, "bmas-store.conf"), texts.conf, 0644, 0, 0},
      {In(paths.dir, "pg_hba.conf.bmas"), texts.hba, 0644, 0, 0},
      {In(paths.dir, "pg_ident.conf.bmas"), texts.ident, 0644, 0, 0},
      {In(paths.dir, "node-role.sql"), texts.grants, 0644, 0, 0},
  };
  FileInstall install;
  std::vector<std::string> written;
  for (const NodeFile& f : files) {
    if (auto put = install.Put(f); !put) {
      install.Undo();
      return put.error();
    }
    written.push_back(f.path);
  }
  return written;
}

std::string StoreTlsSteps(const StoreTlsPaths& paths, const std::string& pg_conf_dir) {
  return fmt::format(
      "echo \"include '{0}/bmas-store.conf'\" >> {1}/postgresql.conf\n"
      "cat {0}/pg_hba.conf.bmas >> {1}/pg_hba.conf\n"
      "cat {0}/pg_ident.conf.bmas >> {1}/pg_ident.conf\n"
      "systemctl restart postgresql\n"
      "runuser -u postgres -- psql -v ON_ERROR_STOP=1 -d {2} -f {0}/node-role.sql\n",
      paths.dir, pg_conf_dir, paths.database);
}

}  // namespace bmas::cluster
