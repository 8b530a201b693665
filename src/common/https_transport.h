#pragma once

// HTTPS for the HttpTransport seam: HTTP/1.1 over TLS 1.2 or later to a server whose
// certificate must chain to one given CA (the cluster's, cluster/cluster_ca.h) and name the
// host or address the client dialled. What the Slurm REST client uses to reach slurmrestd on
// another machine through `bmas slurm tls-front` (slurm/tls_front.h): every request carries a
// Slurm JWT, which must neither cross the network in clear text nor reach an impostor.

#include <chrono>
#include <cstdint>
#include <string>

#include "common/http_transport.h"

namespace bmas {

// One TLS connection per request, bounded by `timeout` from connect to the last byte. The CA
// file (PEM) is read for each request. Errors: kInvalidArgument naming `ca_file` when it cannot
// be read or holds no certificate; kPermissionDenied when the server's certificate does not
// chain to that CA or names another host (nothing has been sent then); kUnavailable for the
// rest (connect, handshake, read, write), as NewTcpHttpTransport's. `peer` names the server.
HttpTransportPtr NewHttpsTransport(std::string host, uint16_t port, std::string ca_file,
                                   std::chrono::milliseconds timeout, std::string peer);

}  // namespace bmas
