#pragma once

// `bmas agent`: the root-owned broker on a node that runs a job's command inside its user's
// workspace. The batch script runs as the user, and LXD's socket is root-only; so the script
// runs `bmas agent exec -- CMD`, which connects to the agent's unix socket and hands over its
// stdin, stdout and stderr (SCM_RIGHTS). The agent checks the caller (SO_PEERCRED: its uid,
// and that its process sits in the cgroup of that very Slurm job, so it owns that running job
// on this node), then starts CMD as the user in the workspace's namespaces, in a cgroup of the
// job's own inside the workspace's (lxd/job_cgroup.h; it carries the job's CPUs and memory),
// and reports its exit status. Nothing the caller sends runs with privileges (daemon/
// agent_spawn.h). When the caller goes away (Slurm cancelled the job, or its time limit
// passed), the agent kills the job's cgroup. The epilog asks the agent to kill a job's
// processes, and kills the job's cgroup itself, before it unplugs the job's GPUs.
//
// Any local user may connect: every read and write has a deadline (`io_timeout`), a request
// has a size and depth bound (agent/agent_protocol.h), and each uid may hold at most
// `max_connections_per_uid` connections.
//
// The agent also runs the reconcile pass, at start and then periodically: any bmas GPU device
// whose job is gone is unplugged, and any process that uses a GPU outside the job it belongs
// to is killed (lxd/gpu_sweep.h). And it serves /metrics.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/result.h"
#include "gpu/dcgm_metrics.h"
#include "gpu/gpu_telemetry.h"

