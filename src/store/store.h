#pragma once

#include <sys/types.h>

// The state store: users (a bmas user is a name in this store, and the same name is the
// user's Unix account on the cluster), their limits and their API keys.
//
// A Store is used from one thread at a time; several processes may open the same store (a
// running gateway and `bmas user ...` share one SQLite file in WAL mode).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/result.h"
#include "core/replica_state.h"

namespace bmas {

// The limits of a user's workspace (their LXD container). An unset one falls back to the
// config's [workspace] default.
struct WorkspaceLimits {
  std::optional<int64_t> cpus;
  std::optional<std::string> memory;  // "4GiB", "512MB", "50%"
  std::optional<int64_t> processes;
  std::optional<std::string> disk;    // "20GiB"
};

// A user's share and limits. An unset limit is unlimited.
struct UserLimits {
  double weight = 1.0;  // share of the fast path under contention
  std::optional<int64_t> rpm;             // requests per minute
  std::optional<int64_t> tpm;             // tokens per minute
  std::optional<int64_t> tokens_per_day;
  std::optional<int64_t> max_concurrent;  // requests in flight
  WorkspaceLimits workspace;
};

struct User {
  std::string name;
  UserLimits limits;
  int64_t created_at = 0;  // unix seconds
  bool admin = false;      // sees every user's details on the dashboard
};

// Changes to a user: only the fields that are set change. `clear` lists limits to unset.
struct UserChange {
  std::optional<double> weight;
  std::optional<int64_t> rpm, tpm, tokens_per_day, max_concurrent;
  WorkspaceLimits workspace;
  std::optional<bool> admin;
  // Of "rpm", "tpm", "tokens_per_day", "max_concurrent", "cpus", "memory", "processes", "disk".
  std::vector<std::string> clear;
};

// Why `limits` cannot be a workspace's ("" when they can): a count below 1, a size LXD would
// not take.
std::string CheckWorkspaceLimits(const WorkspaceLimits& limits);

// An inference deployment: one model served by replicas that run as Slurm jobs
// (`bmas inference deploy`). The controller in `bmas up` keeps between min and max replicas.
// One floor of a deployment's weekly timetable (autoscale/timetable.h reads, checks and applies
// it): on `days` (bit 0 = Monday .. bit 6 = Sunday), from `from_minute` to `to_minute` (minutes
// after the site's local midnight, from < to <= 1440), keep at least `min` replicas.
struct TimetableFloor {
  unsigned days = 0;
  int from_minute = 0;
  int to_minute = 0;
  int min = 0;

