// What `bmas cluster store-tls` gives the controller's PostgreSQL: TLS only, one certificate
// line per node tied to its address and name, and a role that can do little.

#include "cluster/store_tls.h"

#include <gtest/gtest.h>

#include "core/cluster.h"

namespace bmas::cluster {
namespace {

Cluster Inventory() {
  return ParseCluster(
      "[cluster]\ncontroller = { name = \"mgs1\", address = \"10.0.0.1\" }\n"
      "[[cluster.nodes]]\nnames = \"oss[01-02]\"\naddress = \"10.0.0.[11-12]\"\ncpus = 8\n"
      "memory_gb = 16\n[cluster.nodes.gpus]\ncount = 1\ntype = \"h100\"\nmemory_gb = 80\n"
      "[[cluster.partitions]]\nname = \"batch\"\nnodes = \"ALL\"\ndefault = true\n",
      "inventory.toml");
}

TEST(StoreTlsTest, EachNodesCertificateOpensTheRoleFromItsOwnAddressOnlyAndOverTls) {
  const StoreTlsTexts t = RenderStoreTls(Inventory(), "/etc/bmas/postgresql", "bmas");
  EXPECT_NE(t.hba.find("hostssl bmas bmas_node 10.0.0.11/32 cert map=bmas-oss01\n"),
            std::string::npos)
      << t.hba;
  EXPECT_NE(t.hba.find("hostssl bmas bmas_node 10.0.0.12/32 cert map=bmas-oss02\n"),
            std::string::npos)
      << t.hba;
  EXPECT_EQ(t.hba.find("\nhost "), std::string::npos) << "no plain-text line: " << t.hba;
  EXPECT_EQ(t.hba.find("md5"), std::string::npos);
  EXPECT_EQ(t.hba.find("password"), std::string::npos);
  EXPECT_NE(t.ident.find("bmas-oss01 oss01 bmas_node\n"), std::string::npos) << t.ident;
  EXPECT_NE(t.ident.find("bmas-oss02 oss02 bmas_node\n"), std::string::npos) << t.ident;
  EXPECT_NE(t.conf.find("listen_addresses = 'localhost,10.0.0.1'"), std::string::npos);
  EXPECT_NE(t.conf.find("ssl = on"), std::string::npos);
  EXPECT_NE(t.conf.find("ssl_ca_file = '/etc/bmas/postgresql/ca.crt'"), std::string::npos);
}

TEST(StoreTlsTest, TheNodeRoleReadsLimitsAndAddsIdleRecordsAndNothingMore) {
  const std::string g = RenderStoreTls(Inventory(), "/d", "bmas").grants;
  EXPECT_NE(g.find("GRANT SELECT ON bmas_schema, users TO \"bmas_node\""), std::string::npos);
  EXPECT_NE(g.find("GRANT SELECT, INSERT ON idle_actions TO \"bmas_node\""), std::string::npos);
  EXPECT_NE(g.find("PASSWORD NULL"), std::string::npos);
  for (const char* never : {"api_keys", "usage", "UPDATE", "DELETE", "ALL PRIVILEGES", "CREATE ON"}) {
    EXPECT_EQ(g.find(never), std::string::npos) << never << " in " << g;
  }
}

}  // namespace
}  // namespace bmas::cluster
