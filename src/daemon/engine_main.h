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

// TLS as vLLM's flags give it (--ssl-certfile, --ssl-keyfile, --ssl-ca-certs, --ssl-cert-reqs;
// engine/tls_listener.h): a replica on a node serves the gateway on another machine over TLS
// with the node's replica certificate (docs/cluster-join.md). certfile "" = plain HTTP.
// Command-line flags only for now, as vLLM's are; no [engine] keys yet.
struct EngineTls {
  std::string certfile;
  std::string keyfile;
  std::string ca_certs;
  int cert_reqs = 0;  // as Python's ssl module: 0 none, 1 optional, 2 required
};

// Runs the engine server in the foreground; prints "listening on http://HOST:PORT" (https with
// `tls`) on stdout once it accepts connections. Returns the process exit code.
int RunEngine(const EngineSettings& settings, const EngineTls& tls = {});

}  // namespace bmas
