#pragma once

// Where the agent's metrics listener (/metrics, /gpus, /health) serves, and how: plain HTTP on
// loopback, TLS with the node's certificate anywhere else. The listener asks for the operator
// secret (common/operator_auth.h), which must not cross the network in clear text
// (../shared/SECURITY.md). Pure: files are read through `read_file`.

#include <cstdint>
#include <functional>
#include <string>

#include "common/config.h"
#include "common/result.h"

namespace bmas {

// The node's own certificate and key, from the cluster CA (`bmas node join` writes them).
inline constexpr const char* kNodeCertPath = "/etc/bmas/node.crt";
inline constexpr const char* kNodeKeyPath = "/etc/bmas/node.key";

struct AgentListener {
  std::string host;
  uint16_t port = 0;
  bool tls = false;
  std::string cert_pem;  // with tls: the certificate (chain) and its key
  std::string key_pem;
  std::string cert_file;  // where they came from, for messages
};

// The listener of [agent] `settings`, its port replaced by `port_flag` when that is not 0.
// Off loopback, or with tls_cert given, it serves TLS with tls_cert/tls_key (the node's own when
// not given), read with `read_file`. InvalidArgument, naming what to set, for a listen address
// that is not "address:port" with a numeric address, and for an off-loopback listener whose
// certificate or key cannot be read: it never serves the operator secret in clear text.
Result<AgentListener> ResolveAgentListener(
    const AgentSettings& settings, int port_flag,
    const std::function<Result<std::string>(const std::string& path)>& read_file);

// The listener's URL as the agent prints it: "http://127.0.0.1:9400", "https://10.0.0.11:9400".
std::string AgentListenerUrl(const AgentListener& listener, uint16_t port);

}  // namespace bmas
