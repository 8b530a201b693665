#pragma once

// `bmas inference deploy MODEL [--min N] [--max N] [--gpus-per-replica G] [--profile P]
// [--ttft-slo-ms X] [--command TEMPLATE]`, `bmas inference list [--json]`,
// `bmas inference remove MODEL`: the deployments the controller in `bmas up` keeps running as
// Slurm jobs.

#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "store/store.h"

namespace bmas {

class InferenceCommands {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int Deploy(GlobalOptions& global);
  int List(GlobalOptions& global);
  int Remove(GlobalOptions& global);

  Deployment flags_;
  CLI::App* deploy_ = nullptr;
  bool json_ = false;
};

// The JSON array `bmas inference list --json` prints.
std::string DeploymentsJson(const std::vector<Deployment>& deployments,
                            const std::vector<ReplicaRecord>& replicas);

}  // namespace bmas
