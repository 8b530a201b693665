#include "slurm/rest_client.h"

#include <fmt/format.h>

#include <csignal>
#include <optional>

#include "common/https_transport.h"
#include "common/listen_socket.h"
#include "slurm/jwt.h"

namespace bmas {

Result<RestEndpoint> ParseRestAddress(std::string_view address) {
  auto split = SplitHostPort(address);
  if (!split || split->second == 0) {
    return InvalidArgument(
        fmt::format("slurmrestd address \"{}\" is not host:port (e.g. 127.0.0.1:6820)", address),
        "address");
  }
  const std::string& host = split->first;
  const uint16_t port = split->second;
  // bmas speaks plain HTTP to slurmrestd, and every request carries a Slurm JWT (root's mints
  // tokens for any user): it must not cross a network in clear text.
  if (!IsLoopbackHost(host)) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("slurmrestd address \"{}\" is not on this machine: bmas reaches "
                             "slurmrestd over plain HTTP, so the Slurm token in each request "
                             "would cross the network in clear text. Run slurmrestd on this "
                             "node's loopback, or run `bmas slurm tls-front` beside it on its "
                             "machine and give slurmrestd = \"https://HOST:PORT\" (checked "
                             "against the cluster CA, slurmrestd_ca)",
                             address),
                 "address"};
  }
  RestEndpoint e;
  e.host = host;
  e.port = port;
  return e;
}

namespace {

// "https://HOST:PORT" (a trailing "/" allowed) as HOST and PORT; nullopt when it is not one.
std::optional<std::pair<std::string, uint16_t>> HttpsHostPort(std::string_view address) {
  constexpr std::string_view kHttps = "https://";
  if (!address.starts_with(kHttps)) return std::nullopt;
  std::string_view rest = address.substr(kHttps.size());
  if (rest.ends_with('/')) rest.remove_suffix(1);
  auto split = SplitHostPort(rest);
  if (rest.find('/') != std::string_view::npos || !split || split->first.empty() ||
      split->second == 0) {
    return std::nullopt;
  }
  return *split;
}

RestEndpoint TlsEndpoint(std::pair<std::string, uint16_t> host_port, const std::string& ca_file) {
  RestEndpoint e;
  e.host = std::move(host_port.first);
  e.port = host_port.second;
  e.tls = true;
  e.ca_file = ca_file;
  return e;
}

}  // namespace

Result<RestEndpoint> ParseSlurmRestd(std::string_view address, const std::string& ca_file) {
  const size_t scheme = address.find("://");
  if (scheme == std::string_view::npos) return ParseRestAddress(address);
  if (!address.starts_with("https://")) {
    return InvalidArgument(
        fmt::format("slurmrestd \"{}\": give \"https://HOST:PORT\" (through `bmas slurm "
                    "tls-front`) or a loopback \"host:port\"",
                    address),
        "address");
  }
  auto split = HttpsHostPort(address);
  if (!split) {
    return InvalidArgument(
        fmt::format("slurmrestd \"{}\" is not https://HOST:PORT (e.g. https://mgs1:6821)",
                    address),
        "address");
  }
  if (ca_file.empty()) {
    return InvalidArgument(
        fmt::format("slurmrestd \"{}\" needs a CA to check its certificate with: set "
                    "[cluster.slurm] slurmrestd_ca",
                    address),
        "slurmrestd_ca");
  }
  return TlsEndpoint(std::move(*split), ca_file);
}

