#pragma once

// How the dashboard shows a node's condition: Slurm's state and whether the node's agent
// answered, as one word for the page's colours, one for the agent, and a line in words that
// says what it means and what lifts it. Pure.

#include <string>
#include <string_view>
#include <vector>

#include "dashboard/state.h"

namespace bmas::dashboard {

struct NodeHealth {
  // "up" (takes jobs), "not_responding" (slurmctld no longer hears its slurmd; it goes down
  // after SlurmdTimeout), "down" (Slurm marked it down: no job runs there), "draining" (an
  // admin's hold, its jobs still running), "drained" (an admin's hold, nothing running), or
  // "unknown" (no state from Slurm).
  std::string status;
  bool responding = true;  // slurmctld hears its slurmd (no NOT_RESPONDING flag, no '*')
  // "ok" (the agent answered with its GPUs' telemetry), "no_telemetry" (it answered without:
  // no driver, or its last read failed), "unreachable" (it did not answer), "none" (no agent
  // of this node is configured).
  std::string agent;
  std::string agent_error;  // the agent's error, or why it could not be read
  std::string text;         // the status and the agent's, in words, for the page
};

// The host an agent's address names: "https://oss02:9400" -> "oss02", "127.0.0.1:9400" ->
// "127.0.0.1"; "" when the address is malformed.
std::string AgentHost(std::string_view address);

// The agent of Slurm node `n` in `telemetry`: the one whose sample names the node (or its host
// name); failing that, one without a sample (it did not answer, or has no driver), whose
// address names the node, its host name or its address (never a loopback address, which every
// node of a one-machine cluster shares). nullptr when none does.
const NodeTelemetry* AgentOf(const std::vector<NodeTelemetry>& telemetry, const NodeInfo& n);

// `n` as Slurm has it (an empty state: no Slurm), with its agent's answer (nullptr: none).
NodeHealth DescribeNode(const NodeInfo& n, const NodeTelemetry* agent);

}  // namespace bmas::dashboard
