#pragma once

// The agent's reconcile pass (agent/agent.h), on a thread of its own: at start and every
// `reconcile_interval`, the cgroups of jobs Slurm no longer runs are killed, their GPUs
// unplugged, copies of workspaces whose jobs are gone deleted, restarted workspaces' GPUs fenced
// again (lxd/device_fence.h), and the node's GPUs swept for processes outside their job
// (lxd/gpu_sweep.h). Between passes it watches for workspace starts (lxd/workspace_starts.h)
// and runs the fence step at once.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "common/clock.h"
#include "common/result.h"
#include "lxd/lxd_types.h"
#include "lxd/workspace_starts.h"

namespace bmas {

class AgentReconciler {
 public:
  explicit AgentReconciler(const AgentOptions& options) : o_(options) {}
  ~AgentReconciler() { Stop(); }
  AgentReconciler(const AgentReconciler&) = delete;
  AgentReconciler& operator=(const AgentReconciler&) = delete;

  void Start();
  // Returns once the passes' threads are done (a pass under way finishes first).
  void Stop();

  // What the passes did so far, for /metrics.
  struct Counts {
    int64_t removed = 0;             // GPU devices unplugged (their job was gone)
    int64_t copies_deleted = 0;      // copies of workspaces whose jobs were gone
    int64_t gpu_uses_killed = 0;     // processes killed for using a GPU outside its job
    int64_t workspaces_running = 0;  // as of the last pass
  };
  Counts counts() const;

 private:
  bool Stopping() const;
  static void Guarded(const std::function<void()>& pass);
  void ReconcileLoop();
  void WatchStarts(lxd::WorkspaceStartWatch& watch);
  std::function<Result<bool>(int64_t)> AliveThisPass();
  void FenceRestarted();
  void ReconcileOnce();
  void SweepGpus(const std::vector<lxd::Instance>& instances,
                 const std::function<Result<bool>(int64_t)>& alive);
  static void Note(const Result<std::vector<std::string>>& done, std::string_view what,
                   int64_t* counter);

  const AgentOptions& o_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread reconciler_, watcher_;
  // Until when the fence step runs every 200 ms: a workspace started (WatchStarts).
  TimePoint fence_until_{-1e18};  // the env's time; in the past until a start is seen
  Counts counts_;
  std::set<std::string> drained_;  // node and reason of each drain asked for (reconciler's)
};

}  // namespace bmas
