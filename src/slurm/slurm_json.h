#pragma once

// The JSON of slurmrestd's openapi/v0.0.38 (Slurm 22.05), as bmas structs: job submission
// rendering and the parsing of submit, jobs, nodes and ping responses and of their errors[].
// Pure functions: no I/O, no clock. JSON library types stay inside slurm_json.cc.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "slurm/job_state.h"

namespace bmas {

// What to run: the fields of `sbatch` that bmas uses. Zero / empty means "not given: Slurm's
// default". See RenderJobSubmit for which ones are required.
struct JobSpec {
  std::string name;
  std::string partition;
  int nodes = 0;           // exact node count (--nodes N)
  int tasks = 0;           // --ntasks
  int tasks_per_node = 0;  // --ntasks-per-node
  int gpus = 0;            // --gpus: per job
  int gpus_per_node = 0;   // --gpus-per-node
  int gpus_per_task = 0;   // --gpus-per-task
  std::string gpu_type;    // e.g. "h100": makes the three above typed ("h100:2")
  std::string gres;        // raw --gres, e.g. "gpu:2" or "gpu:h100:2"
  int cpus_per_task = 0;
  int64_t memory_per_cpu_mb = 0;
  int64_t memory_per_node_mb = 0;  // --mem; not with memory_per_cpu_mb
  int time_limit_minutes = 0;
  std::string cwd;          // required, absolute
  std::string stdout_path;  // Slurm patterns (%j, %u, %x, ...) allowed; "" = cwd/slurm-%j.out
  std::string stderr_path;  // "" = together with stdout
  std::map<std::string, std::string> environment;  // the job's whole environment; see Render
  std::string script;                              // required, starts with "#!"
  std::string reservation;
  std::string qos;
  std::string account;
  std::optional<bool> requeue;  // unset = the cluster's JobRequeue
  bool exclusive = false;       // whole nodes to this job
};

// Where a job's GPUs are: one entry per node, from gres_detail ("gpu:h100:2(IDX:0-1)").
struct NodeGpus {
  std::string node;
  std::string type;          // "" when the GRES is untyped
  std::vector<int> indexes;  // the physical indexes on that node
};

// A job as slurmrestd reports it.
struct JobInfo {
  int64_t id = 0;
  std::string name;
  std::string user;
  std::string partition;
  JobState state = JobState::kUnknown;
  std::string reason;  // state_reason: "None", "Resources", "NonZeroExitCode", ...
  std::vector<std::string> nodes;  // expanded from "oss[01-02]"; empty while pending
  int node_count = 0;
  int tasks = 0;
  int gpus = 0;                     // allocated, else requested (see ParseJobsResponse)
  std::string gpu_type;             // the GRES type it holds or asks for ("h100", "1g.10gb")
  std::vector<NodeGpus> gpu_alloc;  // only while the job holds them
  // A job on a shared GPU holds shards of it, not GPUs (gpus is 0): held, else requested.
  int shards = 0;
  std::vector<NodeGpus> shard_alloc;  // the shared GPU's gres index, only while held
  int restart_count = 0;
  int exit_code = 0;           // final states: the script's exit status, 128 + N if signal N
  int exit_signal = 0;         // N when the script was killed by signal N, else 0
  int64_t submit_time = 0;     // unix seconds
  int64_t eligible_time = 0;   // when it could first start (begin time, dependencies met)
  int64_t start_time = 0;      // 0 until the job started (Slurm's estimate is dropped)
  int64_t end_time = 0;        // 0 until the state is final (Slurm's estimate is dropped)
  int time_limit_minutes = 0;  // 0 = none
  std::string cwd;
  std::string stdout_path;  // with %j, %u, %x, %N, ... expanded; absolute when cwd is
  std::string stderr_path;  // as stdout_path; equals it when not given separately
  std::string batch_host;
  std::string reservation;
  std::string qos;
};

// A node as slurmrestd reports it.
struct NodeInfo {
  std::string name;
  std::string state;                     // lower case as given: idle, mixed, allocated, down...
  std::vector<std::string> state_flags;  // DRAIN, ...
  std::string address;
  std::string hostname;
  std::string reason;
  int cpus = 0;
  int alloc_cpus = 0;
  int64_t real_memory_mb = 0;
  int64_t alloc_memory_mb = 0;
  int gpus = 0;       // from gres
  int gpus_used = 0;  // from gres_used
  std::string gpu_type;
  std::vector<std::string> partitions;
};

// One entry of a response's errors[]. slurmrestd writes two shapes: {error_code, error} from
// the submit parser, {error_number, error, description, source} from the rest.
struct SlurmError {
  int number = 0;
  std::string error;
  std::string description;
  std::string source;
};

// The body of POST /slurm/v0.0.38/job/submit: {"job": {...}, "script": "..."}.
// Errors (InvalidArgument naming the field): no script or one without "#!", no cwd or a
// relative one, negative counts. slurmrestd refuses an empty environment, so with none given
// the job gets PATH=/usr/local/bin:/usr/bin:/bin; batch jobs otherwise inherit nothing.
// requeue=false is sent as "no_requeue": v0.0.38 reads "requeue" as a flag and ignores false.
Result<std::string> RenderJobSubmit(const JobSpec& spec);

// errors[] of any response; empty when it has none or the body is not JSON.
std::vector<SlurmError> ParseErrors(std::string_view body);

// The Error for a failed response, or nullopt when `http_status` is 2xx and errors[] empty.
// `what` says what was attempted ("submit a job"); `user` is the X-SLURM-USER-NAME sent.
// Codes: 401/403 and Slurm's access errors -> kPermissionDenied; unknown job -> kNotFound;
// bad requests and requests Slurm cannot satisfy -> kInvalidArgument; slurmctld unreachable
// -> kUnavailable. slurmrestd reports a JWT that slurmctld rejected (expired, wrong key, or
// minted for another user) exactly as it reports a slurmctld that is down: "Unspecified
// error" (-1). That is kUnavailable, and the message names both causes.
std::optional<Error> ErrorFromResponse(int http_status, std::string_view body,
                                       std::string_view what, std::string_view user);

// job_id of a submit response.
Result<int64_t> ParseSubmitResponse(std::string_view body);

// jobs[] of GET /jobs or GET /job/{id}. gpus: the sum over gres_detail while the job holds
// GPUs, else "gres/gpu=N" in tres_alloc_str (with accounting), else what was requested
// (tres_per_job, tres_per_node x nodes, tres_per_task x tasks).
Result<std::vector<JobInfo>> ParseJobsResponse(std::string_view body);

// jobs[] of slurmdbd's GET /slurmdb/v0.0.38/jobs (openapi/dbv0.0.38): id, name, user,
// partition, state (state.current), nodes, times, GPUs allocated (gres/gpu in
// tres.allocated) and exit code. Fields only slurmctld knows stay empty.
Result<std::vector<JobInfo>> ParseDbJobsResponse(std::string_view body);

// nodes[] of GET /nodes.
Result<std::vector<NodeInfo>> ParseNodesResponse(std::string_view body);

// The Slurm release ("22.05.8") from GET /ping; an error when a controller is not UP.
Result<std::string> ParsePingResponse(std::string_view body);

// slurmctld's clock (unix seconds) when it answered GET /diag: statistics.req_time.
Result<int64_t> ParseDiagResponse(std::string_view body);

// ---- Pieces, exposed for tests and callers ----

// Slurm's name of a job state ("RUNNING", "OUT_OF_MEMORY") as a JobState; kUnknown for a name
// this version does not know. The one place bmas reads Slurm's names.
JobState ParseJobState(std::string_view name);

// GPUs in one GRES string: "gpu:h100:4(IDX:0-3)", "gpu:2", "gres:gpu:2", "gres/gpu:h100=2",
// comma-separated lists; other GRES are ignored. 0 when there is no GPU.
int CountGpusInGres(std::string_view gres);

// The same for the gres called `name` ("shard": "shard:3(IDX:2)" holds 3).
int CountGresIn(std::string_view gres, std::string_view name);

// The indexes in "gpu:h100:2(IDX:0-1,3)": {0, 1, 3}; empty for "IDX:N/A" or no IDX.
std::vector<int> ParseGresIndexes(std::string_view gres_detail);

// A Slurm file name pattern with the job's values: %% %j %A %a %u %x %N %n %t, with optional
// zero padding ("%4j"). A relative result is made absolute against job.cwd.
std::string ExpandFilenamePattern(std::string_view pattern, const JobInfo& job);

}  // namespace bmas