namespace bmas {

struct AgentOptions {
  Env* env = &Env::Default();  // time for the reconcile loop, telemetry and log limits
  std::string socket;      // the unix socket (mode 0666) users connect to
  std::string lxd_socket;  // LXD's
  std::chrono::milliseconds reconcile_interval{60'000};
  std::string metrics_host = "127.0.0.1";
  uint16_t metrics_port = 0;
  // With a certificate (PEM, and its key), the metrics listener serves TLS only: a TLS front
  // (slurm/tls_front.h) on metrics_host:metrics_port relays to the plain listener, which then
  // sits on 127.0.0.1 (agent/agent_listen.h decides; off loopback it must).
  std::string metrics_cert_pem;
  std::string metrics_key_pem;
  // What the metrics listener's /metrics and /gpus ask for: "Bearer <operator_secret>"
  // (common/operator_auth.h); "" refuses everyone. /health stays open.
  std::string operator_secret;
  // Deadline of each read and write on a connection (a request must arrive within it).
  std::chrono::milliseconds io_timeout{10'000};
  // Connections one uid may hold open at once (a running command holds one); root: no cap.
  int max_connections_per_uid = 64;
  // Whether Slurm job `id` is still running or about to (false when it is finished or unknown).
  // An error keeps a job's devices.
  std::function<Result<bool>(int64_t id)> job_alive;
  // The user a running job belongs to; an error when it is not running.
  std::function<Result<std::string>(int64_t id)> job_user;
  // A user's own usage from a unix time, as a JSON object (what `bmas usage` prints for them);
  // unset: the agent answers that it keeps none.
  std::function<Result<std::string>(const std::string& user, int64_t since)> usage;
  // A user's own idle-GPU records (warnings, cancellations) from a unix time, as a JSON object
  // (what `bmas jobs` shows them); unset: the agent answers that it keeps none.
  std::function<Result<std::string>(const std::string& user, int64_t since)> idle;
  // A user's own API keys: `action` list, create or revoke (`key_id`), answered as JSON.
  std::function<Result<std::string>(const std::string& user, const std::string& action,
                                    const std::string& key_id)>
      own_keys;
  // This node's GPUs (NVML), read every `telemetry_interval` and served on /metrics as the
  // DCGM exporter names them, with `node` as the Hostname label; unset: no GPU metrics.
  std::shared_ptr<GpuTelemetry> gpus;
  std::string node;
  std::chrono::milliseconds telemetry_interval{10'000};
  // The sweep of the host's GPUs on each reconcile pass (lxd/gpu_sweep.h): their device-node
  // dirs, each with the Slurm node it serves (none: no sweep of device nodes; NVML's
  // processes, on `node`'s GPUs, are swept when `gpus` is set), the uids of the node's own
  // services, and how to drain a node where a use outlives SIGKILL (unset: logged only).
  std::map<std::string, std::string> gpu_dirs;
  std::set<uid_t> service_uids;
  std::function<Result<void>(const std::string& node, const std::string& reason)> drain;
  // Called with each good sample and who holds each GPU (idle-GPU policing); may be unset.
  std::function<void(const std::vector<GpuReading>&, const std::map<int, GpuHolder>&,
                     const MigHolders&)>
      on_gpu_sample;
};

// The largest usage or idle-record reply the agent sends (the client reads at most 64 KiB).
constexpr size_t kMaxUsageReply = 60 * 1024;

// Serves until SIGINT or SIGTERM; prints "bmas agent: listening on URL" (the metrics URL) once
// its socket is ready. Returns the exit code.
int RunAgent(const AgentOptions& options);

// The client side, run by the batch script as the job's user: runs `argv` through the agent
// at `socket` for job $SLURM_JOB_ID, or directly (exec) when no agent runs or the user has no
// workspace. Returns the command's exit code (does not return when it execs).
int RunAgentExec(const std::string& socket, const std::vector<std::string>& argv);

// `bmas workspace exec|shell` through the agent: runs `argv` in the caller's own workspace as
// the caller, with this process's stdin, stdout and stderr (a terminal stays a terminal).
// Returns its exit code; 1 when no agent runs, 126 when the agent refuses or does not answer
// in time.
int RunAgentEnter(const std::string& socket, const std::vector<std::string>& argv);

// `bmas workspace shell` through the agent: the caller's login shell in their workspace, with
// a login environment; on a terminal, with a terminal of the workspace's own (job control,
// `tty`, window size changes). Returns as RunAgentEnter does.
int RunAgentShell(const std::string& socket);

// The epilog's call, as root: the agent kills job `job`'s cgroup in its workspace and waits
// until its commands are gone. Returns how many processes were killed; NotFound when no agent
// answers, Unavailable when it answers late or not at all.
Result<int> AgentKillJob(const std::string& socket, int64_t job);

// `bmas usage` for a user who cannot read the store: the agent answers with the caller's own
// usage from `since` (the JSON object AgentOptions::usage gives). NotFound when no agent
// answers; PermissionDenied with the agent's reason when it refuses.
Result<std::string> AgentUsage(const std::string& socket, int64_t since);

// `bmas jobs` for a user who cannot read the store: the agent answers with the caller's own
// idle-GPU records from `since` (AgentOptions::idle's JSON). Errors as AgentUsage's.
Result<std::string> AgentIdle(const std::string& socket, int64_t since);

// `bmas key list|create|revoke` for a user who cannot open the store: the agent answers for
// the caller's own keys (AgentOptions::own_keys' JSON). Errors as AgentUsage's.
Result<std::string> AgentOwnKeys(const std::string& socket, const std::string& action,
                                 const std::string& key_id);

// The hooks' report of how long binding ("bound") or releasing ("released") took, for the
// agent's /metrics. Best effort: nothing happens when no agent runs.
void AgentObserve(const std::string& socket, const std::string& op, double seconds);

// The agent's socket under a state dir: <state_dir>/run/agent.sock.
std::string AgentSocketPath(const std::string& state_dir);

// Whether /proc/<pid>/cgroup's text places the process in Slurm job `job` (a path component
// "job_<job>", as slurmd's cgroup plugins write it, v1 and v2).
bool InSlurmJobCgroup(const std::string& proc_cgroup, int64_t job);

}  // namespace bmas
