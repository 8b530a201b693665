// Per-node LXD certificates (docs/cluster-join.md, "LXD peer trust"), with two LXDs on this host
// as two nodes: A's LXD trusts B's node certificate, which the cluster CA issued for B, and B
// pulls a copy of a workspace from A with that certificate of its own; a certificate of another
// CA, and the certificate of a node that left, are refused. Needs root and LXD, like
// lxd_workspace_integration_test.

#include <sys/stat.h>

#include <ctime>
#include <filesystem>
#include <fstream>

#include "cluster/cluster_ca.h"
#include "lxd_workspace_fixture.h"

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

void WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

// What `bmas node join` leaves in a node's config directory: the CA, and the node's own
// certificate and key.
void WriteNodeFiles(const std::string& dir, const cluster::CertAndKey& ca,
                    const cluster::CertAndKey& node) {
  WriteFile(dir + "/ca.crt", ca.cert_pem, 0644);
  WriteFile(dir + "/node.crt", node.cert_pem, 0644);
  WriteFile(dir + "/node.key", node.key_pem, 0600);
}

TEST_F(LxdWorkspaceTest, EachNodeShowsPeersItsOwnCertificateAndOnlyTrustedNodesGetIn) {
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  auto ca = cluster::MakeClusterCa("test", now);
  auto other_ca = cluster::MakeClusterCa("elsewhere", now);
  ASSERT_TRUE(ca && other_ca);
  auto node_a = cluster::IssueNodeCertificate(*ca, {"nodea", "127.0.0.1"}, now);
  auto node_b = cluster::IssueNodeCertificate(*ca, {"nodeb", "127.0.0.1"}, now);
  auto node_c = cluster::IssueNodeCertificate(*ca, {"nodec", "127.0.0.1"}, now);
  // A certificate for a node name, but from another CA: what someone who does not hold the
  // cluster CA's key can make.
  auto forged_b = cluster::IssueNodeCertificate(*other_ca, {"nodeb", "127.0.0.1"}, now);
  ASSERT_TRUE(node_a && node_b && node_c && forged_b);

  // Node A: joined (its node files), listening, with B, C and a forged D as its peers' files.
  const std::string etc_a = dir_ + "/etc-a", etc_b = dir_ + "/etc-b";
  WriteNodeFiles(etc_a, *ca, *node_a);
  WriteFile(etc_a + "/lxd-peers/nodeb.crt", node_b->cert_pem, 0644);
  WriteFile(etc_a + "/lxd-peers/nodec.crt", node_c->cert_pem, 0644);
  WriteFile(etc_a + "/lxd-peers/noded.crt", forged_b->cert_pem, 0644);
  const int port = FreeTcpPort();
  std::ofstream(config_, std::ios::app)
      << fmt::format("listen = \"127.0.0.1:{}\"\nnode_dir = \"{}\"\n", port, etc_a);
  CommandOutput up_a = Bmas({"lxd", "up"});
  ASSERT_EQ(up_a.exit_code, 0) << up_a.out << up_a.err;
  EXPECT_THAT(up_a.out, HasSubstr("peers reach it with their own node certificates"));
  EXPECT_THAT(up_a.out, HasSubstr("peer trust: trusts 2 peer nodes (added nodeb, nodec)"));
  EXPECT_THAT(up_a.out, HasSubstr("refused noded: "));
  const std::vector<std::string> lxc_a = {"LXD_DIR=" + dir_ + "/lxd"};
  auto listed = RunCommand({"lxc", "query", "/1.0/certificates?recursion=1"}, lxc_a);
  ASSERT_TRUE(listed && listed->exit_code == 0);
  EXPECT_THAT(listed->out, HasSubstr("\"name\": \"bmas-node-nodeb\""));
  EXPECT_THAT(listed->out, HasSubstr("\"restricted\": true"));
  EXPECT_THAT(listed->out, Not(HasSubstr("noded")));
  EXPECT_THAT(listed->out, Not(HasSubstr("bmas-peers"))) << "no shared certificate is made";
  rapidjson::Document status_a = ParseJson(Bmas({"lxd", "status", "--json"}).out);
  const std::string fingerprint_a = Str(At(status_a, "certificate_fingerprint"));
  ASSERT_EQ(fingerprint_a.size(), 64u);
  Create("bmastest1");

  // Node B: joined, no [lxd] cert: it shows A its own node.crt.
  WriteNodeFiles(etc_b, *ca, *node_b);
  const std::string config_b = dir_ + "/bmas-b.toml", state_b = dir_ + "/state-b";
  std::ofstream(config_b) << fmt::format(
      "[lxd]\ndir = \"{}/lxd-b\"\npool_size = \"2GiB\"\nnode_dir = \"{}\"\n"
      "peers = [{{ url = \"https://127.0.0.1:{}\", fingerprint = \"{}\" }}]\n",
      dir_, etc_b, port, fingerprint_a);
  SecondNode b{config_b, state_b};
  CommandOutput up_b = b.Up();
  ASSERT_EQ(up_b.exit_code, 0) << up_b.out << up_b.err;
  auto hook = [&](const std::string& phase, int job) {
    return b.Run({"slurm", "hook", phase},
                 {fmt::format("SLURM_JOB_ID={}", job), "SLURM_JOB_USER=bmastest1",
                  "SLURMD_NODENAME=nodeb", "SLURM_JOB_GPUS="});
  };

  CommandOutput copied = hook("prolog", 7101);
  EXPECT_THAT(copied.out,
              HasSubstr(fmt::format("copied ws-bmastest1 from https://127.0.0.1:{}", port)))
      << copied.out << copied.err;
  CommandOutput released = hook("epilog", 7101);
  EXPECT_THAT(released.out, HasSubstr("deleted ws-bmastest1")) << released.out;

  // A certificate of another CA, for B's very name, in B's place: A does not let it in.
  WriteNodeFiles(etc_b, *ca, *forged_b);
  CommandOutput forged = hook("prolog", 7102);
  EXPECT_THAT(forged.out, HasSubstr("does not trust this node's client certificate"))
      << forged.out;
  EXPECT_THAT(forged.out, Not(HasSubstr("copied")));

  // B leaves: its certificate goes from A's peers, and `bmas lxd trust` on A takes it out.
  WriteNodeFiles(etc_b, *ca, *node_b);
  fs::remove(etc_a + "/lxd-peers/nodeb.crt");
  CommandOutput trust = Bmas({"lxd", "trust"});
  EXPECT_EQ(trust.exit_code, 0) << trust.out << trust.err;
  EXPECT_THAT(trust.out, HasSubstr("trusts 1 peer node (removed nodeb)")) << trust.out;
  CommandOutput gone = hook("prolog", 7103);
  EXPECT_THAT(gone.out, HasSubstr("does not trust this node's client certificate")) << gone.out;
  EXPECT_THAT(gone.out, Not(HasSubstr("copied")));
  EXPECT_EQ(StatusOf("bmastest1"), "Running") << "the workspace on A is untouched";
}

}  // namespace
}  // namespace bmas::testing
