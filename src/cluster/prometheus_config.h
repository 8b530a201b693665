#pragma once

// A Prometheus scrape config for the cluster's agents (`bmas cluster prometheus-config`): each
// host's agent serves /metrics (the DCGM exporter's GPU names) over TLS with its node
// certificate (agent/agent_listen.h), behind the operator secret. Prometheus checks each
// certificate against the cluster CA and the host name it dials, and sends the secret as a
// bearer token. Pure: text in, text out.

#include <cstdint>
#include <string>

#include "core/cluster.h"

namespace bmas::cluster {

// The port the cluster's agents serve /metrics on unless told otherwise (the dcgm-exporter's).
inline constexpr uint16_t kDefaultAgentMetricsPort = 9400;

struct AgentScrape {
  uint16_t port = kDefaultAgentMetricsPort;
  std::string ca_file = "/etc/prometheus/bmas-ca.crt";  // a copy of the cluster CA's certificate
  // A copy of the operator secret (<state dir>/run/operator.secret) that Prometheus can read.
  std::string bearer_file = "/etc/prometheus/bmas-operator.secret";
  int interval_s = 30;
};

// prometheus.yml with one job, `bmas-agents`: `scheme: https`, `tls_config.ca_file`,
// `authorization.credentials_file` and one target per host of `inventory` (a GPU's layout
// nodes share their host's agent), labelled with its node name. Every string is quoted.
std::string AgentScrapeConfig(const Cluster& inventory, const AgentScrape& scrape);

}  // namespace bmas::cluster
