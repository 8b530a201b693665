#pragma once

// The node's daemons under systemd (a real node, where PID 1 is systemd): `bmas node join`
// enables and starts Debian's munge and slurmd units and the package's bmas-agent unit rather
// than detached processes, so that they come back after a crash (the units' Restart=) and a
// reboot. Each unit gets a drop-in of the join's (/etc/systemd/system/UNIT.d/bmas-join.conf):
// slurmd's runs it configless (`--conf-server`, and `-Z --conf ...` for a dynamic node) and
// clears the Debian unit's ConditionPathExists=/etc/slurm/slurm.conf, which a configless node
// never has and which would make systemd skip slurmd without a word; the agent's names the
// join's bmas.toml and state dir; munge's its key. `node leave` disables and stops the units
// whose drop-in the join wrote, and removes the drop-ins. Services picks this variant when
// systemd runs and the bmas-agent unit is installed.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/node_join.h"
#include "common/process.h"
#include "common/result.h"

namespace bmas {

// Runs a command (systemctl) to its end: the seam the tests replace.
using SystemctlRunner = std::function<Result<CommandOutput>(const std::vector<std::string>&)>;

// `unit_dir`: where drop-ins go (/etc/systemd/system). `bmas_binary`: the agent's program.
std::unique_ptr<cluster::NodeDaemons> NewSystemdNodeDaemons(SystemctlRunner run,
                                                            std::string unit_dir,
                                                            std::string bmas_binary);

// Whether this host runs systemd as PID 1 with bmas's units installed (the package's).
bool SystemdRunsBmasUnits();

}  // namespace bmas
