#pragma once

// `bmas cluster init --cluster INVENTORY`, `bmas cluster token` and `bmas cluster serve` (root,
// on the controller), and `bmas cluster prometheus-config` (the agents' scrape config): the cluster's CA under <state_dir>/cluster/, Slurm's configless config and
// the munge and JWT keys (cluster/controller_files.h), join tokens, printed as the one line a
// node runs, `bmas node join TOKEN` (cluster/cluster_files.h), and the join service that
// answers it (cluster/join_tls.h).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "cli/commands.h"
#include "cli/store_tls_command.h"

namespace bmas {

class ClusterCommands {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int Init(GlobalOptions& global);
  int Token(GlobalOptions& global);
  int Serve(GlobalOptions& global);
  int PrometheusConfig(GlobalOptions& global);
  int PrintNewToken(GlobalOptions& global, const std::string& command,
                    const std::string& state_dir);

  std::string cluster_file_;
  std::string address_;
  int port_ = 0;
  int64_t ttl_s_ = 0;
  std::string slurm_dir_ = "/etc/slurm";
  std::string munge_key_ = "/etc/munge/munge.key";
  std::string jwt_key_;
  std::string listen_;
  bool dynamic_nodes_ = false;
  int agent_port_ = 0;
  std::string prometheus_ca_;
  std::string prometheus_secret_;
  StoreTlsCommand store_tls_;
};

}  // namespace bmas
