#pragma once

// A scenario for `bmas plan`: the cluster, who uses it and how, the policies that share it, the
// objectives it must meet and what it costs. Read from a TOML file; every key is optional and
// examples/plan-300x48.toml documents each one with where its number comes from. The defaults
// are an empty scenario: no cluster (the command line gives one), no users, no load.
//
// A key bmas does not know, a value of the wrong type or out of range, and an entry that
// contradicts the cluster are ConfigErrors "<file>:<line>: <key>: <what is wrong and the fix>".
//
// Simulated time 0 is a Monday at 00:00; weekly windows repeat every 7 days from there.
// Cohort members are named "<cohort>-<i>", i = 1 .. count (MemberName).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autoscale/autoscaler.h"
#include "store/store.h"
#include "plan/slurm_model.h"
#include "core/cluster.h"
#include "plan/trace.h"

namespace bmas::plan {

inline constexpr double kWeekSeconds = 7 * 24 * 3600;

// Hours on some days of each week, e.g. Tuesdays and Thursdays from 14:00 to 16:00. A window
// ends by midnight: one that crosses it is written as two.
struct WeeklyWindow {
  std::vector<int> days = {0, 1, 2, 3, 4, 5, 6};  // 0 = Monday .. 6 = Sunday; ascending
  double start_hour = 0;                          // 0 <= start_hour < end_hour <= 24
  double end_hour = 24;

  // Whether `t` (simulated seconds; 0 = Monday 00:00) falls in the window.
  bool Contains(double t) const;
};

// Part of a cohort at work: in `window`, `active_fraction` of its members work. Where windows
// overlap, the largest fraction holds.
struct ActivityWindow {
  WeeklyWindow window;
  double active_fraction = 1;
};

// How a member at work uses the inference gateway: chat sessions of a few requests each. The
// figures are means; the simulator draws around them.
struct InferenceBehaviour {
  double sessions_per_hour = 1;     // sessions a member at work starts per hour; 0 = none
  double requests_per_session = 4;  // requests of one session
  double think_time_s = 30;         // from an answer's end to the session's next request
  int prompt_tokens = 200;          // new tokens a request brings (the question)
  int output_tokens = 300;          // tokens generated per request
  // Prompt and output lengths are drawn uniformly within +-length_spread of their means; 0:
  // exactly the means (as a benchmark's load generator sends).
  double length_spread = 0.5;
  // The course's system prompt, sent first in every request; 0 = none. The cohort's members
  // share `system_prompts` of them (one per course), which prefix caching can keep.
  int system_prompt_tokens = 0;
  int system_prompts = 1;
  // Each request also carries the session's earlier questions and answers, as chat clients
  // send them.
  bool carry_history = true;
};

// A share of a cohort's jobs that ask for `gpus` GPUs. A job that fits in MIG slices
// (`mig_profile`, e.g. "1g.10gb": a notebook's exercise) asks for `gpus` of them where its
// partition has them, and runs mig_duration_factor times as long there as on whole GPUs; where
// it has none, it asks for whole GPUs.
struct GpuShare {
  int gpus = 1;
  double share = 1;
  std::string mig_profile;  // "" = whole GPUs only
  double mig_duration_factor = 1;
};

// The jobs a cohort submits while its members work. Durations are log-normal with the given
// median and 90th percentile.
struct TrainingBehaviour {
  double jobs_per_week = 0;                           // per member; 0 = none
  std::vector<GpuShare> gpus_per_job = {GpuShare{}};  // shares add up to 1
  double duration_median_s = 655;
  double duration_p90_s = 7389;
  double time_limit_s = 0;  // what the jobs ask for (--time); 0 = the partition's default_time
  std::string partition;    // "" = the cluster's default partition
};

struct Cohort {
  std::string name;  // lower-case letters, digits, '-' and '_'; unique
  int count = 1;
  // Default: weekdays 09:00-17:00, every member.
  std::vector<ActivityWindow> hours = {
      ActivityWindow{.window = {.days = {0, 1, 2, 3, 4}, .start_hour = 9, .end_hour = 17}}};
  InferenceBehaviour inference;
  TrainingBehaviour training;
  int line = 0;  // where its [[cohorts]] entry starts, for errors
};

// "<cohort>-<i>", i from 1.
std::string MemberName(std::string_view cohort, int i);

// A job trace replayed instead of every cohort's training model.
struct TraceSettings {
  std::string file;  // resolved against the scenario's folder; "" = none
  TraceFormat format = TraceFormat::kCsv;
  // Trace time that becomes simulated time 0; jobs submitted before it are left out.
  double start_s = 0;

  bool operator==(const TraceSettings&) const = default;
};

struct SimulationSettings {
  double days = 7;
  uint64_t seed = 1;  // `bmas plan --seed` overrides it

