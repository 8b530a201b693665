#pragma once

// What a replica job is: the Slurm job that runs one inference replica of a deployment, and
// the validation of a deployment before it is stored. Pure: no Slurm, no store.

#include <map>
#include <string>
#include <string_view>

#include "common/result.h"
#include "slurm/slurm_json.h"
#include "store/store.h"

namespace bmas::autoscale {

// Job names of replicas start with this: "bmas-replica:PORT:MODEL" (controller.h). The
// controller finds its replicas by it among the service account's jobs.
inline constexpr std::string_view kReplicaJobPrefix = "bmas-replica:";

// The default command template: the simulated engine. {bmas} is the bmas binary.
inline constexpr std::string_view kDefaultReplicaCommand =
    "{bmas} engine --host {host} --port {port} --model {model} --profile {profile} "
    "--startup-s profile --shutdown-timeout 0";

// What a deployment's replicas are started with.
struct ReplicaJobContext {
  std::string bmas;        // absolute path of the bmas binary
  std::string host;        // the address the replica listens on
  int port = 0;
  std::string partition;   // "inference", or the floor's partition
  std::string cwd;         // where the job runs and writes its log
  std::map<std::string, std::string> environment;  // e.g. VLLM_API_KEY (a secret)
  // The certificate and key the replica serves TLS with, as paths on the node ("" = plain
  // HTTP): appended to the command as vLLM's --ssl-certfile and --ssl-keyfile, which `bmas
  // engine` takes too.
  std::string tls_cert;
  std::string tls_key;
};

// Checks a deployment as `bmas inference deploy` would store it: a model name of printable
// characters, 0 <= min <= max, max >= 1, gpus per replica >= 1, a command template whose
// placeholders are known. InvalidArgument naming the field and the fix.
Result<void> ValidateDeployment(const Deployment& d);

// The command template with {model}, {port}, {gpus}, {profile}, {host} and {bmas} replaced
// (each value shell-quoted). InvalidArgument for an unknown or unclosed placeholder.
Result<std::string> ExpandReplicaCommand(std::string_view command_template,
                                         const std::map<std::string, std::string>& values);

// The batch job of one replica: named ReplicaJobName(model, port), the deployment's GPUs on one
// node, no time limit beyond the partition's, requeued when preempted. With context.tls_cert the
// command ends in --ssl-certfile CERT --ssl-keyfile KEY. The script runs the
// expanded command with `exec`, so that Slurm's SIGTERM reaches the replica itself. A
// deployment that runs `bmas engine` (UsesSleepMode) also gets VLLM_SERVER_DEV_MODE=1, for the
// sleep-mode endpoints.
Result<JobSpec> ReplicaJobSpec(const Deployment& d, const ReplicaJobContext& context);

}  // namespace bmas::autoscale
