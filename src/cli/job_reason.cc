#include "cli/job_reason.h"

#include <fmt/format.h>

#include <utility>

namespace bmas {
namespace {

// Reasons Slurm 22.05 gives often, as slurm_protocol_defs.c spells them.
constexpr std::pair<std::string_view, std::string_view> kReasons[] = {
    {"None", ""},
    {"Resources", "waiting for free GPUs"},
    {"Priority", "other jobs are ahead of it"},
    {"Dependency", "waiting for the jobs it depends on"},
    {"DependencyNeverSatisfied", "will never start: a job it depends on failed; cancel it"},
    {"BeginTime", "waiting for its start time"},
    {"JobHeldUser", "held by its owner"},
    {"JobHeldAdmin", "held by an admin"},
    {"ReqNodeNotAvail", "a node it needs is down, drained or reserved"},
    {"NodeDown", "a node it needs is down"},
    {"Reservation", "waiting for its reservation to start"},
    {"PartitionDown", "its partition is down"},
    {"PartitionInactive", "its partition is inactive"},
    {"PartitionNodeLimit", "it asks for more nodes than its partition allows"},
    {"PartitionTimeLimit", "it asks for more time than its partition allows (--time)"},
    {"BadConstraints", "no node has what it asks for"},
    {"Licenses", "waiting for licenses"},
    {"Prolog", "starting: its nodes are being prepared"},
    {"Cleaning", "waiting for its last run to be cleaned up"},
    {"InvalidAccount", "its Slurm account is not valid: ask your admin"},
    {"NonZeroExitCode", "it exited with an error"},
    {"TimeLimit", "it ran out of time (--time)"},
    {"OutOfMemory", "it ran out of memory (--mem)"},
    {"RaisedSignal", "it was killed by a signal"},
    {"JobLaunchFailure", "it failed to start on its node"},
    {"SystemFailure", "Slurm failed to start it"},
};

bool Contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// What a QOS or association limit counts: "QOSMaxGRESPerUser" -> "GPUs"; "" when unknown.
std::string_view LimitedThing(std::string_view reason) {
  if (Contains(reason, "Min")) return "";  // minutes and minimums: said as Slurm says them
  if (Contains(reason, "GRES")) return "GPUs";
  if (Contains(reason, "Submit")) return "submitted jobs";
  if (Contains(reason, "Wall")) return "run time";
  if (Contains(reason, "Cpu") || Contains(reason, "CPU")) return "CPUs";
  if (Contains(reason, "Mem")) return "memory";
  if (Contains(reason, "Node")) return "nodes";
  if (Contains(reason, "Jobs")) return "running jobs";
  return "";
}

}  // namespace

std::string PlainJobReason(std::string_view reason) {
  if (reason.empty()) return "";
  for (const auto& [slurm, plain] : kReasons) {
    if (reason == slurm) return std::string(plain);
  }
  const bool qos_or_association = reason.starts_with("QOS") || reason.starts_with("Assoc");
  const std::string_view thing = LimitedThing(reason);
  if (!qos_or_association || thing.empty()) return std::string(reason);
  if (Contains(reason, "PerJob")) {
    return fmt::format("it asks for more {} than one job may have: cancel it and ask for less",
                       thing);
  }
  if (Contains(reason, "Grp")) {
    return fmt::format("a shared limit of {} is reached: it starts when other jobs end", thing);
  }
  if (Contains(reason, "PerUser") || reason.starts_with("AssocMax")) {
    return fmt::format("you are at your limit of {}: it starts when one of your jobs ends", thing);
  }
  return std::string(reason);
}

}  // namespace bmas
