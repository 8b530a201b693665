#pragma once

// One pass of the inference controller, as a pure function: the deployments, the replica jobs
// Slurm reports, what the gateway sees of each replica, and the time go in; the jobs to submit
// and cancel and the replica rows for the store come out. The daemon (daemon/inference_
// controller.h) runs it every 2 s against the real Slurm, gateway and store; a simulator can
// run it in virtual time.
//
// Replicas are Slurm jobs named "bmas-replica:PORT:MODEL" (ReplicaJobName). A deployment's
// first `min` replicas go to the floor partition, which nothing preempts; the others to the
// inference partition, which training preempts (Slurm requeues them, and they come back when
// GPUs free up). A replica's state: pending (job not running), starting (running, the gateway's
// health check has not passed), ready, draining (chosen to go: the gateway stops routing to it,
// and its job is cancelled once it has nothing in flight, or after `drain_timeout`).
//
// A replica within `replace_margin` of its job's time limit is counted by the policy as
// leaving, so a replacement is submitted while it still serves.
//
// Sleep (vLLM's sleep mode, level 1; only for deployments that run `bmas engine`, see
// UsesSleepMode): when the policy drains a ready replica above the floor and no other job waits
// for GPUs the replicas' partition could give (GpuDemandWaiting), the replica is drained in the
// gateway as for a cancel, and once the gateway has nothing in flight on it, it is put to sleep
// (POST /sleep?level=1) instead of cancelled: its job keeps running and holding its GPU, the
// gateway is not given it (state "sleeping"). Nothing is in flight when it sleeps, so vLLM's
// sleep aborts no request. When the policy wants more replicas, sleeping ones are woken
// (POST /wake_up, which answers once awake) before any job is submitted; a woken replica is
// "starting" until the gateway's health check passes. A sleeping replica is never a floor one,
// and stays preemptible: training takes its GPU as it takes an awake one's (Slurm requeues the
// job, which then starts over awake). While a job waits for such GPUs, no replica is put to
// sleep and sleeping ones are cancelled.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autoscale/autoscaler.h"
#include "autoscale/timetable.h"
#include "common/clock.h"
#include "slurm/slurm_json.h"
#include "store/store.h"

