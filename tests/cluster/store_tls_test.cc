// Issue 25: nodes' records reach the controller's store across the bed's network. PostgreSQL
// runs in mgs1 and listens on its bridge address with what `bmas cluster store-tls` wrote (the
// server certificate from the cluster CA, ssl settings, pg_hba and pg_ident lines, the nodes'
// role). In oss01, with the [store] url `bmas node join` writes and oss01's certificate, an
// idle-GPU record is written and read back in mgs1, and a user's limits are read; the role can
// read no API keys. A connection with no certificate, with another CA's certificate, with
// another node's certificate, or in plain text is refused, and so is a user of oss01 who cannot
// read the node's key.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "cluster/cluster_ca.h"
#include "cluster/cluster_files.h"
#include "cluster/node_join.h"
#include "net_bed.h"
#include "pg_server.h"
#include "store/postgres_store.h"
#include "test_helpers.h"

namespace bmas::testbed {
namespace {

namespace fs = std::filesystem;

void WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

class StoreTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the test bed needs root";
    const char* bmas = std::getenv("BMAS_BINARY");
    if (bmas == nullptr) GTEST_SKIP() << "BMAS_BINARY is not set";
    bmas_ = bmas;
    probe_ = (fs::path(bmas_).parent_path() / "tests/cluster/bmas_store_probe").string();
    ASSERT_TRUE(fs::exists(probe_)) << probe_;
    BedOptions o;
    o.name = "storetls";
    o.nodes = 2;
    auto started = bed_.Start(o);
    ASSERT_TRUE(started) << started.error().message;
    dir_ = bed_.dir() + "/storetls";
    fs::create_directories(dir_);
    now_ = static_cast<int64_t>(std::time(nullptr));
    // The controller's CA, as `bmas cluster init` makes it.
    state_ = dir_ + "/state";
    auto id = cluster::EnsureClusterCa(state_, "netbed", {"10.200.0.1", 6830}, now_);
    ASSERT_TRUE(id) << id.error().message;
    ca_ = id->ca;
    // The inventory names the controller's store by its local socket, as the README says.
    inventory_text_ =
        "[cluster]\ncontroller = { name = \"mgs1\", address = \"10.200.0.1\" }\n"
        "[[cluster.nodes]]\nnames = \"oss[01-02]\"\naddress = \"10.200.0.[11-12]\"\ncpus = 2\n"
        "memory_gb = 1\n[cluster.nodes.gpus]\ncount = 1\ntype = \"h100\"\nmemory_gb = 80\n"
        "[[cluster.partitions]]\nname = \"batch\"\nnodes = \"ALL\"\ndefault = true\n"
        "[store]\nurl = \"postgresql://bmas@localhost/bmas\"\n";
    inventory_ = dir_ + "/inventory.toml";
    WriteFile(inventory_, inventory_text_, 0644);
  }

  void TearDown() override {
    pg_.reset();
    if (!pg_files_.empty()) fs::remove_all(pg_files_);
    if (bmas_.empty()) return;
    bed_.Stop();
    EXPECT_EQ(bed_.Leftovers(), std::vector<std::string>{});
  }

