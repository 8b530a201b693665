#pragma once

// `bmas inference deploy MODEL [--min N] [--max N] [--gpus-per-replica G] [--profile P]
// [--ttft-slo-ms X] [--command TEMPLATE] [--timetable "Mon-Fri 09:00-12:00 min=3"]...
// [--timetable-file FILE]`, `bmas inference list [--json]`,
// `bmas inference remove MODEL`: the deployments the controller in `bmas up` keeps running as
// Slurm jobs.

#include <string>
#include <vector>

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
  std::vector<std::string> timetable_;  // --timetable, repeated
  std::string timetable_file_;          // --timetable-file: [[deployment.timetable]] in TOML
  // `bmas inference controller`.
  std::vector<std::string> gateways_;
  double interval_s_ = 2;
  int port_base_ = 18100;
  std::string listen_host_ = "0.0.0.0";
  std::string replica_tls_dir_;
  std::string replica_ca_;
  bool cancel_on_exit_ = false;
  double scale_down_idle_s_ = 300;
  double load_window_s_ = 60;
  double breach_settle_s_ = 30;
  std::string timezone_;           // --timezone; "" = the machine's
  double timetable_lead_s_ = 120;  // --timetable-lead
};

// The timetable of `bmas inference deploy`: its --timetable floors, then those of
// --timetable-file's [[deployment.timetable]] tables (the file's other keys are refused).
Result<std::vector<TimetableFloor>> ReadDeployTimetable(const std::vector<std::string>& floors,
                                                        const std::string& file);

// The JSON array `bmas inference list --json` prints.
std::string DeploymentsJson(const std::vector<Deployment>& deployments,
                            const std::vector<ReplicaRecord>& replicas);

}  // namespace bmas
