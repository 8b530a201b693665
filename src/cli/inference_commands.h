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
  int Controller(GlobalOptions& global);

  Deployment flags_;
  std::string gpus_per_replica_ = "1";  // --gpus-per-replica: "2", "3g.40gb" or "2x1g.10gb"
  CLI::App* deploy_ = nullptr;
  bool json_ = false;
  bool if_missing_ = false;
  // `bmas inference controller`.
  std::string gateway_;
  double interval_s_ = 2;
  int port_base_ = 18100;
  std::string listen_host_ = "0.0.0.0";
  bool cancel_on_exit_ = false;
  double scale_down_idle_s_ = 300;
  double load_window_s_ = 60;
  double breach_settle_s_ = 30;
};

// The JSON array `bmas inference list --json` prints.
std::string DeploymentsJson(const std::vector<Deployment>& deployments,
                            const std::vector<ReplicaRecord>& replicas);

}  // namespace bmas
