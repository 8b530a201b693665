#include "agent/agent_reconciler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <map>
#include <memory>

#include "lxd/device_fence.h"
#include "lxd/gpu_binding.h"
#include "lxd/gpu_sweep.h"
#include "lxd/job_cgroup.h"
#include "lxd/job_copy.h"
#include "lxd/lxd_client.h"

namespace bmas {

void AgentReconciler::Start() {
  reconciler_ = std::thread([this] { ReconcileLoop(); });
  if (auto watch = lxd::WorkspaceStartWatch::Open()) {
    watcher_ = std::thread([this, w = std::shared_ptr(std::move(*watch))] { WatchStarts(*w); });
  } else {
    spdlog::warn("bmas agent: {}; a restarted workspace's GPUs are fenced again at the next "
                 "reconcile pass", watch.error().message);
  }
}

void AgentReconciler::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (reconciler_.joinable()) reconciler_.join();
  if (watcher_.joinable()) watcher_.join();
}

AgentReconciler::Counts AgentReconciler::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

bool AgentReconciler::Stopping() const {
  std::lock_guard lock(mu_);
  return stopping_;
}

// Nothing a pass meets may end the loop: it is what finishes jobs whose epilog failed.
void AgentReconciler::Guarded(const std::function<void()>& pass) {
  try {
    pass();
  } catch (const std::exception& e) {
    spdlog::error("bmas agent: reconcile: {}", e.what());
  } catch (...) {
    spdlog::error("bmas agent: reconcile: an unknown exception");
  }
}

// A full pass every reconcile interval; in between, for a while after a workspace started
// (WatchStarts), the fence step alone every 200 ms until the workspace runs and is fenced.
void AgentReconciler::ReconcileLoop() {
  Env& env = *o_.env;
  while (!Stopping()) {
    Guarded([this] { ReconcileOnce(); });
    const TimePoint next = env.Now() + Duration(o_.reconcile_interval);
    std::unique_lock lock(mu_);
    while (!stopping_ && env.Now() < next) {
      if (env.Now() < fence_until_) {
        lock.unlock();
        Guarded([this] { FenceRestarted(); });
        lock.lock();
        wake_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_; });
      } else {
        wake_.wait_for(lock, next - env.Now(), [&] { return stopping_ || env.Now() < fence_until_; });
      }
    }
  }
}

void AgentReconciler::WatchStarts(lxd::WorkspaceStartWatch& watch) {
  while (!Stopping()) {
    if (!watch.Wait(std::chrono::milliseconds(200))) continue;
    std::lock_guard lock(mu_);
    fence_until_ = o_.env->Now() + Duration(30);
    wake_.notify_all();
  }
}

// One answer from Slurm per job and pass, whichever steps ask.
std::function<Result<bool>(int64_t)> AgentReconciler::AliveThisPass() {
  auto answers = std::make_shared<std::map<int64_t, Result<bool>>>();
  return [this, answers](int64_t job) -> Result<bool> {
    auto it = answers->find(job);
    if (it == answers->end()) it = answers->emplace(job, o_.job_alive(job)).first;
    return it->second;
  };
}

// The fence step of a pass, and the sweep once it fenced something: whatever opened the GPU
// before the fence went back is not in the job's cgroup.
void AgentReconciler::FenceRestarted() {
  lxd::LxdClient client(o_.lxd_socket, std::chrono::seconds(30));
  auto alive = AliveThisPass();
  auto refenced = lxd::ReconcileFences(client, alive);
  Note(refenced, "fenced the GPUs of {} again: the workspace was restarted under its job",
       nullptr);
  if (refenced && !refenced->empty()) {
    if (auto instances = client.Instances()) SweepGpus(*instances, alive);
  }
}

