#pragma once

// The join's network side (docs/cluster-join.md, steps 3 and 4): the controller's TLS listener
// (`bmas cluster serve`) and the node's client (`bmas node join`). One HTTP/1.1 POST of a
// JoinRequest to kJoinPath, answered with a JoinReply (200) or {"error": message} (4xx).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "cluster/cluster_ca.h"
#include "cluster/join_protocol.h"
#include "cluster/join_token.h"
#include "common/result.h"

namespace bmas::cluster {

struct JoinServerOptions {
  std::string host;   // the address to listen on
  uint16_t port = 0;  // 0: any free port (tests)
  // The controller's own certificate and key, issued by the cluster CA for the address nodes
  // dial; presented with the CA's certificate as its chain.
  CertAndKey server;
  std::string ca_cert_pem;
  // The whole of one connection (handshake, request, reply) must fit in it.
  std::chrono::milliseconds timeout = std::chrono::seconds(10);
  size_t max_connections = 64;  // beyond it, new connections are closed at once
  // From one address: so that one host holding idle connections cannot take every slot.
  size_t max_connections_per_peer = 8;
};

// Decides one request: the reply, or the error the node is told. `peer` is the client's address.
using JoinHandler =
    std::function<Result<JoinReply>(const JoinRequest& request, const std::string& peer)>;

// Decides a joined node's request for its LXD peers (kLxdPeersPath): `host` as the request names
// it, `client_cert_pem` the certificate it showed in the handshake ("" when none).
using LxdPeersHandler = std::function<Result<std::map<std::string, std::string>>(
    const std::string& host, const std::string& client_cert_pem, const std::string& peer)>;

// The join service's listener. Connections run concurrently as coroutines on one thread (the
// one in Run); the handler is called there, one request at a time.
class JoinServer {
 public:
  virtual ~JoinServer() = default;
  // The port it listens on (held from Listen on).
  virtual uint16_t port() const = 0;
  // Serves until Stop; returns when the connections in flight have ended (each is bounded by
  // the timeout). With `stop_on_signals`, SIGINT and SIGTERM stop it.
  virtual void Run(bool stop_on_signals) = 0;
  // Thread-safe; idempotent.
  virtual void Stop() = 0;
};

// Binds and listens. Errors name the address and the fix (a port in use, no such address), or
// the certificate that TLS refuses.
// It asks clients for a certificate (optional: a joining node has none yet) and, with
// `peers_handler`, answers kLxdPeersPath too.
Result<std::unique_ptr<JoinServer>> ListenForJoins(JoinServerOptions options, JoinHandler handler,
                                                   LxdPeersHandler peers_handler = nullptr);

// What the node does: TLS 1.2+ to the token's address and port; refuses, before it sends
// anything, a server whose chain holds no certificate with the token's CA fingerprint or whose
// certificate does not chain to it and name the token's address (kPermissionDenied, naming
// both fingerprints); then sends `request` with the token's secret and reads the reply.
// kUnavailable when the controller cannot be reached in `timeout`; the controller's refusal
// comes back with its code and message.
Result<JoinReply> RequestJoin(const JoinToken& token, JoinRequest request, int64_t unix_now,
                              std::chrono::milliseconds timeout);

// RequestJoin's exchange with `body` sent as it is: the reply's body, unparsed.
Result<std::string> RequestJoinBody(const JoinToken& token, std::string body, int64_t unix_now,
                                    std::chrono::milliseconds timeout);

// A refusal by a controller of join protocol 1, which names the unknown "protocol" member, with
// what it means added (param "protocol"); other errors as they are. RequestJoin applies it.
Error OlderControllerHint(Error refusal);

// A joined node asks the join service at `address`:`port` again for its LXD peers, showing
// `node` (its node.crt and node.key) as its client certificate. The server is checked as in
// RequestJoin against `ca_pem` (the node's ca.crt) before anything is sent.
Result<std::map<std::string, std::string>> RequestLxdPeers(const std::string& address,
                                                           uint16_t port, const std::string& ca_pem,
                                                           const CertAndKey& node,
                                                           const std::string& host,
                                                           int64_t unix_now,
                                                           std::chrono::milliseconds timeout);

}  // namespace bmas::cluster