namespace bmas::autoscale {

struct ControllerSettings {
  std::string partition = "inference";
  std::string floor_partition = "inference_floor";
  int port_base = 18100;  // replicas listen on the lowest free port from here
  // How the gateways reach replicas: "http", or "https" where replicas serve TLS with their
  // node's replica certificate (replicas on other machines).
  std::string replica_scheme = "http";
  int port_count = 1000;
  Duration drain_timeout{120};
  Duration replace_margin{300};
  int max_in_flight_per_replica = 64;  // the gateway's admission limit when it reports none
  // The policy's scale-down pace (AutoscaleSettings).
  Duration scale_down_idle{300};
  Duration scale_down_step{60};
  Duration load_window{60};    // AutoscaleSettings::load_window
  Duration breach_settle{30};  // AutoscaleSettings::breach_settle
  // Deployments' timetable floors (autoscale/timetable.h): their times are local to `timezone`,
  // and each is kept from `timetable_lead` before its start to its end. While one is in force
  // it raises the deployment's min: its replicas go to the floor partition; when it ends they
  // are ordinary replicas above the floor, drained by the idle rules.
  TimeZone timezone;
  Duration timetable_lead = kDefaultTimetableLead;
};

// What the gateway reports of one backend (its /load).
struct BackendView {
  bool healthy = false;
  bool draining = false;
  int in_flight = 0;
  int capacity = 0;
};

struct ControllerInput {
  std::vector<Deployment> deployments;
  std::vector<JobInfo> jobs;                     // the service account's jobs, any name
  std::map<std::string, std::string> node_addr;  // node name -> address
  bool gateway_reachable = false;  // at least one gateway's /load was read
  bool every_gateway_reached = false;  // ... and every one's: only then is a drain finished
  // Nodes Slurm drains (`bmas node drain`, an admin, the agent): their replicas move off, each
  // drained in the gateway once the deployment has no replacement still starting.
  std::set<std::string> drained_nodes;
  std::map<std::string, BackendView> backends;   // by URL
  std::map<std::string, int> queued;             // per model
  std::map<std::string, double> oldest_wait_s;   // per model: the oldest queued request's wait
  std::optional<double> ttft_p95_ms;             // the gateway's, over the last pass or so
  // Set (to a description of the job, for logs) when another job waits for GPUs the replicas'
  // partition could give it (GpuDemandWaiting): then replicas are cancelled, not put to sleep.
  std::optional<std::string> gpus_wanted;
};

struct ReplicaSubmit {
  std::string model;
  int port = 0;
  bool floor = false;
};

// A replica to put to sleep or wake: its job and the URL of its server.
struct ReplicaCall {
  int64_t job = 0;
  std::string model;
  std::string url;
  int port = 0;
};

struct ControllerPlan {
  std::vector<ReplicaSubmit> submits;
  std::vector<int64_t> cancels;
  // POST /sleep?level=1 to each (nothing in flight on them); on failure cancel the job and
  // ForgetSleep it.
  std::vector<ReplicaCall> sleeps;
  // POST /wake_up to each, before the replicas are stored; on failure cancel the job and leave
  // it out of the stored replicas.
  std::vector<ReplicaCall> wakes;
  std::vector<ReplicaRecord> replicas;  // for the store, and so for the gateway
  std::vector<std::string> log;         // what changed and why
};

// Kept by the caller between passes.
struct ControllerMemory {
  std::map<std::string, AutoscaleMemory> models;
  std::map<int64_t, TimePoint> draining;     // job -> since
  std::map<int64_t, TimePoint> ready_since;  // job -> when the gateway first saw it healthy
  std::map<std::string, int> last_target;    // model -> target, to log changes
  std::map<std::string, int> last_min;       // model -> min with its timetable, to log changes
  // Replica jobs that failed (not preempted, not cancelled): submissions of that model wait
  // 5 s, doubling to 5 min, so a replica that cannot start is not resubmitted every pass.
  std::set<int64_t> failed_seen;
  std::map<std::string, int> failures;        // model -> failures in a row
  std::map<std::string, TimePoint> retry_at;  // model -> no submission before
  // Sleep mode: replicas draining to be put to sleep, sleeping ones (since when, and the start
  // time of the job run that slept: a requeued job starts over awake), and woken ones (when).
  struct Slept {
    TimePoint since{0};
    int64_t start_time = 0;
  };
  std::set<int64_t> sleep_after_drain;
  std::map<int64_t, Slept> sleeping;
  std::map<int64_t, TimePoint> woken;
};

// "bmas-replica:PORT:MODEL".
std::string ReplicaJobName(const std::string& model, int port);
// The model and port of a replica job's name; nullopt for another job.
struct ReplicaName {
  std::string model;
  int port = 0;
};
std::optional<ReplicaName> ParseReplicaJobName(std::string_view name);

// Whether a Slurm job state still holds or waits for GPUs (not ended, not ending).
// A failed replica job is one whose state IsFailure (slurm/job_state.h).
bool IsActiveJobState(JobState state);

// Whether a deployment's replicas may be put to sleep: those that run `bmas engine` (the
// default command, or one that starts with "{bmas} engine"), whose replica jobs get
// VLLM_SERVER_DEV_MODE=1. A real vLLM command never is: vLLM's dev-mode endpoints take no API
// key, so they would be open to anyone who reaches the replica's port.
bool UsesSleepMode(const Deployment& d);

// The first job that waits for GPUs the replica partition `partition` could give it, described
// for a log ("job 42 of ada in training"); nullopt when none does. A job waits when it is
// pending for a reason other than a dependency, a begin time or a hold; it wants GPUs when it
// asks for GPUs or GPU shards; it could be given the replicas' GPUs when one of its partitions
// shares a node with `partition` (`nodes`' partitions). Replica jobs (ParseReplicaJobName) never
// count.
std::optional<std::string> GpuDemandWaiting(const std::vector<JobInfo>& jobs,
                                            const std::vector<NodeInfo>& nodes,
                                            const std::string& partition);

// A replica that could not be put to sleep: the daemon cancels it instead.
void ForgetSleep(ControllerMemory& memory, int64_t job);

ControllerPlan PlanPass(const ControllerSettings& settings, const ControllerInput& input,
                        TimePoint now, ControllerMemory& memory);

}  // namespace bmas::autoscale
