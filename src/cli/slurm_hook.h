#pragma once

// `bmas slurm hook prolog|epilog`: what Slurm's Prolog and Epilog run on a job's node (as root,
// with the job's SLURM_* variables). The prolog plugs the GPUs Slurm gave the job on this node
// into its user's workspace; the epilog unplugs them. Users without a workspace, or a node
// without LXD, get plain Slurm jobs. Never fails: a failing prolog would drain the node.

#include <string>

#include "cli/commands.h"

namespace bmas {

int RunSlurmHook(GlobalOptions& global, const std::string& phase);

// While this file exists under the state dir (run/fail-gpu-release), the epilog skips
// unplugging: tests show that the reconcile pass removes what a failed epilog left.
inline constexpr const char* kFailReleaseFile = "run/fail-gpu-release";

}  // namespace bmas
