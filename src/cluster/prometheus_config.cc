#include "cluster/prometheus_config.h"

#include <set>

#include <fmt/format.h>

namespace bmas::cluster {
namespace {

// A YAML double-quoted scalar.
std::string Quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string AgentScrapeConfig(const Cluster& inventory, const AgentScrape& scrape) {
  std::string out = fmt::format(
      "# The agents of cluster {} (`bmas cluster prometheus-config`): /metrics over TLS, each\n"
      "# certificate checked against the cluster CA and the host name dialled, with the\n"
      "# operator secret as the bearer token.\n"
      "scrape_configs:\n"
      "  - job_name: \"bmas-agents\"\n"
      "    scrape_interval: {}s\n"
      "    scheme: https\n"
      "    metrics_path: /metrics\n"
      "    tls_config:\n"
      "      ca_file: {}\n"
      "      insecure_skip_verify: false\n"
      "    authorization:\n"
      "      type: Bearer\n"
      "      credentials_file: {}\n"
      "    static_configs:\n",
      inventory.slurm.cluster_name.empty() ? "(unnamed)" : inventory.slurm.cluster_name,
      scrape.interval_s, Quoted(scrape.ca_file), Quoted(scrape.bearer_file));
  std::set<std::string> seen;
  for (const Node& n : inventory.nodes) {
    // The machine: a layout node's host, else the node's host name (its certificate's name).
    const std::string host = !n.host.empty()        ? n.host
                             : !n.hostname.empty() ? n.hostname
                                                   : n.name;
    if (!seen.insert(host).second) continue;
    out += fmt::format("      - targets: [{}]\n        labels:\n          node: {}\n",
                       Quoted(fmt::format("{}:{}", host, scrape.port)),
                       Quoted(n.host.empty() ? n.name : n.host));
  }
  if (seen.empty()) out += "      []\n";
  return out;
}

}  // namespace bmas::cluster
