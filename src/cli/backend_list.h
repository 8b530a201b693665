#pragma once

// What `bmas gateway backend list` shows: every backend a gateway uses, where each comes from
// (the config file, `bmas gateway backend add`, the gateway's own --backend flags) and its
// health, merged from the config, the store and the running gateway's /metrics. Pure: the
// caller reads the three and probes backends itself.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bmas {

// A backend as the running gateway reports it.
struct RunningBackend {
  std::string url;
  bool healthy = false;
  bool added = false;     // from the store, not given when the gateway started
  bool draining = false;  // removed from the store; its requests in flight finish
};

// The backends in a gateway's /metrics text: the series bmas_gateway_backend_healthy, _added
// and _draining, labelled {backend="URL"}. Empty when it has none.
std::vector<RunningBackend> ParseRunningBackends(std::string_view metrics);

struct BackendRow {
  std::string url;
  std::vector<std::string> origins;  // "config", "added", "command line" or "removed"
  std::string health;                // "" when no gateway answered: the caller probes
  std::optional<bool> healthy;       // nullopt while not known
};

// Each URL once: the config's, then the store's (`added`), then the others the running gateway
// has. URLs are compared as given: normalize them first (gateway::ParseBackendUrl). `running`
// is nullopt when no gateway answered; the rows' health is then left to the caller.
std::vector<BackendRow> MergeBackends(const std::vector<std::string>& config,
                                      const std::vector<std::string>& added,
                                      const std::optional<std::vector<RunningBackend>>& running);

// A table (URL, ORIGIN, HEALTH), or a JSON array of {url, origins, health, healthy}.
std::string FormatBackends(const std::vector<BackendRow>& rows, bool json);

}  // namespace bmas