  bool operator==(const SimulationSettings&) const = default;
};

// The model every inference replica serves.
struct EngineChoice {
  std::string model = "meta-llama/Llama-3.1-8B-Instruct";
  std::string profile = "llama-3.1-8b-h100";  // a `bmas engine` profile
  std::string profiles_file;  // extra profiles, resolved against the scenario's folder
  int gpus_per_replica = 1;   // on one node
  int line = 0;
};

// Research mode: from `window`, `users` own `nodes` (Slurm's bmas_research reservation).
struct ResearchWindow {
  std::vector<std::string> users;
  std::vector<std::string> nodes;  // expanded from a host list
  WeeklyWindow window;
  int line = 0;
};

// The gateway's and the autoscaler's settings, with the names they have in bmas.toml and
// autoscale::AutoscaleSettings.
struct Policies {
  std::string fairness = "vtc";         // gateway.fairness
  std::string routing = "cache_aware";  // gateway.routing
  double reserve_fraction = 0.25;       // gateway.reserve_fraction
  double queue_timeout_s = 30;          // gateway.queue_timeout_s
  std::string inference_partition = "inference";
  std::string floor_partition = "inference_floor";
  // min_replicas is the inference floor: replicas in floor_partition, never preempted.
  // max_replicas 0 (the default) becomes as many as the cluster's GPUs hold: AttachCluster
  // sets it, and again for another cluster, while `fill_max_replicas` says it was 0.
  autoscale::AutoscaleSettings autoscale{.min_replicas = 1, .max_replicas = 0};
  bool fill_max_replicas = true;
  // [[policies.timetable]]: the deployment's timetable floors, as `bmas inference deploy
  // --timetable` sets them (autoscale/timetable.h; the simulated week's times, Monday 00:00 =
  // 0), each started `timetable_lead_s` early, as the controller does.
  std::vector<TimetableFloor> timetable;
  double timetable_lead_s = 120;
  std::vector<ResearchWindow> research;
  // [policies.mig]: how the layouts of the inventory's flexible GPUs follow demand.
  RelayoutModelSettings relayout;
  int line = 0;
};

// What the cluster must achieve. An hour meets the objectives when the TTFT of the requests
// sent in it and the wait of the jobs submitted in it are within them; the cluster meets them
// when `hours_met_fraction` of the hours with load do.
struct Slo {
  double ttft_p95_s = 1;
  double ttft_p99_s = 10;
  double job_wait_p95_s = 1800;
  double hours_met_fraction = 0.95;

  bool operator==(const Slo&) const = default;
};

// Prices in `currency`.
struct Costs {
  std::string currency = "USD";
  double node_price = 150000;
  double amortisation_years = 5;
  double node_power_kw = 5.1;
  double pue = 1.58;
  double price_per_kwh = 0.13;
  double staff_per_year = 120000;
  double cloud_on_demand_per_gpu_hour = 3.5;
  double cloud_reserved_per_gpu_hour = 1.84;
  // The alternative of one GPU per user: its price (amortised over the same years) and its
  // draw while its owner works.
  double gpu_per_user_price = 3500;
  double gpu_per_user_power_kw = 0.6;

  bool operator==(const Costs&) const = default;
};

struct Scenario {
  std::string source;              // the file read; "" = defaults
  std::string cluster_file;        // resolved against the scenario's folder; "" = none
  std::optional<Cluster> cluster;  // read from cluster_file, or given by AttachCluster
  SimulationSettings simulation;
  EngineChoice engine;
  std::vector<Cohort> cohorts;
  TraceSettings trace;
  Policies policies;
  Slo slo;
  Costs costs;
};

// Reads the scenario file `path` and the cluster inventory it names; "" gives the defaults.
// `cluster_file`, when not empty, is read instead of the scenario's own (`bmas plan
// --cluster`; a relative path is the caller's, not the scenario's). Throws ConfigError naming
// the file, the line and the key.
Scenario LoadScenario(const std::string& path, const std::string& cluster_file = "");

// The same from TOML text; `source` names it in errors, and relative paths in it are taken
// from its folder.
Scenario ParseScenario(std::string_view toml_text, const std::string& source,
                       const std::string& cluster_file = "");

// Sets the scenario's cluster (the one it names, or `bmas plan --cluster`) and checks the
// scenario against it: partitions and nodes it names exist, jobs and replicas fit; a
// max_replicas of 0 becomes the cluster's GPUs over gpus_per_replica. May be called again with
// another cluster (a sweep over cluster sizes). Throws ConfigError naming the scenario's key.
void AttachCluster(Scenario& scenario, Cluster cluster);

}  // namespace bmas::plan
