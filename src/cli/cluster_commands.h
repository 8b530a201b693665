#pragma once

// `bmas cluster init --cluster INVENTORY` and `bmas cluster token` (root, on the controller):
// the cluster's CA under <state_dir>/cluster/, and join tokens, printed as the one line a node
// runs, `bmas node join TOKEN` (cluster/cluster_files.h).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "cli/commands.h"

namespace bmas {

class ClusterCommands {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int Init(GlobalOptions& global);
  int Token(GlobalOptions& global);
  int PrintNewToken(GlobalOptions& global, const std::string& command,
                    const std::string& state_dir);

  std::string cluster_file_;
  std::string address_;
  int port_ = 0;
  int64_t ttl_s_ = 0;
};

}  // namespace bmas
