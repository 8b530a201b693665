#pragma once

// TLS for `bmas engine`, as vLLM's --ssl-certfile, --ssl-keyfile, --ssl-ca-certs and
// --ssl-cert-reqs give it: a replica on a node is reached by the gateway on the controller
// across the network, and prompts, answers and the backend's key must not cross it in clear
// text (../../shared/SECURITY.md; docs/cluster-join.md, "Replicas on nodes").
//
// The listener takes TLS connections on the engine's address and port and relays each one's
// bytes, unchanged and both ways, to the engine's own HTTP server on a loopback port, for as
// long as either side keeps it open: keep-alive, streamed answers (each SSE event is sent on
// as it comes) and the gateway's identity challenge pass through as on a plain engine. A
// client that closes its connection closes the engine's, which aborts its request, as vLLM
// does. Bounded: connections at once, and the time a client has to complete its handshake.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/asio.h"
#include "common/result.h"

namespace bmas::engine {

struct TlsListenerOptions {
  std::string host;  // the engine's --host
  uint16_t port = 0;  // its --port (0: any free one)
  std::string certfile;  // --ssl-certfile: the certificate (chain), PEM
  std::string keyfile;   // --ssl-keyfile: its key, PEM
  std::string ca_certs;  // --ssl-ca-certs: CAs for client certificates ("" = none)
  // --ssl-cert-reqs, as Python's ssl module: 0 asks no client certificate, 1 checks one when
  // given, 2 requires one.
  int cert_reqs = 0;
  size_t max_connections = 4096;
  std::chrono::milliseconds handshake_timeout = std::chrono::seconds(10);
};

class TlsListener {
 public:
  // Loads the certificate and key and binds host:port, listening at once. InvalidArgument
  // naming the flag for a certificate, key or CA file that does not load, a key that is not
  // the certificate's, a cert_reqs other than 0-2, or 1-2 without ca_certs; the listener's own
  // errors otherwise.
  static Result<std::unique_ptr<TlsListener>> Listen(net::io_context& io,
                                                     TlsListenerOptions options);
  ~TlsListener();
  TlsListener(const TlsListener&) = delete;
  TlsListener& operator=(const TlsListener&) = delete;

  uint16_t port() const;
  // Starts accepting; each connection is relayed to 127.0.0.1:`backend_port`.
  void Start(uint16_t backend_port);
  // Stops accepting. Connections in flight go on until either side closes them.
  void Stop();

  struct Impl;

 private:
  explicit TlsListener(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace bmas::engine
