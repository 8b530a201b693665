#include "cli/doctor_command.h"

#include <memory>

#include <fmt/format.h>

#include "common/config.h"
#include "doctor/node_facts.h"
#include "doctor/report.h"
#include "gpu/nvml.h"

namespace bmas {

void DoctorCommand::Register(CLI::App& app, GlobalOptions& global) {
  cmd_ = app.add_subcommand(
      "doctor",
      "Check this node against the cluster's hardware specification (GPUs, RDMA, RAM, bare "
      "metal) and what bmas needs here (cgroups, kernel, LXD, Slurm, munge, lxcfs, id ranges)");
  cmd_->add_flag("--json", json_,
                 "Print {\"ok\", \"checks\": [{\"name\", \"kind\", \"ok\", \"required\", "
                 "\"found\", \"fix\"}], \"can_run\", \"cannot_run\"}");
  cmd_->footer(
      "Each check is of a kind: spec (the cluster's minimum hardware specification), bmas "
      "(what bmas needs on this node) or info (reported only: the clock). Exit code 0 when "
      "every spec and bmas check passes, 1 when one fails; info checks never change it. It "
      "also says which parts of bmas can run here anyway.");
  cmd_->callback([this, &global] { global.exit_code = Run(global); });
}

int DoctorCommand::Run(GlobalOptions& global) {
  const Config config = global.LoadConfigOrDefaults();
  doctor::ReadOptions options;
  options.state_dir = ResolveStateDir(global.state_dir, config);
  const doctor::NodeFacts facts = doctor::ReadNodeFacts(options);
  auto gpus = OpenNvml(config.telemetry.nvml_library)->Read();
  const doctor::Report report = doctor::Diagnose(facts, gpus, config.lxd.users);
  fmt::print("{}", json_ ? doctor::FormatJson(report) : doctor::FormatText(report));
  return report.ok ? 0 : 1;
}

}  // namespace bmas
