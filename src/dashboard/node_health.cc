#include "dashboard/node_health.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/listen_socket.h"
#include "slurm/node_drain.h"

namespace bmas::dashboard {
namespace {

bool HasFlag(const NodeInfo& n, std::string_view flag) {
  return std::find(n.state_flags.begin(), n.state_flags.end(), flag) != n.state_flags.end();
}

// Slurm's reason, or `otherwise` when it gives none.
std::string Reason(const NodeInfo& n, const char* otherwise) {
  return n.reason.empty() ? otherwise : n.reason;
}

std::string AgentWords(const NodeHealth& h) {
  if (h.agent == "unreachable") {
    return fmt::format("; its agent does not answer ({}): check the node's network and its bmas "
                       "agent",
                       h.agent_error);
  }
  if (h.agent == "no_telemetry") {
    return fmt::format("; its agent answers without GPU telemetry ({})", h.agent_error);
  }
  return "";
}

}  // namespace

std::string AgentHost(std::string_view address) {
  for (std::string_view scheme : {"https://", "http://"}) {
    if (address.starts_with(scheme)) address.remove_prefix(scheme.size());
  }
  if (address.ends_with('/')) address.remove_suffix(1);
  auto split = SplitHostPort(address);
  return split ? split->first : "";
}

const NodeTelemetry* AgentOf(const std::vector<NodeTelemetry>& telemetry, const NodeInfo& n) {
  for (const NodeTelemetry& t : telemetry) {
    if (t.node == n.name || (!n.hostname.empty() && t.node == n.hostname)) return &t;
  }
  for (const NodeTelemetry& t : telemetry) {
    if (t.node != t.agent) continue;  // its sample names its node, and that is another
    const std::string host = AgentHost(t.agent);
    if (host.empty() || IsLoopbackHost(host)) continue;
    if (host == n.name || host == n.hostname || host == n.address) return &t;
  }
  return nullptr;
}

NodeHealth DescribeNode(const NodeInfo& n, const NodeTelemetry* agent) {
  NodeHealth h;
  if (agent == nullptr) {
    h.agent = "none";
  } else if (!agent->answered) {
    h.agent = "unreachable";
    h.agent_error = agent->error;
  } else if (!agent->up) {
    h.agent = "no_telemetry";
    h.agent_error = agent->error.empty() ? "it reports no GPUs" : agent->error;
  } else {
    h.agent = "ok";
  }
  // sinfo writes a node that does not respond with a '*' ("down*"); slurmrestd as a flag.
  std::string base = n.state;
  if (base.ends_with('*')) base.pop_back();
  h.responding = base.size() == n.state.size() && base != "not_responding" &&
                 !HasFlag(n, "NOT_RESPONDING");
  const bool held = slurm::IsDrainedInSlurm(n) || base == "fail" || base == "failing" ||
                    HasFlag(n, "FAIL");
  const bool busy = base == "allocated" || base == "mixed" || base == "completing" ||
                    HasFlag(n, "COMPLETING");
  if (base.empty()) {
    h.status = "unknown";
    h.text = "no state from Slurm";
  } else if (base == "down") {
    h.status = "down";
    h.text = fmt::format(
        "down: {}. No job runs there; it serves again by itself once its slurmd answers "
        "(ReturnToService=2): check its network and slurmd",
        Reason(n, "marked down by Slurm"));
    if (held) h.text += fmt::format(", then `bmas node resume {}` (it is drained too)", n.name);
  } else if (!h.responding) {
    h.status = "not_responding";
    h.text = "not responding: slurmctld does not hear its slurmd, and marks it down after "
             "SlurmdTimeout unless it answers: check its network and slurmd";
  } else if (held) {
    h.status = busy ? "draining" : "drained";
    h.text = fmt::format("{}: {}. No new job starts there until `bmas node resume {}`{}",
                         h.status, Reason(n, "held by an admin"), n.name,
                         busy ? "; its jobs run on" : "");
  } else if (base == "unknown" || base == "future") {
    h.status = "unknown";
    h.text = fmt::format("Slurm does not know its state yet ({})", base);
  } else {
    h.status = "up";
    h.text = "up: " + base;
  }
  h.text += AgentWords(h);
  return h;
}

}  // namespace bmas::dashboard
