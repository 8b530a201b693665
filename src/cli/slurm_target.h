#pragma once

// The Slurm a command talks to: the local cluster `bmas slurm up` runs in the state dir, else
// the inventory of the --config file, whose [cluster.slurm] slurmrestd names where to reach it.

#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/result.h"
#include "core/cluster.h"
#include "slurm/modes.h"
#include "slurm/rest_client.h"

namespace bmas {

struct SlurmTarget {
  Cluster inventory;
  RestEndpoint endpoint;         // with a token for the user it was resolved for
  std::vector<std::string> env;  // SLURM_CONF=... for Slurm's own commands (local cluster)
  std::string jwt_key;
};

// The target, acting as Unix user `user`. Root mints the token with the cluster's JWT key;
// other users get theirs from slurmctld (`scontrol token`).
Result<SlurmTarget> ResolveSlurm(GlobalOptions& global, const std::string& user);

// The mode Slurm's reservations say the cluster is in (`scontrol show reservation`).
Result<slurm::Mode> CurrentMode(const SlurmTarget& target);

// The research reservation when `user` is one of research mode's users, else "".
std::string ReservationFor(const SlurmTarget& target, const std::string& user);

}  // namespace bmas
