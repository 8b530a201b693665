#include "cluster/prometheus_config.h"

#include <gtest/gtest.h>

namespace bmas::cluster {
namespace {

Cluster Inventory() {
  return ParseCluster(
      "[cluster]\ncontroller = { name = \"mgs1\", address = \"10.0.0.1\" }\n"
      "[cluster.slurm]\ncluster_name = \"ref\"\n"
      "[[cluster.nodes]]\nnames = \"oss01\"\naddress = \"10.0.0.11\"\ncpus = 4\nmemory_mib = 1024\n"
      "[[cluster.nodes]]\nnames = \"oss02\"\naddress = \"10.0.0.12\"\ncpus = 4\nmemory_mib = 1024\n"
      "[[cluster.partitions]]\nname = \"batch\"\nnodes = \"ALL\"\ndefault = true\n",
      "test.toml");
}

TEST(AgentScrapeConfigTest, ScrapesEveryHostOverTlsWithTheCaAndTheSecret) {
  AgentScrape s;
  s.ca_file = "/etc/prometheus/ca.crt";
  s.bearer_file = "/etc/prometheus/op.secret";
  const std::string yaml = AgentScrapeConfig(Inventory(), s);
  for (const char* line :
       {"  - job_name: \"bmas-agents\"\n", "    scheme: https\n",
        "    tls_config:\n      ca_file: \"/etc/prometheus/ca.crt\"\n",
        "      insecure_skip_verify: false\n",
        "    authorization:\n      type: Bearer\n"
        "      credentials_file: \"/etc/prometheus/op.secret\"\n",
        "      - targets: [\"oss01:9400\"]\n        labels:\n          node: \"oss01\"\n",
        "      - targets: [\"oss02:9400\"]\n", "# The agents of cluster ref "}) {
    EXPECT_NE(yaml.find(line), std::string::npos) << line << "\nin:\n" << yaml;
  }
  // Never the secret itself, never plain http.
  EXPECT_EQ(yaml.find("bearer_token:"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("http:"), std::string::npos) << yaml;
}

TEST(AgentScrapeConfigTest, PortAndQuotingFollowTheOptions) {
  AgentScrape s;
  s.port = 9500;
  s.ca_file = "/odd \"dir\"/ca.crt";
  const std::string yaml = AgentScrapeConfig(Inventory(), s);
  EXPECT_NE(yaml.find("[\"oss01:9500\"]"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("ca_file: \"/odd \\\"dir\\\"/ca.crt\""), std::string::npos) << yaml;
}

}  // namespace
}  // namespace bmas::cluster
