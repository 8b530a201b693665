#pragma once

// `bmas inference controller`: the control loop that keeps each inference deployment's
// replicas running as Slurm jobs. Every interval (2 s) it reads the deployments from the store,
// the replica jobs and nodes from Slurm, and each replica's health and load from the gateway's
// /load; runs one pass of the pure controller (autoscale/controller.h); submits and cancels
// jobs; puts idle replicas to sleep and wakes them (POST /sleep?level=1, POST /wake_up on the
// replica, with its API key); and writes the replicas to the store, where the gateway picks
// them up within a second.
// `bmas up` runs it as the service account, whose jobs the replicas are.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "autoscale/controller.h"
#include "common/result.h"
#include "slurm/rest_client.h"
#include "store/store.h"

namespace bmas {

struct InferenceControllerOptions {
  autoscale::ControllerSettings settings;
  std::chrono::milliseconds interval{2000};
  // "host:port" of each gateway's operator listener (/load): every gateway that routes to the
  // deployments' replicas (they share a store).
  std::vector<std::string> gateways;
  std::string operator_secret;  // what that listener asks for (daemon/secret.h). A secret.
  std::string user;       // the Unix account the replica jobs run as (whose jobs are read)
  std::string bmas;       // the bmas binary replicas run ({bmas})
  std::string listen_host = "0.0.0.0";  // what replicas bind ({host})
  std::string replica_dir;              // the jobs' working directory and logs
  std::map<std::string, std::string> replica_env;  // more environment for the replicas
  // The backend secret shared with the gateway: each replica gets its own key in VLLM_API_KEY,
  // DeriveBackendKey(backend_secret, its port), and never this. "" = no key.
  std::string backend_secret;
  bool cancel_on_exit = false;          // a graceful stop cancels every replica job
  // Replicas serve TLS with this certificate and key, paths on the nodes (the join's
  // <config_dir>/replica.crt and replica.key): settings.replica_scheme is then "https", and the
  // controller checks them against `replica_ca` (the replica CA) when it puts them to sleep or
  // wakes them. "" = plain HTTP (replicas on this machine).
  std::string replica_tls_cert;
  std::string replica_tls_key;
  std::string replica_ca;
};

// A connection to Slurm as `user`, made again when a call fails (tokens expire).
using SlurmConnector = std::function<Result<std::unique_ptr<SlurmApi>>()>;
// Each gateway's /load body, in the order of InferenceControllerOptions::gateways.
using LoadReader = std::function<std::vector<Result<std::string>>()>;
// One request to a replica's server: `method` `path` at `url` ("http://host:port", or
// "https://host:port" checked against the CA file given to HttpReplicaCaller) with
// `key` as its bearer token ("" = none); the body of a 200, else an error naming the status.
using ReplicaCaller =
    std::function<Result<std::string>(const std::string& method, const std::string& url,
                                      const std::string& path, const std::string& key)>;
// The real one: HTTP, or HTTPS checked against `ca_file`, waiting at most `timeout` for the
// answer.
ReplicaCaller HttpReplicaCaller(std::chrono::milliseconds timeout, std::string ca_file = "");

class InferenceController {
 public:
  InferenceController(InferenceControllerOptions options, SlurmConnector connect, Store& store,
                      LoadReader load, std::function<double()> unix_now,
                      ReplicaCaller call = nullptr);

  // One pass; an error names what could not be read (nothing is changed then).
  Result<void> RunOnce();
  // Cancels every replica job of the service account (a graceful stop of `bmas up`).
  void CancelAll();

 private:
  Result<SlurmApi*> Slurm();
  std::string KeyFor(int port) const;
  // On the first pass: replicas asleep from before this controller started are known asleep.
  void AdoptSleeping(const std::vector<JobInfo>& jobs,
                     const std::map<std::string, std::string>& node_addr, double now);
  // Wakes (in parallel) and puts to sleep what the plan says; a replica that fails either is
  // cancelled, and one that failed to wake is left out of the stored replicas.
  void SleepAndWake(SlurmApi& slurm, autoscale::ControllerPlan& plan);

  InferenceControllerOptions o_;
  SlurmConnector connect_;
  Store& store_;
  LoadReader load_;
  std::function<double()> unix_now_;
  ReplicaCaller call_;
  bool adopted_ = false;
  std::unique_ptr<SlurmApi> slurm_;
  autoscale::ControllerMemory memory_;
  // The TTFT histogram at the last pass, for the p95 of the requests since.
  std::vector<double> ttft_bounds_;
  std::vector<uint64_t> ttft_counts_;
  std::string last_error_;
};

// Runs the loop until SIGINT or SIGTERM against slurmrestd at the endpoint `resolve` gives
// (with a fresh token each time it is called); returns the exit code.
int RunInferenceController(const InferenceControllerOptions& options,
                           std::function<Result<RestEndpoint>()> resolve, Store& store);

}  // namespace bmas
