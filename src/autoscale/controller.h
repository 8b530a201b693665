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
  bool gateway_reachable = false;
  std::map<std::string, BackendView> backends;   // by URL
  std::map<std::string, int> queued;             // per model
  std::map<std::string, double> oldest_wait_s;   // per model: the oldest queued request's wait
  std::optional<double> ttft_p95_ms;             // the gateway's, over the last pass or so
};

struct ReplicaSubmit {
  std::string model;
  int port = 0;
  bool floor = false;
};

struct ControllerPlan {
  std::vector<ReplicaSubmit> submits;
  std::vector<int64_t> cancels;
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

ControllerPlan PlanPass(const ControllerSettings& settings, const ControllerInput& input,
                        TimePoint now, ControllerMemory& memory);

}  // namespace bmas::autoscale
