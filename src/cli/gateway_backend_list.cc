// `bmas gateway backend list`: the config's backends, the store's, and the running gateway's
// view of them (its /metrics), or each backend's own /health when no gateway answers.

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "cli/backend_list.h"
#include "cli/commands.h"
#include "common/operator_auth.h"
#include "daemon/gateway_main.h"
#include "daemon/secret.h"
#include "daemon/services.h"
#include "gateway/upstream.h"
#include "slurm/rest_client.h"
#include "store/store.h"

namespace bmas {
namespace {

constexpr std::chrono::milliseconds kTimeout{1000};

// GET `path` below the base URL `url` (http://host:port[/prefix]), sending `authorization`
// when not empty; the body of a 200.
Result<std::string> Get(Services& services, const std::string& url, const std::string& path,
                        const std::string& peer, const std::string& authorization = {}) {
  auto parsed = gateway::ParseBackendUrl(url);
  if (!parsed) return parsed.error();
  std::string host = parsed->host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  const std::string& digits = parsed->port;
  if (std::from_chars(digits.data(), digits.data() + digits.size(), port).ec != std::errc() ||
      port <= 0 || port > 65535) {
    return InvalidArgument(fmt::format("{} {}: port {} is out of range", peer, url, digits));
  }
  auto transport = services.Http(host, static_cast<uint16_t>(port), kTimeout, peer);
  ClientRequest request{"GET", parsed->base_path + path, {}, ""};
  if (!authorization.empty()) request.headers.emplace_back("Authorization", authorization);
  auto response = transport->RoundTrip(request);
  if (!response) return response.error();
  if (response->status != 200) {
    return Error{ErrorCode::kUnavailable, fmt::format("{} at {} answered {} with HTTP {}", peer,
                                                      url, path, response->status)};
  }
  return std::move(response->body);
}

// The backends of the gateway running on `state_dir`, from its operator listener's /metrics;
// an error saying why there is no answer.
Result<std::vector<RunningBackend>> AskGateway(Services& services,
                                               const std::string& state_dir) {
  const std::string path = GatewayOperatorUrlPath(state_dir);
  // In the service account's directory: a link there is not followed (root runs this).
  std::string url(512, '\0');
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  const ssize_t got = fd >= 0 ? read(fd, url.data(), url.size()) : -1;
  if (fd >= 0) close(fd);
  url.resize(got > 0 ? static_cast<size_t>(got) : 0);
  url = url.substr(0, url.find('\n'));
  if (url.empty()) {
    return NotFound(fmt::format("no gateway runs on the state dir {} (none left its address in {})",
                                state_dir, path));
  }
  auto secret = EnsureOperatorSecret(state_dir);
  if (!secret) return secret.error();
  auto metrics = Get(services, url, "/metrics", "the gateway", OperatorBearer(*secret));
  if (!metrics) {
    return Error{metrics.error().code,
                 fmt::format("the gateway that left {} does not answer (it may have been killed): "
                             "{}",
                             path, metrics.error().message)};
  }
  return ParseRunningBackends(*metrics);
}

}  // namespace

int GatewayCommand::ListBackends(GlobalOptions& global, Store& store) {
  const Config config = global.LoadConfigOrDefaults();
  std::vector<std::string> configured;
  for (const std::string& url : config.gateway.backends) {
    auto parsed = gateway::ParseBackendUrl(url);
    configured.push_back(parsed ? parsed->url : url);
  }
  auto added = store.ListBackends();
  if (!added) return ReportFailure("gateway backend list", added.error());
  auto running = AskGateway(*global.services, ResolveStateDir(global.state_dir, config));
  std::vector<BackendRow> rows = MergeBackends(
      configured, *added, running ? std::optional(std::move(*running)) : std::nullopt);
  if (!running) {
    fmt::print(stderr,
               "bmas gateway backend list: {}. HEALTH is each backend's own /health, and "
               "backends given to a gateway on its command line are not listed\n",
               running.error().message);
    for (BackendRow& row : rows) {
      auto health = Get(*global.services, row.url, "/health", "the backend");
      row.healthy = health.has_value();
      row.health = health ? "up (its /health answers)" : "down: " + health.error().message;
    }
  }
  fmt::print("{}", FormatBackends(rows, json_));
  return 0;
}

}  // namespace bmas