void AgentReconciler::ReconcileOnce() {
  lxd::LxdClient client(o_.lxd_socket, std::chrono::seconds(30));
  auto alive = AliveThisPass();
  // Jobs that are gone: their processes first (whatever they hold), then their GPUs.
  auto ended = lxd::ReconcileJobCgroups(client, alive);
  auto removed = lxd::ReconcileGpus(
      client, alive,
      [&](const std::string& instance, int64_t job, const std::string& node) {
        auto r = lxd::EndJobInWorkspace(client, instance, job, node);
        if (!r) spdlog::warn("bmas agent: reconcile: job {}: {}", job, r.error().message);
        return r.has_value();
      });
  // Copies of workspaces from other nodes whose jobs are all gone (their epilog did not
  // run): after the unplug above, so no device goes with a copy.
  auto copies = lxd::ReconcileCopies(client, alive);
  // Live jobs' GPUs in workspaces restarted under them: fenced again (lxd/device_fence.h).
  auto refenced = lxd::ReconcileFences(client, alive);
  auto instances = client.Instances();
  if (instances) SweepGpus(*instances, alive);
  std::lock_guard lock(mu_);
  Note(ended, "killed {}, the cgroup of a job that is gone", nullptr);
  Note(copies, "deleted {}, a copy whose jobs are gone", &counts_.copies_deleted);
  Note(removed, "unplugged {} (its job is gone)", &counts_.removed);
  Note(refenced, "fenced the GPUs of {} again: the workspace was restarted under its job",
       nullptr);
  if (instances) {
    counts_.workspaces_running = 0;
    for (const auto& i : *instances) counts_.workspaces_running += i.status == lxd::InstanceStatus::kRunning ? 1 : 0;
  }
}

// Kills whatever uses a GPU outside the job it belongs to (lxd/gpu_sweep.h), and drains the
// node of one that outlives SIGKILL: once for each distinct reason.
void AgentReconciler::SweepGpus(const std::vector<lxd::Instance>& instances,
                              const std::function<Result<bool>(int64_t)>& alive) {
  if (o_.gpu_dirs.empty() && !o_.gpus) return;
  lxd::GpuSweepInput in;
  in.dirs = o_.gpu_dirs;
  in.services = o_.service_uids;
  in.alive = alive;
  in.stopping = [this] { return Stopping(); };
  for (const lxd::Instance& i : instances) {
    for (const auto& [name, spec] : i.devices) {
      if (auto d = lxd::ParseJobDeviceName(name)) in.plugged[{d->node, d->gpu}].insert(d->job);
    }
  }
  if (o_.gpus) {
    in.nvml_node = o_.node;
    in.nvml = [this]() -> Result<std::map<int, std::vector<pid_t>>> {
      auto readings = o_.gpus->Read();
      if (!readings) return readings.error();
      std::map<int, std::vector<pid_t>> pids;
      for (const GpuReading& r : *readings) pids[r.index] = r.pids;
      return pids;
    };
  }
  const lxd::GpuSweepReport report = lxd::SweepGpus(in);
  for (const std::string& k : report.killed) {
    spdlog::warn("bmas agent: reconcile: killed {}: outside the job the GPU belongs to", k);
  }
  for (const auto& [node, why] : report.stuck) {
    const std::string reason = "bmas: GPU still in use after SIGKILL: " + why;
    if (!drained_.insert(node + "\n" + reason).second) continue;
    spdlog::error("bmas agent: reconcile: {}: {}", node, reason);
    if (!o_.drain) continue;
    auto r = o_.drain(node, reason);
    if (r) {
      spdlog::error("bmas agent: reconcile: drained {}; reset its GPU, then resume it", node);
    } else {
      spdlog::error("bmas agent: reconcile: {}", r.error().message);
    }
  }
  std::lock_guard lock(mu_);
  counts_.gpu_uses_killed += static_cast<int64_t>(report.killed.size());
}

// Logs each thing a reconcile step did (`what` formats one) and counts them, or its error.
void AgentReconciler::Note(const Result<std::vector<std::string>>& done, std::string_view what,
                         int64_t* counter) {
  if (!done) {
    spdlog::warn("bmas agent: reconcile: {}", done.error().message);
    return;
  }
  if (counter != nullptr) *counter += static_cast<int64_t>(done->size());
  for (const std::string& d : *done) {
    spdlog::info("bmas agent: reconcile: {}", fmt::format(fmt::runtime(what), d));
  }
}

}  // namespace bmas
