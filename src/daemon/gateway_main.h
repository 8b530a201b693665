#pragma once

// Wiring of `bmas gateway`: opens the store, builds the Gateway from settings and runs it until
// SIGINT or SIGTERM, then drains in-flight requests and flushes usage.

#include <string>
#include <vector>

#include "common/config.h"

namespace bmas {

// Returns the process exit code. Prints "listening on http://HOST:PORT" once ready.
int RunGateway(const GatewaySettings& settings, const std::string& state_dir);

// Where a running gateway leaves the URL of its operator listener ("http://127.0.0.1:PORT",
// serving /metrics) for `bmas gateway backend list`: beside the store, in its private
// directory. Removed when the gateway stops; a gateway killed leaves it stale.
std::string GatewayOperatorUrlPath(const std::string& state_dir);

}  // namespace bmas
