#pragma once

// The seam every HTTP client of bmas sits on: one request in, one whole response out. The
// Slurm REST client and the LXD client build requests and read responses the same way over it,
// whatever carries them (TCP here; LXD's unix socket and HTTPS to a peer in lxd/), and their
// unit tests put a canned transport in its place.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace bmas {

// One HTTP request as a client builds it.
struct ClientRequest {
  std::string method;  // "GET", "POST", "PUT", "PATCH", "DELETE"
  std::string target;  // "/slurm/v0.0.38/jobs", "/1.0/instances?recursion=1"
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // empty for none
  std::string content_type = "application/json";  // sent with a body
};

struct ClientResponse {
  int status = 0;
  std::string body;
  std::string etag;  // the ETag header, "" when absent
};

// Carries one request and brings back the whole response.
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  // Blocks until the response or the transport's deadline. Errors: kUnavailable, saying which
  // step failed ("connect", "write", "read") and why, when the server cannot be reached or the
  // exchange fails. An HTTP error status is a response, not an error.
  virtual Result<ClientResponse> RoundTrip(const ClientRequest& request) = 0;
  // Where it goes, for messages: "http://127.0.0.1:6820", a socket's path.
  virtual std::string Where() const = 0;
};
using HttpTransportPtr = std::unique_ptr<HttpTransport>;

// HTTP/1.1 over TCP, one connection per request, each request bounded by `timeout` from
// connect to the last byte. Thread-compatible: one call at a time per transport. `peer` names
// the server in error messages ("slurmrestd", "the gateway").
HttpTransportPtr NewTcpHttpTransport(std::string host, uint16_t port,
                                     std::chrono::milliseconds timeout, std::string peer);

}  // namespace bmas
