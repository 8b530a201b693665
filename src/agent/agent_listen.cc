#include "agent/agent_listen.h"

#include <arpa/inet.h>

#include <fmt/format.h>

#include "common/listen_socket.h"

namespace bmas {

Result<AgentListener> ResolveAgentListener(
    const AgentSettings& settings, int port_flag,
    const std::function<Result<std::string>(const std::string& path)>& read_file) {
  auto split = SplitHostPort(settings.listen);
  in_addr v4{};
  in6_addr v6{};
  if (!split || (inet_pton(AF_INET, split->first.c_str(), &v4) != 1 &&
                 inet_pton(AF_INET6, split->first.c_str(), &v6) != 1)) {
    return InvalidArgument(
        fmt::format("[agent] listen = \"{}\" is not ADDRESS:PORT with a numeric address: give "
                    "\"127.0.0.1:0\" (this node only) or this node's address on the cluster's "
                    "network, \"10.0.0.11:9400\"",
                    settings.listen),
        "listen");
  }
  AgentListener l;
  l.host = split->first;
  l.port = port_flag != 0 ? static_cast<uint16_t>(port_flag) : split->second;
  const bool loopback = IsLoopbackHost(l.host);
  l.tls = !loopback || !settings.tls_cert.empty();
  if (!l.tls) return l;
  l.cert_file = settings.tls_cert.empty() ? kNodeCertPath : settings.tls_cert;
  const std::string key_file = settings.tls_key.empty() ? kNodeKeyPath : settings.tls_key;
  // A file of the pair, or the refusal that names what to set.
  auto load = [&](const std::string& path, const char* key) -> Result<std::string> {
    auto text = read_file(path);
    if (text && !text->empty()) return std::move(*text);
    return InvalidArgument(
        fmt::format("the agent's listener {} serves TLS only off loopback (the operator secret "
                    "must not cross the network in clear text), and {} cannot be read: {}. Join "
                    "this node to the cluster (`bmas node join` writes {} and {}), or set "
                    "[agent] tls_cert and tls_key to this node's certificate and key from the "
                    "cluster CA, or set [agent] listen to 127.0.0.1",
                    JoinHostPort(l.host, l.port), path,
                    text ? std::string("it is empty") : text.error().message, kNodeCertPath,
                    kNodeKeyPath),
        key);
  };
  auto cert = load(l.cert_file, "tls_cert");
  if (!cert) return cert.error();
  auto key = load(key_file, "tls_key");
  if (!key) return key.error();
  l.cert_pem = std::move(*cert);
  l.key_pem = std::move(*key);
  return l;
}

std::string AgentListenerUrl(const AgentListener& listener, uint16_t port) {
  return fmt::format("{}://{}", listener.tls ? "https" : "http", JoinHostPort(listener.host, port));
}

}  // namespace bmas
