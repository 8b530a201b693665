#pragma once

// Wiring of `bmas engine`: builds the EngineServer from settings and runs it until SIGINT or
// SIGTERM, then stops it gracefully.

#include <string>

#include "common/config.h"
#include "common/result.h"
#include "engine/server.h"

namespace bmas {

// Resolves engine settings (profile, sizes, policy) into server options. Errors name the
// setting and how to fix it.
Result<engine::EngineServerOptions> MakeEngineOptions(const EngineSettings& settings);

// Runs the engine server in the foreground; prints "listening on http://HOST:PORT" on stdout
// once it accepts connections. Returns the process exit code.
int RunEngine(const EngineSettings& settings);

}  // namespace bmas
