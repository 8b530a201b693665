#pragma once

// `bmas slurm tls-front`: TLS in front of a loopback slurmrestd, so that nodes reach Slurm's
// REST API on the controller without a Slurm JWT crossing the network in clear text, and know
// by the cluster CA's certificate that they talk to the controller (../shared/SECURITY.md).
//
// It relays each request, bytes unchanged apart from hop-by-hop headers, to slurmrestd over
// loopback, and slurmrestd's answer back: slurmrestd (and slurmctld behind it) authenticates
// the token as before. It holds no secret but its TLS key, parses no JSON and logs no header.
// Every resource is bounded: connections (all and per client address), header and body
// sizes, the time a client has to handshake and send its request, the time slurmrestd has to
// answer, and the answer's size. One request per connection (Connection: close).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"

namespace bmas {

struct TlsFrontOptions {
  std::string listen_host;  // an address of this machine ("10.200.0.1", "0.0.0.0")
  uint16_t listen_port = 6821;
  std::string backend_host = "127.0.0.1";  // slurmrestd; loopback only
  uint16_t backend_port = 6820;
  std::string cert_pem;  // the certificate clients check (the controller's, from the cluster CA)
  std::string key_pem;   // its key
  // Who logs ("bmas slurm tls-front: GET /x 200 ...") and who the backend is, in the log and a
  // 502's message: the same front serves an agent's metrics listener (agent/agent.h).
  std::string name = "bmas slurm tls-front";
  std::string backend_name = "slurmrestd";
  size_t max_connections = 256;
  size_t max_connections_per_address = 32;
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 4 << 20;        // a job's script and environment
  size_t max_response_bytes = 256u << 20;  // a busy cluster's /jobs listing
  std::chrono::milliseconds client_timeout = std::chrono::seconds(20);  // handshake + request
  std::chrono::milliseconds backend_timeout = std::chrono::seconds(60);  // slurmrestd's answer
};

class TlsFront {
 public:
  // Binds the listener (the port is held from here on) and loads the certificate and key.
  // InvalidArgument for a backend that is not on loopback or a certificate or key that does not
  // load; the listener's own errors otherwise.
  static Result<std::unique_ptr<TlsFront>> Listen(TlsFrontOptions options);
  ~TlsFront();
  TlsFront(const TlsFront&) = delete;
  TlsFront& operator=(const TlsFront&) = delete;

  // The port it listens on (the bound one when options gave 0).
  uint16_t port() const;

  // Serves until Stop(); returns when the connections in flight have ended (each is bounded by
  // the timeouts).
  void Run();

  // From any thread (or a signal handler's thread): stops accepting; Run() returns once the
  // connections in flight are done.
  void Stop();

  // How many connections were turned away at the caps since the start.
  size_t refused() const;

  struct Impl;

 private:
  explicit TlsFront(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace bmas
