#pragma once

// What `bmas cluster init` writes on the controller besides the CA: Slurm's configuration for
// configless nodes (SlurmctldParameters=enable_configless; nodes run `slurmd --conf-server`),
// the munge key and the JWT key, and the workspace hooks that `bmas cluster serve` hands to
// every node as Slurm's Prolog and Epilog. Every file is created only when absent: a key that
// exists is never replaced, and a config file that differs from the inventory's is kept and
// reported, not overwritten.

#include <string>
#include <vector>

#include "common/env.h"
#include "common/result.h"
#include "core/cluster.h"

namespace bmas::cluster {

struct ControllerPaths {
  std::string slurm_dir = "/etc/slurm";
  std::string munge_key = "/etc/munge/munge.key";
  std::string jwt_key;  // "" = the inventory's slurm.jwt_key, else <slurm_dir>/jwt_hs256.key
  // Nodes register themselves (`slurmd -Z`, `bmas node join --dynamic`): slurm.conf lists no
  // node, its partitions take ALL, and MaxNodeCount is the inventory's node count.
  bool dynamic_nodes = false;
};

struct ControllerFile {
  std::string path;
  bool created = false;
  std::string note;  // why one that exists was kept
};

inline constexpr size_t kMungeKeyBytes = 1024;
inline constexpr size_t kJwtKeyBytes = 32;

// slurm.conf (with enable_configless), gres.conf, cgroup.conf (topology.conf with switches), the
// munge key (0400, munge's) and the JWT key (0400, the inventory's slurm user's). Keys' bytes come
// from `env`. REQUIRES: root. Errors name the file; NotFound for a missing munge or slurm account.
Result<std::vector<ControllerFile>> WriteControllerFiles(const Cluster& inventory,
                                                         const ControllerPaths& paths, Env& env);

// slurm.conf as the controller serves it to configless nodes: the inventory's, rendered, with
// SlurmctldParameters=enable_configless; with `dynamic_nodes`, as ControllerPaths says.
std::string ConfiglessSlurmConf(const Cluster& inventory, bool dynamic_nodes = false);

// A Slurm Prolog or Epilog (`phase`) that runs `bmas slurm hook <phase>` and never fails (a
// failing prolog drains the node).
std::string HookScript(const std::string& bmas_binary, const std::string& phase);

}  // namespace bmas::cluster
