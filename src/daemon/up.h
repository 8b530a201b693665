#pragma once

// `bmas up`: starts every bmas component this machine can run, prints what runs where, and
// stops all of it on Ctrl-C (SIGINT), SIGTERM or SIGHUP: simulated engines and the gateway in
// front of them, a local Slurm and its monitor, LXD, and the agent. A part that dies is started
// again with backoff; what runs is recorded in run/up.json (daemon/up_record.h), where
// `bmas up --status`, the downs and the next up read it. Which parts it starts is decided by
// PlanUp (daemon/up_plan.h), from the options and what up finds on the machine.

#include <string>

#include "common/config.h"

namespace bmas {

struct UpOptions {
  Config config;
  std::string state_dir;
  std::string self_exe;  // the bmas binary, to start components as child processes
};

// Runs in the foreground until signalled; returns the process exit code.
int RunUp(const UpOptions& options);

}  // namespace bmas
