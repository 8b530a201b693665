// `bmas slurm relayout`: a GPU whose MIG layout follows demand takes another layout, by hand or
// by the policy (core/mig_relayout.h), on the local cluster.

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/slurm_commands.h"
#include "cli/slurm_target.h"
#include "daemon/services.h"
#include "core/mig_relayout.h"
#include "slurm/gpu_layouts.h"
#include "slurm/local_cluster.h"
#include "slurm/relayout_input.h"

namespace bmas {
namespace {

volatile std::sig_atomic_t g_relayout_stop = 0;  // SIGINT or SIGTERM: stop after this pass

int Fail(const Error& e) {
  fmt::print(stderr, "bmas slurm relayout: {}\n", e.message);
  return e.code == ErrorCode::kInvalidArgument ? 2 : 1;
}

void PrintSteps(const std::string& group, const std::vector<std::string>& layout,
                const slurm::RelayoutSteps& s) {
  fmt::print("{}: now {}, schedulable {:.2f} s after the decision (drained and checked {:.2f}, "
             "NVML {:.2f}, old layout's slurmd stopped {:.2f}, new one's started {:.2f}, "
             "registered {:.2f})\n",
             group, LayoutText(layout), s.total_s, s.check_s, s.nvml_s, s.stop_s, s.start_s,
             s.register_s);
}

}  // namespace

int SlurmCommands::RunRelayout(GlobalOptions& global) {
  std::signal(SIGINT, [](int) { g_relayout_stop = 1; });
  std::signal(SIGTERM, [](int) { g_relayout_stop = 1; });
  global.SetUpLogging();
  if (geteuid() != 0) {
    return Fail(Error{ErrorCode::kPermissionDenied,
                      "changing a GPU's MIG layout restarts Slurm's daemons: run it as root"});
  }
  const std::string state_dir = ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
  const auto timeout = std::chrono::seconds(timeout_s_);
  if (!relayout_auto_) {
    if (relayout_node_.empty() || relayout_layout_.empty()) {
      return Fail(InvalidArgument(
          "give a GPU and a layout (bmas slurm relayout oss01-gpu3 7x1g.10gb), or --auto"));
    }
    auto layout = ParseLayoutText(relayout_layout_);
    if (!layout) return Fail(layout.error());
    auto steps = slurm::RelayoutLocalGpu(state_dir, relayout_node_, *layout, timeout,
                                          relayout_nvml_);
    if (!steps) return Fail(steps.error());
    PrintSteps(relayout_node_, *layout, *steps);
    return 0;
  }
  // The policy: once, or every --every seconds until interrupted.
  int status = 0;
  while (true) {
    status = RelayoutPass(global, state_dir, timeout);
    if (relayout_every_s_ <= 0 || g_relayout_stop) break;
    for (int64_t waited = 0; waited < relayout_every_s_ * 10 && !g_relayout_stop; ++waited) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (g_relayout_stop) break;
  }
  return status;
}

int SlurmCommands::RelayoutPass(GlobalOptions& global, const std::string& state_dir,
                                std::chrono::seconds timeout) {
  // What waits, what is free, which idle GPU should change.
  auto target = ResolveSlurm(global, "root");
  if (!target) return Fail(target.error());
  auto local = slurm::ReadLocalCluster(state_dir);
  if (!local) return Fail(local.error());
  const std::string layouts_file = local->root + "/etc/gpu-layouts";
  auto saved = slurm::ReadGpuLayouts(layouts_file);
  if (!saved) return Fail(saved.error());
  const Cluster& inventory = target->inventory;
  auto active = slurm::ActiveLayoutNodes(inventory, *saved, layouts_file);
  if (!active) return Fail(active.error());
  auto slurm = global.services->Slurm(target->endpoint);
  auto jobs = slurm->Jobs();
  if (!jobs) return Fail(jobs.error());
  RelayoutSettings settings = slurm::RelayoutSettingsOf(inventory);
  settings.min_wait_s = relayout_min_wait_s_;
  settings.hold_s = relayout_hold_s_;
  const auto now = static_cast<int64_t>(global.services->env().UnixNow());
  const std::vector<RelayoutDecision> decisions =
      DecideRelayouts(settings, slurm::RelayoutInputOf(inventory, *jobs, *active, *saved), now);
  if (decisions.empty()) {
    if (relayout_every_s_ <= 0) {
      fmt::print("no GPU changes layout: nothing waits that a layout change would serve\n");
    }
    return 0;
  }
  int failed = 0;
  for (const RelayoutDecision& d : decisions) {
    fmt::print("{}: {} -> {}: {}\n", d.node, LayoutText(d.from), LayoutText(d.to), d.why);
    std::fflush(stdout);
    auto steps = slurm::RelayoutLocalGpu(state_dir, d.node, d.to, timeout, relayout_nvml_);
    if (!steps) {
      fmt::print(stderr, "bmas slurm relayout: {}: {}\n", d.node, steps.error().message);
      ++failed;
      continue;
    }
    PrintSteps(d.node, d.to, *steps);
    std::fflush(stdout);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace bmas
