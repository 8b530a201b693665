#pragma once

// `bmas up`: starts every bmas component this machine can run, prints what runs where, and
// stops all of it on Ctrl-C (SIGINT) or SIGTERM. Today: simulated engines, the gateway in
// front of them, and a local Slurm cluster when bmas runs as root with Slurm installed.

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