Result<RestEndpoint> ParseOperatorAddress(std::string_view address, const std::string& ca_file) {
  if (address.find("://") != std::string_view::npos) {
    auto split = HttpsHostPort(address);
    if (!split) {
      return InvalidArgument(
          fmt::format("\"{}\" is not https://HOST:PORT (e.g. https://oss01:9400) or a loopback "
                      "host:port",
                      address),
          "address");
    }
    if (ca_file.empty()) {
      return InvalidArgument(
          fmt::format("\"{}\" needs a CA to check its certificate with: set [agent] ca (the "
                      "cluster CA, /etc/bmas/ca.crt on a joined node)",
                      address),
          "ca");
    }
    return TlsEndpoint(std::move(*split), ca_file);
  }
  auto split = SplitHostPort(address);
  if (!split || split->second == 0) {
    return InvalidArgument(
        fmt::format("\"{}\" is not host:port (e.g. 127.0.0.1:9400) or https://HOST:PORT",
                    address),
        "address");
  }
  if (!IsLoopbackHost(split->first)) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("\"{}\" is not on this machine, and plain HTTP would carry the "
                             "operator secret across the network in clear text: give "
                             "\"https://{}\" (the listener's certificate is checked against "
                             "[agent] ca, the cluster CA)",
                             address, JoinHostPort(split->first, split->second)),
                 "address"};
  }
  RestEndpoint e;
  e.host = split->first;
  e.port = split->second;
  return e;
}

Result<std::string> SlurmSignalName(int signal) {
  // The enum of v0.0.38's `signal` query parameter.
  static constexpr std::pair<int, const char*> kSignals[] = {
      {SIGHUP, "HUP"},   {SIGINT, "INT"},   {SIGQUIT, "QUIT"}, {SIGABRT, "ABRT"}, {SIGKILL, "KILL"},
      {SIGALRM, "ALRM"}, {SIGTERM, "TERM"}, {SIGUSR1, "USR1"}, {SIGUSR2, "USR2"}, {SIGURG, "URG"},
      {SIGCONT, "CONT"}, {SIGSTOP, "STOP"}, {SIGTSTP, "TSTP"}, {SIGTTIN, "TTIN"}, {SIGTTOU, "TTOU"},
  };
  for (const auto& [number, name] : kSignals) {
    if (number == signal) return std::string(name);
  }
  return InvalidArgument(fmt::format("slurmrestd cannot send signal {}", signal), "signal");
}

SlurmRestClient::SlurmRestClient(RestEndpoint endpoint, std::chrono::milliseconds timeout, Env& env)
    : endpoint_(std::move(endpoint)),
      transport_(endpoint_.tls ? NewHttpsTransport(endpoint_.host, endpoint_.port,
                                                   endpoint_.ca_file, timeout, "slurmrestd")
                               : NewTcpHttpTransport(endpoint_.host, endpoint_.port, timeout,
                                                     "slurmrestd")),
      env_(env) {}

SlurmRestClient::SlurmRestClient(RestEndpoint endpoint, HttpTransportPtr transport, Env& env)
    : endpoint_(std::move(endpoint)), transport_(std::move(transport)), env_(env) {}

Result<ClientResponse> SlurmRestClient::Call(std::string method, std::string target, std::string body,
                                           std::string_view what) {
  // slurmrestd cannot tell a rejected token from a dead slurmctld (both are "Unspecified
  // error"), so the failures visible here are caught before sending.
  if (!endpoint_.token.empty()) {
    auto claims = DecodeJwtClaims(endpoint_.token);
    if (!claims) {
      return Error{ErrorCode::kPermissionDenied,
                   fmt::format("cannot {}: the token for user \"{}\" is unusable: {}", what,
                               endpoint_.user, claims.error().message),
                   "token"};
    }
    const int64_t now = static_cast<int64_t>(env_.UnixNow());
    if (claims->expires_at <= now) {
      return Error{ErrorCode::kPermissionDenied,
                   fmt::format("cannot {}: the JWT for user \"{}\" expired {} s ago; mint a "
                               "new one from the cluster's jwt_key",
                               what, endpoint_.user, now - claims->expires_at),
                   "token"};
    }
  }
  ClientRequest request;
  request.method = std::move(method);
  request.target = std::move(target);
  request.body = std::move(body);
  request.headers = {{"X-SLURM-USER-NAME", endpoint_.user},
                     {"X-SLURM-USER-TOKEN", endpoint_.token}};
  auto response = transport_->RoundTrip(request);
  if (!response) {
    Error e = response.error();
    if (e.code == ErrorCode::kUnavailable) {
      e.message = fmt::format(
          "cannot {}: {}. Is slurmrestd running? Start the local cluster with `bmas slurm up`, "
          "or set the address of a running slurmrestd in the cluster config",
          what, e.message);
    }
    return e;
  }
  if (auto e = ErrorFromResponse(response->status, response->body, what, endpoint_.user)) {
    return *e;
  }
  return response;
}

