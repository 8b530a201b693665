#include "autoscale/replica_job.h"

#include <fmt/format.h>

#include "autoscale/controller.h"
#include "core/mig.h"

namespace bmas::autoscale {
namespace {

std::string ShellQuote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

Result<void> ValidateDeployment(const Deployment& d) {
  if (d.model.empty() || d.model.size() > 200) {
    return InvalidArgument("the model name must be 1 to 200 characters", "model");
  }
  for (unsigned char c : d.model) {
    if (c <= ' ' || c >= 0x7f) {
      return InvalidArgument(
          fmt::format("the model name '{}' may hold only printable ASCII without spaces", d.model),
          "model");
    }
  }
  if (d.min_replicas < 0) return InvalidArgument("--min must be 0 or more", "min");
  if (d.max_replicas < 1) return InvalidArgument("--max must be at least 1", "max");
  if (d.min_replicas > d.max_replicas) {
    return InvalidArgument(fmt::format("--min {} is above --max {}: raise --max or lower --min",
                                       d.min_replicas, d.max_replicas),
                           "min");
  }
  if (d.gpus_per_replica < 1) {
    return InvalidArgument("--gpus-per-replica must be at least 1", "gpus_per_replica");
  }
  if (!d.gpu_slice.empty() && !IsMigProfileName(d.gpu_slice)) {
    return InvalidArgument(
        fmt::format("'{}' is not a MIG profile such as 3g.40gb", d.gpu_slice), "gpu_slice");
  }
  if (d.ttft_slo_ms < 0) return InvalidArgument("--ttft-slo-ms must be 0 (none) or more", "ttft_slo_ms");
  const std::map<std::string, std::string> probe = {{"model", "m"}, {"port", "1"},
                                                    {"gpus", "1"},  {"profile", "p"},
                                                    {"host", "h"},  {"bmas", "b"}};
  auto expanded = ExpandReplicaCommand(d.command.empty() ? kDefaultReplicaCommand : d.command, probe);
  if (!expanded) return expanded.error();
  return {};
}

Result<std::string> ExpandReplicaCommand(std::string_view t,
                                         const std::map<std::string, std::string>& values) {
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '{') {
      out += t[i];
      continue;
    }
    const size_t close = t.find('}', i);
    if (close == std::string_view::npos) {
      return InvalidArgument(
          fmt::format("the command template has an unclosed '{{' at offset {}", i), "command");
    }
    const std::string name(t.substr(i + 1, close - i - 1));
    auto it = values.find(name);
    if (it == values.end()) {
      return InvalidArgument(
          fmt::format("the command template has an unknown placeholder {{{}}}; known: {{model}} "
                      "{{port}} {{gpus}} {{profile}} {{host}} {{bmas}}",
                      name),
          "command");
    }
    out += ShellQuote(it->second);
    i = close;
  }
  return out;
}

Result<JobSpec> ReplicaJobSpec(const Deployment& d, const ReplicaJobContext& c) {
  const std::map<std::string, std::string> values = {
      {"model", d.model},
      {"port", std::to_string(c.port)},
      {"gpus", std::to_string(d.gpus_per_replica)},
      // On MIG slices the engine runs its profile scaled to the slice (engine/timing.h).
      {"profile", (d.profile.empty() ? std::string("llama-3.1-8b-h100") : d.profile) +
                      (d.gpu_slice.empty() ? "" : "@" + d.gpu_slice)},
      {"host", c.host},
      {"bmas", c.bmas}};
  auto command = ExpandReplicaCommand(d.command.empty() ? kDefaultReplicaCommand : d.command,
                                      values);
  if (!command) return command.error();
  if (!c.tls_cert.empty()) {
    *command += fmt::format(" --ssl-certfile {} --ssl-keyfile {}", ShellQuote(c.tls_cert),
                            ShellQuote(c.tls_key));
  }
  JobSpec spec;
  spec.name = ReplicaJobName(d.model, c.port);
  spec.partition = c.partition;
  spec.nodes = 1;
  spec.tasks = 1;
  spec.gpus_per_node = d.gpus_per_replica;
  spec.gpu_type = d.gpu_slice;  // "gpu:3g.40gb:N": slices of that profile, on one node
  spec.cwd = c.cwd;
  spec.stdout_path = c.cwd + "/replica-%j.log";
  spec.environment = c.environment;
  spec.environment.emplace("PATH", "/usr/local/bin:/usr/bin:/bin");
  spec.environment.emplace("BMAS_REPLICA_PORT", std::to_string(c.port));
  // `bmas engine` serves the sleep-mode endpoints only in vLLM's dev mode; it asks for the
  // replica's API key on them. Never set for a real vLLM command (UsesSleepMode).
  if (UsesSleepMode(d)) spec.environment.emplace("VLLM_SERVER_DEV_MODE", "1");
  spec.requeue = true;
  spec.script = "#!/bin/sh\n# A bmas inference replica. exec: Slurm's SIGTERM reaches it.\nexec " +
                *command + "\n";
  return spec;
}

}  // namespace bmas::autoscale
