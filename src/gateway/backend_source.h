#pragma once

// Where the gateway's backends come from, beyond its command line: URLs an admin added with
// `bmas gateway backend add`, and the inference controller's replicas (`bmas inference`), both
// read from the store every second. Pure: the rows in, the backends to route to out, so that a
// simulator can feed the gateway's admission replicas of its own.

#include <string>
#include <unordered_set>
#include <vector>

#include "store/store.h"

namespace bmas::gateway {

struct BackendSet {
  std::vector<std::string> urls;               // to route to, once their health check passes
  std::unordered_set<std::string> deployed;    // models whose requests queue with no backend up
};

// The added URLs, then each starting or ready replica's URL (a pending one has none; a
// draining one is left out, so that the gateway drains it too); every deployment's model.
BackendSet MergeBackendSources(const std::vector<std::string>& added,
                               const std::vector<Deployment>& deployments,
                               const std::vector<ReplicaRecord>& replicas);

}  // namespace bmas::gateway
