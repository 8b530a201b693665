#pragma once

// `bmas slurm ...`: Slurm as bmas drives it. `bmas slurm config` renders Slurm's files from
// the cluster inventory; `up`, `down` and `status` for a local cluster join this group.

#include <chrono>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "daemon/slurm_monitor.h"

namespace bmas {

// One poll of the cluster this bmas finds (cli/slurm_target.h), acting as Unix user `user`:
// slurmrestd's jobs and nodes and the mode, and with `with_accounting` slurmdbd's finished
// jobs too (all of the last 30 days at first, then every minute the last ten). The endpoint
// is resolved on every poll: a local cluster may come up later, and tokens expire.
std::function<Result<SlurmSnapshot>()> SlurmPoller(GlobalOptions& global, std::string user,
                                                   bool with_accounting);

class SlurmCommands {
 public:
  // Adds the `slurm` group to `app`; `global` must outlive the parse.
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int RunConfig(GlobalOptions& global);
  int RunUp(GlobalOptions& global);
  int RunDown(GlobalOptions& global);
  int RunStatus(GlobalOptions& global);
  int RunMonitor(GlobalOptions& global);
  int RunRelayout(GlobalOptions& global);  // slurm_relayout.cc
  int RunTlsFront(GlobalOptions& global);  // slurm_tls_front.cc
  int RelayoutPass(GlobalOptions& global, const std::string& state_dir,
                   std::chrono::seconds timeout);

  CLI::App* slurm_ = nullptr;
  CLI::App* config_ = nullptr;
  int timeout_s_ = 60;
  bool json_ = false;
  std::string cluster_file_;
  std::string out_dir_;
  std::string monitor_host_ = "127.0.0.1";
  int monitor_port_ = 0;
  std::string hook_phase_;
  double monitor_interval_s_ = 2;
  std::string relayout_node_, relayout_layout_, relayout_nvml_;
  bool relayout_auto_ = false;
  std::string front_listen_, front_backend_ = "127.0.0.1:6820", front_name_, front_cert_,
      front_key_, front_user_ = "nobody";
  int64_t relayout_min_wait_s_ = 30, relayout_hold_s_ = 300, relayout_every_s_ = 0;
};

}  // namespace bmas
