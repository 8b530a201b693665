#pragma once

// The real daemons of a node that `bmas node join` starts and `bmas node leave` stops, and the
// cluster's Slurm as the node's own commands see it (cluster/node_join.h, cluster/node_leave.h).
// Services hands them out; nothing else names these classes.

#include <memory>
#include <string>

#include "cluster/node_join.h"
#include "cluster/node_leave.h"

namespace bmas {

// munged (through setpriv, as munge), slurmd and `bmas_binary agent` as detached processes of
// this host, each recorded as `<run dir>/<name>.pid` (pid and start time) so that a later
// `node join` or `node leave` recognises it.
std::unique_ptr<cluster::NodeDaemons> NewProcessNodeDaemons(const std::string& bmas_binary);

// Whether something accepts connections on the agent's unix socket at `path`.
bool AgentSocketAnswers(const std::string& path);

// scontrol and squeue, run as this process's user with SLURM_CONF set.
std::unique_ptr<cluster::NodeSlurm> NewCommandNodeSlurm();

}  // namespace bmas
