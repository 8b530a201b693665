#pragma once

// Readers of what the dashboard's daemon fetches from bmas's other daemons: the gateway's
// /load and an agent's /gpus. Pure: bytes in, state out. A member that is missing or of
// another type reads as its default; a body that is not JSON is an error naming the source.

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "dashboard/state.h"

namespace bmas::dashboard {

Result<GatewayLoad> ParseGatewayLoad(std::string_view body);

// One view of several gateways' /load (gateways sharing a store route to the same replicas):
// queued requests, in-flight counts and TTFT histograms add up; the oldest wait is the oldest
// anywhere; a backend is healthy where any gateway finds it so, and draining only once every
// gateway that lists it has seen the drain (so a replica is idle only when it is idle in all);
// its capacity is the largest reported. Histograms whose bounds differ from the first are left
// out. Empty input: an unreachable load.
GatewayLoad MergeGatewayLoads(const std::vector<GatewayLoad>& loads);

// `node` names the node when the agent's sample does not (no telemetry).
Result<NodeTelemetry> ParseAgentGpus(std::string_view body, const std::string& node);

}  // namespace bmas::dashboard
