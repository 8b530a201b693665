// Re-partitioning one GPU node of the local cluster (local_cluster.h: RelayoutLocalGpuNode).

#include <algorithm>
#include <chrono>
#include <ctime>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/config_table.h"
#include "common/process.h"
#include "core/mig.h"
#include "core/mig_relayout.h"
#include "gpu/mig_apply.h"
#include "slurm/gpu_layouts.h"
#include "slurm/local_cluster.h"
#include "slurm/local_cluster_internal.h"
#include "slurm/slurm_config.h"

namespace bmas::slurm {
namespace {

namespace fs = std::filesystem;
using internal::SlurmEnv;

Error Unavailable(std::string message) { return Error{ErrorCode::kUnavailable, std::move(message)}; }

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The jobs Slurm has on `node` (running, starting or ending), as ids.
Result<std::vector<std::string>> JobsOn(const LocalCluster& c, const std::string& node) {
  auto r = RunCommand({"squeue", "-h", "-w", node, "-t", "RUNNING,CONFIGURING,COMPLETING,SUSPENDED",
                       "-o", "%i"},
                      SlurmEnv(c), std::chrono::seconds(10));
  if (!r) return r.error();
  if (r->exit_code != 0) {
    return Unavailable(fmt::format("squeue -w {} failed: {}", node, r->err));
  }
  std::vector<std::string> ids;
  std::istringstream in(r->out);
  for (std::string id; in >> id;) ids.push_back(id);
  return ids;
}

Result<void> Scontrol(const LocalCluster& c, std::vector<std::string> args) {
  args.insert(args.begin(), "scontrol");
  auto r = RunCommand(args, SlurmEnv(c), std::chrono::seconds(10));
  if (!r) return r.error();
  if (r->exit_code != 0) {
    return Unavailable(fmt::format("{} failed: {}", fmt::join(args, " "), r->err + r->out));
  }
  return {};
}

// The node's state as slurmctld has it now ("idle", "drained", "down*", ...); "" when unknown.
std::string StateOf(const LocalCluster& c, const std::string& node) {
  auto r = RunCommand({"sinfo", "-h", "-N", "-n", node, "-o", "%T"}, SlurmEnv(c),
                      std::chrono::seconds(10));
  if (!r || r->exit_code != 0) return "";
  return r->out.substr(0, r->out.find('\n'));
}

}  // namespace

Result<RelayoutSteps> RelayoutLocalGpu(const std::string& state_dir, const std::string& group,
                                       const std::vector<std::string>& layout,
                                       std::chrono::seconds timeout,
                                       const std::string& nvml_library) {
  const auto start = std::chrono::steady_clock::now();
  RelayoutSteps steps;
  auto c = RunningLocalCluster(state_dir);
  if (!c) return c.error();
  Cluster inventory;
  try {
    inventory = c->inventory.empty() ? BuiltinLocalCluster() : LoadCluster(c->inventory);
  } catch (const ConfigError& e) {
    return InvalidArgument(e.what());
  }
  const std::string layouts_file = c->root + "/etc/gpu-layouts";
  auto saved = ReadGpuLayouts(layouts_file);
  if (!saved) return saved.error();
  auto active = ActiveLayoutNodes(inventory, *saved, layouts_file);
  if (!active) return active.error();
  auto to_node = LayoutNodeOf(inventory, group, layout);
  if (!to_node) return to_node.error();
  const std::string from = active->at(group);
  const std::string to = (*to_node)->name;
  if (from == to) {
    steps.total_s = Since(start);
    return steps;  // already so
  }

  // A GPU with a job is never re-partitioned: drain so that nothing starts, then check.
  if (auto drained = Scontrol(*c, {"update", "nodename=" + from, "state=drain",
                                   "reason=bmas: changing its MIG layout"});
      !drained) {
    return drained.error();
  }
  auto jobs = JobsOn(*c, from);
  if (!jobs || !jobs->empty()) {
    (void)Scontrol(*c, {"update", "nodename=" + from, "state=resume"});
    if (!jobs) return jobs.error();
    return Error{ErrorCode::kAlreadyExists,
                 fmt::format("{} ({}) holds job {}: a GPU with a job is never re-partitioned; "
                             "try again once it ends",
                             group, from, fmt::join(*jobs, ", "))};
  }
  steps.check_s = Since(start);

  // The GPU itself, through NVML.
  auto t = std::chrono::steady_clock::now();
  if (!nvml_library.empty()) {
    std::vector<MigInstanceSpec> specs;
    if (!layout.empty()) {
      const Node& n = **to_node;
      auto model = FindMigGpuModel(n.gpus.type, n.gpus.memory_gb);
      if (!model) return model.error();
      auto placed = PlaceMigLayout(**model, layout);
      if (!placed) return placed.error();
      for (const MigPlacement& p : *placed) {
        specs.push_back({p.profile->nvml_profile, static_cast<unsigned>(p.start),
                         static_cast<unsigned>(p.profile->memory_slices),
                         static_cast<unsigned>(p.profile->compute_slices)});
      }
    }
    auto applied = ApplyMigLayout(nvml_library, static_cast<unsigned>((*to_node)->gpus.first_index),
                                  specs);
    if (!applied) {
      // Untouched: the old layout serves on. Part-way: its node stays drained, and says why.
      const bool touched = applied.error().message.find("left part-way") != std::string::npos;
      if (!touched) (void)Scontrol(*c, {"update", "nodename=" + from, "state=resume"});
      return Error{applied.error().code,
                   fmt::format("{}: {}{}", group, applied.error().message,
                               touched ? fmt::format("; {} stays drained", from) : "")};
    }
  }
  steps.nvml_s = Since(t);

  // The old layout's slurmd stops; its node goes to standby.
  t = std::chrono::steady_clock::now();
  for (auto it = c->daemons.begin(); it != c->daemons.end();) {
    if (it->name == "slurmd " + from) {
      StopDaemonProcess(*it, std::chrono::seconds(5));
      it = c->daemons.erase(it);
    } else {
      ++it;
    }
  }
  if (auto down = internal::MarkStandby(*c, from); !down) return down.error();
  std::replace(c->nodes.begin(), c->nodes.end(), from, to);
  std::replace(c->standby.begin(), c->standby.end(), to, from);
  steps.stop_s = Since(t);

  t = std::chrono::steady_clock::now();
  // Out of standby: undrained but still DOWN, so that its slurmd's registration returns it to
  // service at once (ReturnToService=2); nothing runs on a DOWN node meanwhile.
  if (auto undrained = Scontrol(*c, {"update", "nodename=" + to, "state=undrain"}); !undrained) {
    return undrained.error();
  }
  auto slurmd = internal::StartSlurmd(*c, to);
  if (!slurmd) return slurmd.error();
  (*saved)[group] = SavedLayout{layout, static_cast<int64_t>(std::time(nullptr))};
  if (auto written = WriteGpuLayouts(layouts_file, *saved); !written) return written.error();
  if (auto recorded = internal::SaveLocalCluster(*c); !recorded) return recorded.error();
  steps.start_s = Since(t);

  // Registered: idle and answering.
  t = std::chrono::steady_clock::now();
  std::string seen;
  if (!WaitFor(
          [&] {
            seen = StateOf(*c, to);
            return seen == "idle" || seen == "mixed" || seen == "allocated";
          },
          slurmd->pid, timeout)) {
    return Unavailable(fmt::format("{} ({}) did not come up within {} s (Slurm says {}); see "
                                   "{}/log/slurmd-{}.log",
                                   group, to, timeout.count(),
                                   seen.empty() ? "nothing" : seen, c->root, to));
  }
  steps.register_s = Since(t);
  steps.total_s = Since(start);
  return steps;
}

}  // namespace bmas::slurm
