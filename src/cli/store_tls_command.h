#pragma once

// `bmas cluster store-tls --cluster INVENTORY` (root, on the controller): what the controller's
// PostgreSQL needs so that the nodes' agents reach the store across the network with their
// certificates (cluster/store_tls.h), written for PostgreSQL, and the lines that turn it on.

#include <CLI/CLI.hpp>
#include <string>

#include "cli/commands.h"

namespace bmas {

class StoreTlsCommand {
 public:
  // Adds `store-tls` under `cluster`.
  void Register(CLI::App& cluster, GlobalOptions& global);

 private:
  int Run(GlobalOptions& global);

  std::string cluster_file_;
  std::string dir_;
  std::string pg_conf_dir_ = "/etc/postgresql/15/main";
  std::string pg_account_ = "postgres";
};

}  // namespace bmas
