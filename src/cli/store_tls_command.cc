#include "cli/store_tls_command.h"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include "cluster/cluster_files.h"
#include "cluster/node_store.h"
#include "cluster/store_tls.h"
#include "common/config.h"
#include "common/config_table.h"
#include "core/cluster.h"
#include "daemon/services.h"

namespace bmas {

void StoreTlsCommand::Register(CLI::App& cluster, GlobalOptions& global) {
  CLI::App* cmd = cluster.add_subcommand(
      "store-tls",
      "Write what the controller's PostgreSQL needs so that nodes reach the store over TLS with "
      "their certificates (server certificate, ssl settings, pg_hba/pg_ident lines, the nodes' "
      "role), and print the lines that turn it on (root)");
  cmd->add_option("--cluster", cluster_file_, "The cluster inventory (TOML), with [store] url")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", dir_,
                  fmt::format("Where the files go (default {})", cluster::kDefaultStoreTlsDir));
  cmd->add_option("--pg-conf-dir", pg_conf_dir_,
                  "PostgreSQL's configuration directory, for the printed lines (default "
                  "/etc/postgresql/15/main)");
  cmd->add_option("--pg-account", pg_account_,
                  "The account PostgreSQL runs as, which owns the server's key (default "
                  "postgres)");
  cmd->callback([this, &global] { global.exit_code = Run(global); });
}

int StoreTlsCommand::Run(GlobalOptions& global) {
  if (geteuid() != 0) {
    return ReportFailure(
        "cluster store-tls",
        Error{ErrorCode::kPermissionDenied,
              "only root issues the store's certificate from the cluster CA: run it as root on "
              "the controller, e.g. with sudo",
              {}});
  }
  Cluster inventory;
  std::string url;
  try {
    inventory = LoadCluster(cluster_file_);
    url = LoadConfig(cluster_file_).store.url;
  } catch (const ConfigError& e) {
    fmt::print(stderr, "bmas cluster store-tls: {}\n", e.what());
    return 2;
  }
  auto server = cluster::NodeStoreServerFor(url, inventory.controller.name);
  if (!server) return ReportFailure("cluster store-tls", server.error());
  if (!*server) {
    return ReportFailure(
        "cluster store-tls",
        InvalidArgument(fmt::format(
            "{} has no PostgreSQL [store] url, so nodes keep their own SQLite stores: set [store] "
            "url to the controller's store (e.g. \"postgresql:///bmas?host=/var/run/postgresql\") "
            "and run this again",
            cluster_file_)));
  }
  const passwd* account = getpwnam(pg_account_.c_str());
  if (account == nullptr) {
    return ReportFailure("cluster store-tls",
                         NotFound(fmt::format("there is no account {}: install Debian's "
                                              "postgresql, or name its account with --pg-account",
                                              pg_account_)));
  }
  const std::string state_dir = ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
  auto id = cluster::LoadClusterCa(state_dir);
  if (!id) return ReportFailure("cluster store-tls", id.error());
  cluster::StoreTlsPaths paths;
  if (!dir_.empty()) paths.dir = dir_;
  paths.database = (*server)->database;
  paths.uid = account->pw_uid;
  paths.gid = account->pw_gid;
  auto written = cluster::WriteStoreTls(id->ca, inventory, paths,
                                        static_cast<int64_t>(global.services->env().UnixNow()));
  if (!written) return ReportFailure("cluster store-tls", written.error());
  for (const std::string& path : *written) fmt::print(stderr, "Wrote {}\n", path);
  fmt::print(stderr,
             "Nodes that join now get [store] url = \"{}\". Once bmas has created its tables in "
             "{} (any bmas command on this controller does), run as root:\n",
             cluster::NodeStoreUrl(**server, "/etc/bmas"), paths.database);
  fmt::print("{}", cluster::StoreTlsSteps(paths, pg_conf_dir_));
  return 0;
}

}  // namespace bmas
