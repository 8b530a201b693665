#pragma once

// A blocking client of slurmrestd's REST API, openapi/v0.0.38 (Slurm 22.05), authenticated
// with a JWT (X-SLURM-USER-NAME / X-SLURM-USER-TOKEN). Jobs run as the user the token names.
//
// Below it sits a transport seam (HttpTransport): the real one speaks HTTP/1.1 over TCP with
// Beast to a loopback slurmrestd, or over TLS to another machine's (common/https_transport.h);
// tests pass canned responses instead.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/env.h"
#include "common/http_transport.h"
#include "common/result.h"
#include "slurm/slurm_json.h"

namespace bmas {

// Where slurmrestd listens and whom to act as.
struct RestEndpoint {
  std::string host = "127.0.0.1";
  uint16_t port = 6820;
  // https: through `bmas slurm tls-front` (slurm/tls_front.h), whose certificate must chain to
  // the CA in `ca_file` and name `host`. Plain HTTP only to this machine's loopback.
  bool tls = false;
  std::string ca_file;
  std::string user;   // X-SLURM-USER-NAME: the Unix user the requests act as
  std::string token;  // X-SLURM-USER-TOKEN: a JWT for `user` (see slurm/jwt.h)
};

// "host:port" (or "[v6]:port") as an endpoint with no user. InvalidArgument otherwise;
// PermissionDenied for a host that is not this machine's loopback (plain HTTP would carry the
// token across the network), with the fix.
Result<RestEndpoint> ParseRestAddress(std::string_view address);

// The cluster config's `slurmrestd`: "https://HOST:PORT" (any host; TLS checked against
// `ca_file`, which must then be given) or ParseRestAddress's plain loopback "host:port".
// InvalidArgument for another scheme, a URL with a path, or https without a CA file.
Result<RestEndpoint> ParseSlurmRestd(std::string_view address, const std::string& ca_file);

// An operator listener's address (an agent's, the gateway's): "https://HOST:PORT", whose
// certificate must chain to the CA in `ca_file` and name HOST, or a plain "host:port" on this
// machine's loopback. PermissionDenied for plain HTTP off loopback (the operator secret would
// cross the network in clear text); InvalidArgument for a malformed address, or https without a
// CA file. Each names the fix.
Result<RestEndpoint> ParseOperatorAddress(std::string_view address, const std::string& ca_file);

// GET `target` from an operator listener at `address` (ParseOperatorAddress's forms), sending
// `authorization` (e.g. "Bearer <operator secret>") when not empty; the body of a 200.
// Over https the server's certificate is checked before anything is sent (kPermissionDenied).
// kUnavailable naming `peer` otherwise.
Result<std::string> HttpGet(const std::string& address, const std::string& target,
                            const std::string& peer, const std::string& authorization = {},
                            std::chrono::milliseconds timeout = std::chrono::seconds(2),
                            const std::string& ca_file = {});

// Slurm as bmas drives it: the seam between bmas's commands and services and slurmrestd, so
// that they can be run against a fake (slurm/fake_slurm_api.h). SlurmRestClient is the real
// one, and documents each call; daemon/services.h hands it out.
class SlurmApi {
 public:
  virtual ~SlurmApi() = default;
  virtual Result<std::string> Ping() = 0;
  virtual Result<int64_t> ControllerTime() = 0;
  virtual Result<int64_t> Submit(const JobSpec& spec) = 0;
  virtual Result<std::vector<JobInfo>> Jobs() = 0;
  virtual Result<std::vector<JobInfo>> AccountedJobs(int64_t seconds) = 0;
  virtual Result<JobInfo> Job(int64_t id) = 0;
  virtual Result<void> Cancel(int64_t id, int signal = 0) = 0;
  virtual Result<std::vector<NodeInfo>> Nodes() = 0;
};

// The API bmas uses. Every method blocks; not thread-safe (one call at a time).
// Failures carry slurmrestd's errors[] in their message, with codes from ErrorFromResponse;
// when slurmrestd cannot be reached the message names its URL and how to start it.
class SlurmRestClient final : public SlurmApi {
 public:
  static constexpr std::string_view kApiPrefix = "/slurm/v0.0.38";

  // `env`'s wall time tells an expired token before it is sent; it must outlive the client.
  explicit SlurmRestClient(RestEndpoint endpoint,
                           std::chrono::milliseconds timeout = std::chrono::seconds(30),
                           Env& env = Env::Default());
  SlurmRestClient(RestEndpoint endpoint, HttpTransportPtr transport, Env& env = Env::Default());

  // The Slurm release ("22.05.8") when slurmctld answers UP.
  Result<std::string> Ping() override;

  // slurmctld's clock when it answered (unix seconds, whole), from GET /diag.
  Result<int64_t> ControllerTime() override;

  // Submits a batch job as endpoint().user; returns its id. InvalidArgument for a spec that
  // RenderJobSubmit refuses or that Slurm cannot satisfy (bad partition, too many GPUs, ...).
  // Slurm may still list a request it refused as a FAILED job (Reason=BadConstraints) whose
  // id the response does not give.
  Result<int64_t> Submit(const JobSpec& spec) override;

  // Every job slurmctld still remembers (finished ones for MinJobAge, 300 s by default), of
  // every user: slurmctld shows other users' jobs unless PrivateData=jobs.
  Result<std::vector<JobInfo>> Jobs() override;

  // Jobs slurmdbd recorded that ran or were pending at some point in the last `seconds`
  // (openapi/dbv0.0.38: slurmrestd must load it, and the cluster must have slurmdbd).
  Result<std::vector<JobInfo>> AccountedJobs(int64_t seconds) override;

  // One job. NotFound when slurmctld does not know it (never existed, or purged).
  Result<JobInfo> Job(int64_t id) override;

  // signal 0: cancel the job (Slurm sends SIGKILL; the job ends CANCELLED). Otherwise sends
  // that signal (one of HUP INT QUIT ABRT KILL ALRM TERM USR1 USR2 URG CONT STOP TSTP TTIN
  // TTOU) to the job's processes and leaves the outcome to the job. PermissionDenied when the
  // job belongs to another user; NotFound when there is no such job.
  Result<void> Cancel(int64_t id, int signal = 0) override;

  // Every node with its state, CPUs, memory and GPUs.
  Result<std::vector<NodeInfo>> Nodes() override;

  const RestEndpoint& endpoint() const { return endpoint_; }

 private:
  // Sends one request with the auth headers; a transport failure or an error response
  // becomes an Error for `what`.
  Result<ClientResponse> Call(std::string method, std::string target, std::string body,
                            std::string_view what);

  RestEndpoint endpoint_;
  HttpTransportPtr transport_;
  Env& env_;
};

// The name slurmrestd's `signal` parameter takes for a signal number ("TERM" for 15);
// InvalidArgument for a signal v0.0.38 does not accept.
Result<std::string> SlurmSignalName(int signal);

}  // namespace bmas