  bool operator==(const TimetableFloor&) const = default;
};

struct Deployment {
  std::string model;
  int min_replicas = 1;       // a floor that training never preempts; may be 0
  int max_replicas = 1;
  int gpus_per_replica = 1;
  std::string profile;        // the engine's GPU profile; "" = its default
  int ttft_slo_ms = 0;        // time to first token the autoscaler keeps p95 under; 0 = none
  std::string command;        // the replica's command template; "" = `bmas engine`
  int64_t updated_at = 0;     // unix seconds
  // A MIG profile ("3g.40gb"): each replica runs on gpus_per_replica slices of it rather than on
  // whole GPUs; "" = whole GPUs.
  std::string gpu_slice;
  std::vector<TimetableFloor> timetable;  // floors above min_replicas at times of the week
};

// A replica as the controller last saw it: a Slurm job and where it listens.
struct ReplicaRecord {
  int64_t job_id = 0;
  std::string model;
  ReplicaState state = ReplicaState::kPending;  // stored by its name
  std::string node;   // "" while pending
  int port = 0;
  std::string url;    // "http://ADDR:PORT"; "" while pending
  int gpus = 0;
  bool floor = false;  // one of the deployment's min replicas (not preemptible)
  int64_t since = 0;   // when it entered `state`, unix seconds
};

// An API key as listed: never the key itself.
struct KeyInfo {
  std::string id;
  std::string user;
  int64_t created_at = 0;
  std::optional<int64_t> revoked_at;
};

// Metered tokens of one (minute, user, model, backend), to add to the store.
struct UsageDelta {
  int64_t minute = 0;  // unix seconds / 60
  std::string user, model, backend;
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// Usage summed over a period, one row per (user, model, backend).
struct UsageRow {
  std::string user, model, backend;
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// A finished Slurm job, as the Slurm monitor records it for accounting.
struct JobRecord {
  std::string cluster;  // Slurm's ClusterName: job ids are unique only within a cluster
  int64_t id = 0;
  std::string user, name, partition;
  std::string state;   // final: COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
  int gpus = 0;        // held while it ran
  std::vector<std::string> nodes;
  int64_t submit_time = 0, start_time = 0, end_time = 0;  // unix seconds; start 0 = never ran
  int exit_code = 0;
};

// What idle-GPU policing did to a job (idle/idle_policy.h): a warning or a cancellation.
struct IdleRecord {
  int64_t job = 0;
  std::string user, partition;
  std::string kind;  // "warn" or "cancel"
  int64_t at = 0;          // unix seconds
  int64_t idle_since = 0;  // unix seconds
  int gpus = 0;
  int64_t wasted_gpu_seconds = 0;  // GPUs x idle time when it was done
  std::string reason;
};

// GPU time summed over finished jobs, one row per user.
struct JobUsageRow {
  std::string user;
  int64_t jobs = 0;
  int64_t gpu_seconds = 0;  // sum of gpus x (end - start)
};

// One gateway's report for token fairness across gateways (gateway/fair_share.h): what it has
// served each user and who waits on it, as a body the store keeps but does not read.
struct GatewayReport {
  std::string gateway;  // the gateway's instance id
  int64_t at_ms = 0;    // the writer's unix time in ms; a new value on each put
  std::string body;
  bool operator==(const GatewayReport&) const = default;
};

// The answer to Store::Reserve.
struct Reservation {
  bool admitted = false;
  // When refused: the limit that refused it ("rpm", "tpm", "tokens_per_day", "max_concurrent"),
  // or "user" for a user the store does not have.
  std::string refused_by;
};

class Store {
 public:
  virtual ~Store() = default;

  // kInvalidArgument for a name that is not a valid account name; kAlreadyExists.
  virtual Result<void> AddUser(const std::string& name, const UserLimits& limits) = 0;
  virtual Result<void> ChangeUser(const std::string& name, const UserChange& change) = 0;
  // Removes the user and revokes their keys; usage already recorded stays.
  virtual Result<void> RemoveUser(const std::string& name) = 0;
  virtual Result<std::optional<User>> FindUser(const std::string& name) = 0;
  virtual Result<std::vector<User>> ListUsers() = 0;

  // Creates a key for `user` and returns it; only a hash of its secret is stored, so this is
  // the only time the key can be seen.
  virtual Result<std::string> CreateKey(const std::string& user) = 0;
  virtual Result<void> RevokeKey(const std::string& key_id) = 0;
  virtual Result<std::vector<KeyInfo>> ListKeys(const std::string& user) = 0;
  // The user a presented key belongs to, or nullopt for an unknown or revoked key. The
  // secret is compared in constant time.
  virtual Result<std::optional<std::string>> Authenticate(const std::string& key) = 0;

  // Adds metered usage, all deltas in one transaction.
  virtual Result<void> RecordUsage(const std::vector<UsageDelta>& deltas) = 0;
  // Usage since `since_unix` (inclusive, to the minute), of one user or of all.
  virtual Result<std::vector<UsageRow>> QueryUsage(const std::optional<std::string>& user,
                                                   int64_t since_unix) = 0;

  // Adds finished jobs; one already recorded (same cluster, id and start) is left as it is.
  // Returns how many were new.
  virtual Result<int> RecordJobs(const std::vector<JobRecord>& jobs) = 0;
  // GPU time of jobs that ended at or after `since_unix`, of one user or of all.
  virtual Result<std::vector<JobUsageRow>> QueryJobUsage(const std::optional<std::string>& user,
                                                         int64_t since_unix) = 0;

