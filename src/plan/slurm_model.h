#pragma once

// A model of the local Slurm's scheduling for the capacity planner: jobs arrive, wait, are
// placed on nodes' GPUs, run, end, and are preempted, in virtual time. Pure: the jobs and the
// cluster go in, every job's start and end come out; nothing reads a clock.
//
// What it models, as bmas configures Slurm (src/slurm/slurm_config.cc):
//  - Placement as PlanJobShape lays jobs out: up to a node's GPUs on one node, more as whole
//    nodes. A node is taken first-fit in inventory order (equal weights: Slurm's node order).
//  - Priority: the partition's PriorityTier first, then the job's age (earlier submission
//    first), then its id. (Slurm's multifactor priority also weighs fair share and size; the
//    planner's cohorts submit in their own pattern, and bmas sets no weights but age's.)
//  - The main scheduler runs on every submission and job end (batch_sched_delay=0,
//    sched_min_interval=0): jobs in priority order start while they fit; the first job of a
//    partition that does not fit blocks the rest of that partition for the pass.
//  - Backfill every `backfill_interval` (bf_interval=1): the first bf_max_job_test (500) blocked
//    jobs get reservations, within bf_window (a day), at the earliest time their GPUs free up (running jobs end at their time limits, as Slurm
//    plans), and a lower-priority job starts now only if it ends before the reservations it
//    would take GPUs from.
//  - Preemption (preempt/partition_prio, PreemptMode=REQUEUE): a job that does not fit takes
//    the GPUs of jobs in partitions of a lower tier whose mode allows preemption, the youngest
//    first; they are requeued (they start over from the beginning) after `requeue_delay`.
//  - Reservations (research mode): reserved nodes take only the reservation's users' jobs while
//    it lasts, and no other job whose time limit reaches into it.
//  - Start-up latency: `launch_delay` between the decision and the job running (prolog, slurmd
//    launch), measured on the local cluster.
//  - MIG slices (core/mig.h): a node's whole GPUs and its slices of each profile are separate
//    pools (Slurm's gres types), and a job takes GPUs of one pool (plan/gpu_pools.h). A job
//    that fits in a slice (SimJob::mig_profile) asks for slices when its partition has that
//    profile, else for whole GPUs, as a student would.
//  - Layouts that follow demand (the inventory's flexible GPUs, one Slurm node per layout):
//    every `relayout.every_s` while jobs wait, core/mig_relayout.h's policy (what `bmas slurm
//    relayout --auto` runs) picks new layouts for idle GPUs; the new layout's slices are
//    schedulable `relayout.delay_s` later.
// What it leaves out: fair-share and QOS limits (a partition's max_gpus_per_user), node
// failures and drains, CPU and memory as resources (GPUs only), topology-aware placement,
// GraceTime (replicas use 0), job arrays and dependencies.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "core/cluster.h"

namespace bmas::plan {

struct SimJob {
  int64_t id = 0;
  std::string user;
  std::string partition;  // "" = the cluster's default partition
  int gpus = 1;
  TimePoint submit{0};
  Duration duration{0};    // how long it runs once started
  Duration time_limit{0};  // what backfill plans with; 0 = the duration (a perfect estimate)
  // A job that fits in `gpus` MIG slices of this profile ("1g.10gb"), or "" for whole GPUs.
  std::string mig_profile;
  // Its duration on slices, against `duration` on whole GPUs.
  double slice_duration_factor = 1;
};

// A reservation (research mode): from `start` to `end`, `nodes` take only jobs of `users`. A
// job of anyone else does not start there if its time limit would reach into the reservation.
struct SimReservation {
  std::vector<std::string> users;
  std::vector<std::string> nodes;
  double start = 0;
  double end = 0;
};

// The layout policy's pass, as `bmas slurm relayout --auto` runs it.
struct RelayoutModelSettings {
  double every_s = 30;      // --every
  int64_t min_wait_s = 30;  // --min-wait
  int64_t hold_s = 300;     // --hold
  // From the decision to the new layout's slices schedulable: bench/RESULTS.md R1 measures
  // 0.12 s on fake GPUs; NVML's instance calls on a real GPU add to it.
  double delay_s = 0.12;
};

struct SlurmModelSettings {
  Duration backfill_interval{1};
  Duration launch_delay{0};
  Duration requeue_delay{0};
  // Slurm's defaults, which bmas's slurm.conf keeps: a backfill pass tests at most
  // bf_max_job_test pending jobs, and plans reservations only within bf_window.
  int backfill_max_job_test = 500;
  Duration backfill_window{86400};
  // GPUs of a node held all along by jobs the model does not schedule (the inference floor's
  // replicas, which nothing preempts), by node name.
  std::map<std::string, int> held_gpus;
  std::vector<SimReservation> reservations;
  RelayoutModelSettings relayout;
};

struct SimJobResult {
  int64_t id = 0;
  bool started = false;  // false: never fitted (more GPUs than its partition has)
  TimePoint start{0};    // its last start (after requeues)
  TimePoint end{0};
  int requeues = 0;
  std::string nodes;  // where it last ran, comma-separated
  std::string error;  // why it could not run (no such partition, too large)
  std::string gres;   // the MIG profile it ran on; "" = whole GPUs
  double gpu_equivalents = 0;  // the GPUs it held: slices count by their compute share
};

// A GPU whose layout follows demand took another layout: Slurm node `from` gave way to `to`.
struct LayoutChange {
  double time = 0;
  std::string from, to;
};

struct SlurmModelResult {
  std::vector<SimJobResult> jobs;  // in the order of the input
  TimePoint makespan{0};           // the last end
  double gpu_seconds_allocated = 0;  // GPUs x seconds held by running jobs (requeued runs too)
  int64_t events = 0;                // submissions, ends, preemptions and scheduling passes
  std::vector<LayoutChange> layout_changes;
};

// Runs `jobs` on `cluster` until every job has ended (or cannot run).
SlurmModelResult RunSlurmModel(const Cluster& cluster, const std::vector<SimJob>& jobs,
                               const SlurmModelSettings& settings);

}  // namespace bmas::plan
