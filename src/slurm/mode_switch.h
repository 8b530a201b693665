#pragma once

// Switching the cluster between lab mode (every node shared) and research mode (a few users own
// whole nodes): what `bmas mode research` and `bmas mode lab` do, against Slurm's REST API and
// `scontrol`, both passed in so that tests can run it against fakes.

#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "core/cluster.h"
#include "slurm/modes.h"
#include "slurm/rest_client.h"

namespace bmas::slurm {

// Runs `scontrol ARGS...` against the cluster; its output, or an error carrying its stderr.
using Scontrol = std::function<Result<std::string>(std::vector<std::string> args)>;

// The mode in force (`scontrol -o show reservation`).
Result<Mode> CurrentMode(const Scontrol& scontrol);

struct ResearchRequest {
  std::vector<std::string> users;  // who get the nodes (accounts checked by the caller)
  std::vector<std::string> nodes;  // these nodes (expanded), or
  int count = 0;                   // this many, idle ones first
  bool add = false;    // keep the research users and nodes in force and add these
  bool force = false;  // requeue other users' jobs running on the nodes
};

struct ResearchSwitched {
  std::vector<std::string> users;
  std::vector<std::string> nodes;  // sorted
  int requeued = 0;                // with force: other users' jobs requeued
  Mode replaced;                   // the research reservation this one replaced (not added to)
};

// Puts `request`'s users on their nodes: one research reservation at a time, replacing the one
// in force or (add) taking in its users and nodes. InvalidArgument for a node not in
// `inventory`, or a count over the cluster's nodes.
Result<ResearchSwitched> SwitchToResearch(SlurmApi& slurm, const Scontrol& scontrol,
                                          const Cluster& inventory, ResearchRequest request);

// Returns every node to sharing; the mode that was in force (not research: nothing done).
Result<Mode> SwitchToLab(const Scontrol& scontrol);

}  // namespace bmas::slurm
