#pragma once

// Readers of what the dashboard's daemon fetches from bmas's other daemons: the gateway's
// /load and an agent's /gpus. Pure: bytes in, state out. A member that is missing or of
// another type reads as its default; a body that is not JSON is an error naming the source.

#include <string>
#include <string_view>

#include "common/result.h"
#include "dashboard/state.h"

namespace bmas::dashboard {

Result<GatewayLoad> ParseGatewayLoad(std::string_view body);

// `node` names the node when the agent's sample does not (no telemetry).
Result<NodeTelemetry> ParseAgentGpus(std::string_view body, const std::string& node);

}  // namespace bmas::dashboard
