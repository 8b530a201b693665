#include "cli/doctor_command.h"

#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "cli/slurm_target.h"
#include "common/config.h"
#include "core/cluster.h"
#include "doctor/node_facts.h"
#include "doctor/report.h"
#include "daemon/services.h"

namespace bmas {
namespace {

// slurmctld's clock, from the Slurm bmas talks to (the local cluster, or --config's
// slurmrestd), asked as the caller with a short deadline, and this node's clock around it.
doctor::SlurmClockFacts ReadSlurmClock(GlobalOptions& global) {
  doctor::SlurmClockFacts f;
  const passwd* me = getpwuid(geteuid());
  auto target = ResolveSlurm(global, me != nullptr ? me->pw_name : "root");
  if (!target) {
    f.why_not = fmt::format("no Slurm reachable ({})", target.error().message);
    return f;
  }
  f.controller = fmt::format("{}:{}", target->endpoint.host, target->endpoint.port);
  auto client = global.services->Slurm(target->endpoint, std::chrono::seconds(5));
  const Env& env = global.services->env();
  f.asked_at = env.UnixNow();
  auto controller_time = client->ControllerTime();
  f.answered_at = env.UnixNow();
  if (!controller_time) {
    f.why_not = controller_time.error().code == ErrorCode::kUnavailable
                    ? fmt::format("no Slurm reachable ({})", controller_time.error().message)
                    : fmt::format("slurmrestd at {} did not give slurmctld's time ({})",
                                  f.controller, controller_time.error().message);
    return f;
  }
  f.reached = true;
  f.controller_time = *controller_time;
  return f;
}

// This host's name without its domain, as Slurm names nodes.
std::string ShortHostName() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  const std::string host = name;
  return host.substr(0, host.find('.'));
}

}  // namespace

void DoctorCommand::Register(CLI::App& app, GlobalOptions& global) {
  cmd_ = app.add_subcommand(
      "doctor",
      "Check this node against the cluster's hardware specification (GPUs, RDMA, RAM, bare "
      "metal) and what bmas needs here (cgroups, kernel, LXD, Slurm, munge, lxcfs, id ranges, "
      "the clock against slurmctld's)");
  cmd_->add_flag("--json", json_,
                 "Print {\"ok\", \"checks\": [{\"name\", \"kind\", \"ok\", \"required\", "
                 "\"found\", \"fix\"}], \"can_run\", \"cannot_run\"}");
  cmd_->add_option("--cluster", cluster_,
                   "Cluster inventory (e.g. examples/cluster-local-mig.toml): also check that "
                   "this node's GPUs have the MIG layouts it gives them (mig-layout)");
  cmd_->add_option("--node", node_, "This node's name in --cluster's inventory (default: the "
                                    "host name, without its domain)");
  cmd_->footer(
      "Each check is of a kind: spec (the cluster's minimum hardware specification), bmas "
      "(what bmas needs on this node) or info (reported only: the clock; clock-skew against "
      "slurmctld when no Slurm is reachable). Exit code 0 when "
      "every spec and bmas check passes, 1 when one fails; info checks never change it. It "
      "also says which parts of bmas can run here anyway.");
  cmd_->callback([this, &global] { global.exit_code = Run(global); });
}

int DoctorCommand::Run(GlobalOptions& global) {
  const Config config = global.LoadConfigOrDefaults();
  doctor::ReadOptions options;
  options.state_dir = ResolveStateDir(global.state_dir, config);
  doctor::NodeFacts facts = doctor::ReadNodeFacts(options);
  facts.slurm_clock = ReadSlurmClock(global);
  auto gpus = global.services->Gpus(config.telemetry.nvml_library)->Read();
  std::optional<Cluster> cluster;
  doctor::InventoryNode inventory;
  if (!cluster_.empty()) {
    cluster = LoadCluster(cluster_);  // a ConfigError names the file and line (main prints it)
    inventory.source = cluster_;
    inventory.node_name = node_.empty() ? ShortHostName() : node_;
    inventory.node = cluster->FindNode(inventory.node_name);
  }
  const doctor::Report report = doctor::Diagnose(facts, gpus, config.lxd.users,
                                                 cluster ? &inventory : nullptr);
  fmt::print("{}", json_ ? doctor::FormatJson(report) : doctor::FormatText(report));
  return report.ok ? 0 : 1;
}

}  // namespace bmas
