#include "gateway/backend_source.h"

namespace bmas::gateway {

BackendSet MergeBackendSources(const std::vector<std::string>& added,
                               const std::vector<Deployment>& deployments,
                               const std::vector<ReplicaRecord>& replicas) {
  BackendSet set;
  set.urls = added;
  for (const ReplicaRecord& r : replicas) {
    if (!r.url.empty() && ReplicaTakesRequests(r.state)) set.urls.push_back(r.url);
  }
  for (const Deployment& d : deployments) set.deployed.insert(d.model);
  return set;
}

}  // namespace bmas::gateway