  CommandOutput In(const std::string& host, const std::vector<std::string>& args,
                   const std::string& user = "") {
    auto r = bed_.Run(host, args, user, std::chrono::seconds(60));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  // `node`'s certificate from `ca` in <dir>/<name>/ (node.crt, node.key 0600, and `ca`'s
  // ca.crt), as `bmas node join` leaves them in /etc/bmas; the directory.
  std::string NodeDir(const std::string& name, const cluster::CertAndKey& ca,
                      const cluster::NodeIdentity& node) {
    const std::string d = dir_ + "/" + name;
    fs::create_directories(d);
    auto issued = cluster::IssueNodeCertificate(ca, node, now_);
    EXPECT_TRUE(issued) << issued.error().message;
    WriteFile(d + "/ca.crt", ca_.cert_pem, 0644);
    WriteFile(d + "/node.crt", issued ? issued->cert_pem : "", 0644);
    WriteFile(d + "/node.key", issued ? issued->key_pem : "", 0600);
    return d;
  }

  // The [store] url the join writes into a node's bmas.toml whose files are in `config_dir`.
  std::string NodeUrl(const std::string& config_dir) {
    auto node_toml = cluster::NodeBmasToml(inventory_text_, config_dir + "/ca.crt");
    EXPECT_TRUE(node_toml) << node_toml.error().message;
    return node_toml ? toml::parse(*node_toml)["store"]["url"].value_or(std::string()) : "";
  }

  NetBed bed_;
  std::string bmas_, probe_, dir_, state_, inventory_, inventory_text_, pg_files_;
  cluster::CertAndKey ca_;
  int64_t now_ = 0;
  std::unique_ptr<testing::PgServer> pg_;
};

TEST_F(StoreTlsTest, ANodeWritesIdleRecordsWithItsCertificateAndNothingElseGetsIn) {
  // What the controller's PostgreSQL needs, written by the command an admin runs.
  std::string tmpl = (fs::temp_directory_path() / "bmas-storetls-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  pg_files_ = tmpl;
  ASSERT_EQ(::chmod(pg_files_.c_str(), 0755), 0);
  const std::string files = pg_files_ + "/bmas";
  const std::string account = testing::PgServer::ServerAccount();
  auto wrote = In("mgs1", {bmas_, "--state-dir", state_, "cluster", "store-tls", "--cluster",
                           inventory_, "--out", files, "--pg-account", account});
  ASSERT_EQ(wrote.exit_code, 0) << wrote.out << wrote.err;
  EXPECT_NE(wrote.out.find("pg_hba.conf.bmas >> /etc/postgresql/15/main/pg_hba.conf"),
            std::string::npos)
      << wrote.out;

  // PostgreSQL in mgs1 with those files, on 10.200.0.1:5432 (mgs1's own network namespace).
  auto holder = bed_.Host("mgs1")->holder.pid;
  testing::PgServerOptions po;
  po.wrap = {"nsenter", "-t", std::to_string(holder), "--net", "--mount", "--uts", "--"};
  po.conf = fmt::format("include '{}/bmas-store.conf'", files);
  po.hba = ReadFile(files + "/pg_hba.conf.bmas");
  po.ident = ReadFile(files + "/pg_ident.conf.bmas");
  po.port = 5432;
  auto pg = testing::PgServer::Start(po);
  ASSERT_TRUE(pg) << pg.error().message;
  pg_ = std::move(*pg);
  ASSERT_TRUE(pg_->CreateDatabase("bmas"));
  {
    // bmas on the controller creates its tables (as the database's owner would) and a user.
    auto store = OpenPostgresStore(pg_->Url("bmas"));
    ASSERT_TRUE(store) << store.error().message;
    UserLimits limits;
    limits.workspace.cpus = 3;
    ASSERT_TRUE((*store)->AddUser("alice", limits));
    ASSERT_TRUE((*store)->CreateKey("alice"));
  }
  auto granted = pg_->Psql("bmas", ReadFile(files + "/node-role.sql"));
  ASSERT_TRUE(granted && granted->exit_code == 0) << (granted ? granted->err : "");

  const std::string oss01 = NodeDir("oss01", ca_, {"oss01", "10.200.0.11"});
  const std::string url = NodeUrl(oss01);
  ASSERT_EQ(url.rfind("postgresql://bmas_node@mgs1:5432/bmas?sslmode=verify-full", 0), 0u) << url;

  // oss01's record reaches mgs1; it reads alice's limits, and no API keys.
  auto recorded = In("oss01", {probe_, url, "record", "42", "alice"});
  EXPECT_EQ(recorded.exit_code, 0) << recorded.out << recorded.err;
  auto seen = pg_->Psql("bmas", "SELECT job, user_name, kind FROM idle_actions");
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->out, "42|alice|warn\n");
  auto limits = In("oss01", {probe_, url, "limits", "alice"});
  EXPECT_EQ(limits.out, "cpus=3\n") << limits.err;
  auto keys = In("oss01", {probe_, url, "keys", "alice"});
  EXPECT_NE(keys.exit_code, 0);
  EXPECT_NE(keys.err.find("permission denied"), std::string::npos) << keys.out << keys.err;
  // oss02 with its own certificate, from its own address.
  const std::string oss02 = NodeDir("oss02", ca_, {"oss02", "10.200.0.12"});
  auto second = In("oss02", {probe_, NodeUrl(oss02), "record", "43", "alice"});
  EXPECT_EQ(second.exit_code, 0) << second.out << second.err;

  // Refused: no certificate; another CA's certificate for oss01; oss02's certificate from
  // oss01's address; plain text.
  const std::string bare = url.substr(0, url.find("&sslcert="));
  auto other = cluster::MakeClusterCa("impostor", now_);
  ASSERT_TRUE(other);
  const std::string forged = NodeDir("forged", *other, {"oss01", "10.200.0.11"});
  const std::string forged_url = url.substr(0, url.find("&sslcert=")) +
                                 fmt::format("&sslcert={0}/node.crt&sslkey={0}/node.key", forged);
  const std::string borrowed_url = url.substr(0, url.find("&sslcert=")) +
                                   fmt::format("&sslcert={0}/node.crt&sslkey={0}/node.key", oss02);
  std::string plain = url;
  plain.replace(plain.find("sslmode=verify-full"), 19, "sslmode=disable");
  const struct {
    std::string what, url, fix;
  } refused[] = {
      {"no certificate", bare, "certificate"},
      {"another CA's certificate", forged_url, "certificate"},
      {"oss02's certificate from oss01", borrowed_url, "pg_ident.conf"},
      {"plain text", plain, "hostssl"},
  };
  for (const auto& r : refused) {
    auto out = In("oss01", {probe_, r.url, "record", "44", "alice"});
    EXPECT_NE(out.exit_code, 0) << r.what;
    EXPECT_NE(out.err.find("cannot reach PostgreSQL at mgs1:5432/bmas"), std::string::npos)
        << r.what << ": " << out.err;
    EXPECT_NE(out.err.find(r.fix), std::string::npos) << r.what << ": " << out.err;
  }
  // A user of oss01 cannot use the node's key.
  const std::string user = testing::EnsureUnixUser("bmas-storetls");
  auto as_user = In("oss01", {probe_, url, "record", "45", "alice"}, user);
  EXPECT_NE(as_user.exit_code, 0) << as_user.out;
  auto all = pg_->Psql("bmas", "SELECT job FROM idle_actions ORDER BY job");
  ASSERT_TRUE(all);
  EXPECT_EQ(all->out, "42\n43\n");
}

}  // namespace
}  // namespace bmas::testbed