  // The gateway's backends (base URLs), so that a running gateway and `bmas gateway backend`
  // share them.
  // Idle-GPU policing's actions: each (job, kind, idle stretch) once; newest first.
  virtual Result<void> RecordIdle(const IdleRecord& record) = 0;
  virtual Result<std::vector<IdleRecord>> QueryIdle(const std::optional<std::string>& user,
                                                    int64_t since_unix) = 0;

  virtual Result<void> AddBackend(const std::string& url) = 0;  // kAlreadyExists
  virtual Result<void> RemoveBackend(const std::string& url) = 0;  // kNotFound
  virtual Result<std::vector<std::string>> ListBackends() = 0;

  // Inference deployments. PutDeployment creates or replaces the one for its model.
  virtual Result<void> PutDeployment(const Deployment& deployment) = 0;
  virtual Result<void> RemoveDeployment(const std::string& model) = 0;  // kNotFound
  virtual Result<std::vector<Deployment>> ListDeployments() = 0;
  // The controller's view of every replica, replaced whole (in one transaction) on each pass,
  // and what the gateway routes to.
  virtual Result<void> ReplaceReplicas(const std::vector<ReplicaRecord>& replicas) = 0;
  virtual Result<std::vector<ReplicaRecord>> ListReplicas() = 0;

  // Shared limits across gateways. Reserves `tokens` (the request's worst case: prompt +
  // max_tokens) for request `request_id` of `user` at `now` (unix seconds) when the user's
  // limits allow one more: RPM and TPM over the 60 s up to `now`, tokens_per_day over the UTC
  // day, max_concurrent over reservations not yet settled. It checks and records in one
  // transaction (the user's row locked), so gateways sharing a store never admit past a limit
  // together: each admitted reservation fits on top of every earlier one. A reservation counts
  // its worst case until settled, then what was used; one left unsettled for an hour no longer
  // counts as in flight (its gateway died). An id already admitted answers admitted again and
  // counts nothing. A refused request records nothing.
  virtual Result<Reservation> Reserve(const std::string& request_id, const std::string& user,
                                      int64_t tokens, int64_t now) = 0;
  // Settles request `request_id` to the tokens it used. Idempotent: settling again changes
  // nothing. kNotFound for an id that holds no reservation.
  virtual Result<void> Settle(const std::string& request_id, int64_t used_tokens) = 0;

  // Token fairness across gateways. PutGatewayReport replaces the report of its gateway and
  // deletes every report whose at_ms is older than report.at_ms - kKeptGatewayReportMs (its
  // gateway stopped). ListGatewayReports returns every report, by gateway.
  virtual Result<void> PutGatewayReport(const GatewayReport& report) = 0;
  virtual Result<std::vector<GatewayReport>> ListGatewayReports() = 0;

  virtual int schema_version() const = 0;
};

using StorePtr = std::unique_ptr<Store>;

// Opens (creating and migrating as needed) the SQLite store at `path`. Rows are stamped with
// `env`'s wall time; it must outlive the store.
Result<StorePtr> OpenSqliteStore(const std::string& path, Env& env = Env::Default());

// Whether `name` is a valid Unix account name (what bmas accepts as a user name).
bool IsValidUserName(const std::string& name);

// The store file under a state dir: <state_dir>/store/bmas.db. The store holds every user's
// limits, usage, job history and key hashes, so its directory is 0700 and the file 0600, owned by
// root or by the service account the gateway runs as; users see their own part through the agent
// (`bmas usage`) and the gateway (`GET /v1/usage`).
std::string StorePath(const std::string& state_dir);

// Root's `bmas up`: makes the store's directory and gives it, and the store's files, to
// `uid`:`gid`, the account the gateway runs as.
Result<void> HandStoreTo(const std::string& state_dir, uid_t uid, gid_t gid);

}  // namespace bmas