Result<std::string> SlurmRestClient::Ping() {
  auto r = Call("GET", fmt::format("{}/ping", kApiPrefix), {}, "ping slurmrestd");
  if (!r) return r.error();
  return ParsePingResponse(r->body);
}

Result<int64_t> SlurmRestClient::ControllerTime() {
  auto r = Call("GET", fmt::format("{}/diag", kApiPrefix), {}, "ask slurmctld's diag");
  if (!r) return r.error();
  return ParseDiagResponse(r->body);
}

Result<int64_t> SlurmRestClient::Submit(const JobSpec& spec) {
  auto body = RenderJobSubmit(spec);
  if (!body) return body.error();
  const std::string what =
      spec.name.empty() ? std::string("submit a job") : fmt::format("submit job \"{}\"", spec.name);
  auto r = Call("POST", fmt::format("{}/job/submit", kApiPrefix), std::move(*body), what);
  if (!r) return r.error();
  return ParseSubmitResponse(r->body);
}

Result<std::vector<JobInfo>> SlurmRestClient::Jobs() {
  auto r = Call("GET", fmt::format("{}/jobs", kApiPrefix), {}, "list jobs");
  if (!r) return r.error();
  return ParseJobsResponse(r->body);
}

Result<std::vector<JobInfo>> SlurmRestClient::AccountedJobs(int64_t seconds) {
  auto r = Call("GET", fmt::format("/slurmdb/v0.0.38/jobs?start_time=now-{}", seconds), {},
                "list slurmdbd's jobs");
  if (!r) {
    // slurmdbd answers an empty result with an error of its own.
    if (r.error().message.find("Nothing found") != std::string::npos) {
      return std::vector<JobInfo>{};
    }
    return r.error();
  }
  return ParseDbJobsResponse(r->body);
}

Result<JobInfo> SlurmRestClient::Job(int64_t id) {
  auto r =
      Call("GET", fmt::format("{}/job/{}", kApiPrefix, id), {}, fmt::format("show job {}", id));
  if (!r) return r.error();
  auto jobs = ParseJobsResponse(r->body);
  if (!jobs) return jobs.error();
  for (JobInfo& job : *jobs) {
    if (job.id == id) return std::move(job);
  }
  return NotFound(fmt::format("slurmctld does not know job {}", id), "job_id");
}

Result<void> SlurmRestClient::Cancel(int64_t id, int signal) {
  std::string target = fmt::format("{}/job/{}", kApiPrefix, id);
  if (signal != 0) {
    auto name = SlurmSignalName(signal);
    if (!name) return name.error();
    target += "?signal=" + *name;
  }
  const std::string what =
      signal == 0 ? fmt::format("cancel job {}", id) : fmt::format("signal job {}", id);
  auto r = Call("DELETE", std::move(target), {}, what);
  if (!r) return r.error();
  return {};
}

Result<std::vector<NodeInfo>> SlurmRestClient::Nodes() {
  auto r = Call("GET", fmt::format("{}/nodes", kApiPrefix), {}, "list nodes");
  if (!r) return r.error();
  return ParseNodesResponse(r->body);
}

Result<std::string> HttpGet(const std::string& address, const std::string& target,
                            const std::string& peer, const std::string& authorization,
                            std::chrono::milliseconds timeout, const std::string& ca_file) {
  auto endpoint = ParseOperatorAddress(address, ca_file);
  if (!endpoint) return endpoint.error();
  auto transport =
      endpoint->tls
          ? NewHttpsTransport(endpoint->host, endpoint->port, ca_file, timeout, peer)
          : NewTcpHttpTransport(endpoint->host, endpoint->port, timeout, peer);
  ClientRequest request{"GET", target, {}, {}};
  if (!authorization.empty()) request.headers.emplace_back("Authorization", authorization);
  auto r = transport->RoundTrip(request);
  if (!r) return r.error();
  if (r->status != 200) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("{} at {} answered {} to {}", peer, address, r->status, target)};
  }
  return std::move(r->body);
}

}  // namespace bmas
