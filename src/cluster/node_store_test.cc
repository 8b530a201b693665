// Where a node's [store] url points once it joined: the controller's PostgreSQL over TLS with the
// node's certificate, whatever form the controller's own URL takes.

#include "cluster/node_store.h"

#include <gtest/gtest.h>

#include <toml++/toml.h>

#include "cluster/node_join.h"

namespace bmas::cluster {
namespace {

TEST(NodeStoreTest, NodesReachTheControllersStoreByItsNameUnlessTheUrlNamesAnotherHost) {
  const struct {
    const char* url;
    const char* host;
    const char* port;
    const char* database;
  } cases[] = {
      {"postgresql:///bmas?host=/var/run/postgresql", "mgs1", "5432", "bmas"},
      {"postgresql://bmas@localhost/bmas", "mgs1", "5432", "bmas"},
      {"postgresql://bmas@127.0.0.1:5433/lab", "mgs1", "5433", "lab"},
      {"postgresql://bmas@db1:6543/bmas?passfile=/etc/bmas/pgpass", "db1", "6543", "bmas"},
      {"postgres://10.0.0.5/bmasdb", "10.0.0.5", "5432", "bmasdb"},
  };
  for (const auto& c : cases) {
    auto server = NodeStoreServerFor(c.url, "mgs1");
    ASSERT_TRUE(server) << c.url << ": " << server.error().message;
    ASSERT_TRUE(server->has_value()) << c.url;
    EXPECT_EQ((*server)->host, c.host) << c.url;
    EXPECT_EQ((*server)->port, c.port) << c.url;
    EXPECT_EQ((*server)->database, c.database) << c.url;
  }
  // SQLite (no URL): each node keeps its own file, as before.
  auto none = NodeStoreServerFor("", "mgs1");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(NodeStoreServerFor("postgresql://db1/bmas?sslmode=bogus&&=", "mgs1"));
}

TEST(NodeStoreTest, TheNodesUrlIsVerifyFullWithItsOwnCertificateAndNoPassword) {
  const std::string url = NodeStoreUrl({"mgs1", "5432", "bmas"}, "/etc/bmas");
  EXPECT_EQ(url,
            "postgresql://bmas_node@mgs1:5432/bmas?sslmode=verify-full&sslrootcert=/etc/bmas/"
            "ca.crt&sslcert=/etc/bmas/node.crt&sslkey=/etc/bmas/node.key");
}

TEST(NodeStoreTest, TheJoinWritesTheNodesStoreUrlWhenTheInventoryNamesPostgres) {
  const std::string inventory =
      "[cluster]\ncontroller = { name = \"mgs1\", address = \"10.0.0.1\" }\n"
      "[store]\nurl = \"postgresql:///bmas?host=/var/run/postgresql\"\n";
  auto node = NodeBmasToml(inventory, "/etc/bmas/ca.crt");
  ASSERT_TRUE(node) << node.error().message;
  EXPECT_EQ(toml::parse(*node)["store"]["url"].value_or(std::string()),
            NodeStoreUrl({"mgs1", "5432", "bmas"}, "/etc/bmas"));
  // No [store] url: the node's file has none either.
  auto sqlite =
      NodeBmasToml("[cluster]\ncontroller = { name = \"mgs1\", address = \"10.0.0.1\" }\n",
                   "/etc/bmas/ca.crt");
  ASSERT_TRUE(sqlite) << sqlite.error().message;
  EXPECT_FALSE(toml::parse(*sqlite)["store"]["url"].is_value());
}

}  // namespace
}  // namespace bmas::cluster
