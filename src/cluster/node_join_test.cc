#include "cluster/node_join.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <filesystem>
#include <thread>

#include <toml++/toml.h>

#include "cluster/fake_node_daemons.h"
#include "cluster/join_service.h"
#include "cluster/join_tls.h"
#include "cluster/node_files.h"
#include "core/cluster.h"

namespace bmas::cluster {
namespace {

namespace fs = std::filesystem;

using FakeDaemons = FakeNodeDaemons;

class NodeJoinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "installs files as root (munge's key)";
    char templ[] = "/tmp/bmas-node-join-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
    now_ = static_cast<int64_t>(std::time(nullptr));
    auto ca = MakeClusterCa("lab", now_);
    ASSERT_TRUE(ca);
    material_.ca = *ca;
    auto replica_ca = MakeClusterCa("lab replicas", now_);
    ASSERT_TRUE(replica_ca);
    material_.replica_ca = *replica_ca;
    material_.nodes = {{"oss01", "10.0.0.11"}};
    material_.munge_key = std::string(1024, 'k');
    material_.bmas_toml = fmt::format(
        "[cluster]\ncontroller = {{ name = \"mgs1\", address = \"127.0.0.1\" }}\n"
        "[cluster.slurm]\nprolog = \"{0}/hooks/prolog\"\nepilog = \"{0}/hooks/epilog\"\n"
        "spool_dir = \"{0}/spool\"\n"
        "[[cluster.nodes]]\nnames = \"oss01\"\naddress = \"10.0.0.11\"\ncpus = 4\n"
        "memory_mib = 1024\n[cluster.nodes.gpus]\ncount = 2\ntype = \"h100\"\nmemory_gb = 80\n"
        "[[cluster.partitions]]\nname = \"batch\"\nnodes = \"ALL\"\ndefault = true\n",
        dir_);
    material_.prolog = "#!/bin/sh\nexit 0\n";
    material_.epilog = "#!/bin/sh\nexit 0\n";
    material_.operator_secret = "00112233445566778899aabbccddeeff";
    token_.address = "127.0.0.1";
    token_.secret = std::string(kJoinSecretBytes, 's');
    token_.expires_at = now_ + 3600;
    token_.ca_sha256 = *CertificateSha256(material_.ca.cert_pem);
    records_ = {RecordOf(token_)};
    auto server_cert = IssueNodeCertificate(material_.ca, {"mgs1", "127.0.0.1"}, now_);
    ASSERT_TRUE(server_cert);
    JoinServerOptions options;
    options.host = "127.0.0.1";
    options.server = *server_cert;
    options.ca_cert_pem = material_.ca.cert_pem;
    auto server = ListenForJoins(
        options,
        [this](const JoinRequest& r, const std::string&) {
          ++asked_;
          auto reply = DecideJoin(material_, records_, r, now_);
          if (reply) material_.node_certs[r.host] = reply->node_cert_pem;
          return reply;
        },
        [this](const std::string& host, const std::string& cert, const std::string&) {
          return DecideLxdPeers(material_, host, cert, now_);
        });
    ASSERT_TRUE(server) << server.error().message;
    server_ = std::move(*server);
    token_.port = server_->port();
    thread_ = std::thread([this] { server_->Run(false); });
    options_.host = "oss01";
    options_.address = "10.0.0.11";
    options_.paths.config_dir = dir_ + "/etc-bmas";
    options_.paths.munge_key = dir_ + "/munge/munge.key";
    options_.paths.run_dir = dir_ + "/run";
    options_.paths.state_dir = dir_ + "/state";
    options_.replica_account = "nobody";  // the replica key's owner
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string dir_;
  int64_t now_ = 0;
  JoinMaterial material_;
  JoinToken token_;
  std::vector<TokenRecord> records_;
  std::unique_ptr<JoinServer> server_;
  std::thread thread_;
  std::atomic<int> asked_{0};
  NodeJoinOptions options_;
  FakeDaemons daemons_;
};

TEST_F(NodeJoinTest, AJoinWritesTheFilesStartsTheDaemonsAndASecondOneDoesNothing) {
  auto report = JoinNode(token_, options_, daemons_, now_);
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_FALSE(report->already_joined);
  EXPECT_EQ(report->written.size(), 10u);
  EXPECT_EQ(report->started, (std::vector<std::string>{"munged", "slurmd", "agent"}));
  EXPECT_EQ(daemons_.agent_config_, dir_ + "/etc-bmas/bmas.toml");
  auto key = ReadNodeFile(dir_ + "/etc-bmas/node.key");
  ASSERT_TRUE(key && *key);
  EXPECT_EQ((*key)->mode, 0600u);
  auto munge = ReadNodeFile(dir_ + "/munge/munge.key");
  ASSERT_TRUE(munge && *munge);
  EXPECT_EQ((*munge)->contents, material_.munge_key);
  EXPECT_EQ((*munge)->mode, 0400u);
  EXPECT_NE((*munge)->uid, 0u);  // munge's
  EXPECT_TRUE(fs::exists(dir_ + "/hooks/prolog"));
  EXPECT_EQ(daemons_.args_, (std::vector<std::string>{"-D", "--conf-server", "127.0.0.1:6817"}));
  // The agent asks for the controller's operator secret, root's alone, and listens on the
  // node's address over TLS with the node's certificate.
  auto secret = ReadNodeFile(options_.paths.OperatorSecret());
  ASSERT_TRUE(secret && *secret);
  EXPECT_EQ((*secret)->contents, material_.operator_secret + "\n");
  EXPECT_EQ((*secret)->mode, 0600u);
  EXPECT_EQ((*secret)->uid, 0u);
  auto toml = ReadNodeFile(dir_ + "/etc-bmas/bmas.toml");
  ASSERT_TRUE(toml && *toml);
  const toml::table node = toml::parse((*toml)->contents);
  EXPECT_EQ(node["agent"]["listen"].value_or(std::string()), "10.0.0.11:9400");
  EXPECT_EQ(node["agent"]["tls_cert"].value_or(std::string()), dir_ + "/etc-bmas/node.crt");
  EXPECT_EQ(node["agent"]["tls_key"].value_or(std::string()), dir_ + "/etc-bmas/node.key");
  EXPECT_EQ(node["agent"]["ca"].value_or(std::string()), dir_ + "/etc-bmas/ca.crt");

  auto again = JoinNode(token_, options_, daemons_, now_);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->already_joined);
  EXPECT_TRUE(again->written.empty());
  EXPECT_TRUE(again->started.empty());
  EXPECT_EQ(asked_, 1);  // the second never asked the controller
}

TEST_F(NodeJoinTest, TheReplicaKeyIsTheReplicaAccountsAloneAndItsCertificateTheReplicaCas) {
  const passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  auto report = JoinNode(token_, options_, daemons_, now_);
  ASSERT_TRUE(report) << report.error().message;
  auto key = ReadNodeFile(dir_ + "/etc-bmas/replica.key");
  ASSERT_TRUE(key && *key);
  EXPECT_EQ((*key)->mode, 0600u);
  EXPECT_EQ((*key)->uid, nobody->pw_uid);
  auto cert = ReadNodeFile(dir_ + "/etc-bmas/replica.crt");
  ASSERT_TRUE(cert && *cert);
  EXPECT_TRUE(VerifyPeerCertificate(material_.replica_ca.cert_pem, (*cert)->contents, now_,
                                    "10.0.0.11"));
  EXPECT_FALSE(VerifyPeerCertificate(material_.ca.cert_pem, (*cert)->contents, now_, "oss01"));
  // The replica jobs' working directory, the account's.
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/state/replicas").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, nobody->pw_uid);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

// Root never follows a link where the replicas' directory goes: a symlink planted there (to a
// directory root owns) fails the join, which names the step, and the link's target keeps its
// owner.
TEST_F(NodeJoinTest, ALinkInPlaceOfTheReplicasDirectoryIsRefusedAndNothingIsGivenAway) {
  const std::string target = dir_ + "/roots";
  ASSERT_TRUE(fs::create_directories(target));
  ASSERT_TRUE(fs::create_directories(dir_ + "/state"));
  fs::create_directory_symlink(target, dir_ + "/state/replicas");
  auto report = JoinNode(token_, options_, daemons_, now_);
  ASSERT_FALSE(report);
  EXPECT_NE(report.error().message.find("making the replicas' directory"), std::string::npos)
      << report.error().message;
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_FALSE(fs::exists(dir_ + "/etc-bmas/replica.key"));  // the join was undone
}

TEST_F(NodeJoinTest, WithoutTheReplicaAccountTheKeyStaysRootsAndANoteSaysWhatToDo) {
  options_.replica_account = "bmas-no-such-account";
  auto report = JoinNode(token_, options_, daemons_, now_);
  ASSERT_TRUE(report) << report.error().message;
  auto key = ReadNodeFile(dir_ + "/etc-bmas/replica.key");
  ASSERT_TRUE(key && *key);
  EXPECT_EQ((*key)->uid, 0u);
  ASSERT_FALSE(report->notes.empty());
  EXPECT_NE(report->notes.back().find("useradd --system"), std::string::npos)
      << report->notes.back();
}

TEST_F(NodeJoinTest, AControllerWithoutAReplicaCaIsANoteNamingTheFix) {
  material_.replica_ca = {};
  auto report = JoinNode(token_, options_, daemons_, now_);
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/etc-bmas/replica.key"));
  ASSERT_EQ(report->notes.size(), 1u);
  EXPECT_NE(report->notes[0].find("`bmas cluster init` again"), std::string::npos)
      << report->notes[0];
}

TEST_F(NodeJoinTest, AJoinedNodeLearnsTheNodesThatJoinedAfterItWhenItJoinsAgain) {
  material_.bmas_toml += "[lxd]\nlisten = \":8443\"\nnode_dir = \"/elsewhere\"\n";
  auto first = JoinNode(token_, options_, daemons_, now_);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(daemons_.lxd_starts_, 1);
  EXPECT_EQ(first->lxd, "lxd: running\n");
  EXPECT_EQ(first->image, "imported");
  EXPECT_FALSE(fs::exists(options_.paths.config_dir + "/lxd-peers"));
  // The node's LXD looks for the join's certificates where the join put them.
  auto toml = toml::parse_file(options_.paths.config_dir + "/bmas.toml");
  EXPECT_EQ(toml["lxd"]["node_dir"].value_or(std::string()), options_.paths.config_dir);

  // oss02 joins after; a peer that left still has a file here.
  material_.nodes.push_back({"oss02", "10.0.0.12"});
  auto oss02 = IssueNodeCertificate(material_.ca, {"oss02", "10.0.0.12"}, now_);
  ASSERT_TRUE(oss02);
  material_.node_certs["oss02"] = oss02->cert_pem;
  const std::string peers = options_.paths.config_dir + "/lxd-peers";
  fs::create_directories(peers);
  FileInstall stale;
  ASSERT_TRUE(stale.Put({peers + "/oss09.crt", "left", 0644, 0, 0}));

  auto again = JoinNode(token_, options_, daemons_, now_);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->already_joined);
  EXPECT_TRUE(again->notes.empty()) << again->notes.front();
  EXPECT_EQ(again->written, (std::vector<std::string>{peers + "/oss02.crt"}));
  EXPECT_EQ(again->removed, (std::vector<std::string>{peers + "/oss09.crt"}));
  auto kept = ReadNodeFile(peers + "/oss02.crt");
  ASSERT_TRUE(kept && *kept);
  EXPECT_EQ((*kept)->contents, oss02->cert_pem);
  EXPECT_EQ((*kept)->mode, 0644u);
  EXPECT_EQ(daemons_.lxd_starts_, 2);  // `lxd up` again: it applies the new peer
  EXPECT_EQ(asked_, 1);                // no second join: the node asked with its certificate

  // The controller down: the second join still succeeds, and says what it could not do.
  server_->Stop();
  thread_.join();
  auto offline = JoinNode(token_, options_, daemons_, now_);
  ASSERT_TRUE(offline) << offline.error().message;
  ASSERT_EQ(offline->notes.size(), 1u);
  EXPECT_NE(offline->notes[0].find("were not refreshed"), std::string::npos) << offline->notes[0];
}

TEST_F(NodeJoinTest, NoImageInTheCacheIsANoteNotAFailure) {
  material_.bmas_toml += "[lxd]\nlisten = \":8443\"\n";
  daemons_.cached_image_ = false;
  auto r = JoinNode(token_, options_, daemons_, now_);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->image.empty());
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_EQ(r->notes[0], "no default workspace image: the cache holds no image");
  EXPECT_TRUE(daemons_.agent_);
}

TEST_F(NodeJoinTest, AnLxdThatDoesNotStartUndoesTheJoin) {
  material_.bmas_toml += "[lxd]\nlisten = \":8443\"\n";
  daemons_.fail_lxd_ = true;
  auto r = JoinNode(token_, options_, daemons_, now_);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message.rfind("starting LXD: ", 0), 0u) << r.error().message;
  EXPECT_FALSE(fs::exists(options_.paths.config_dir + "/node.key"));
  EXPECT_FALSE(daemons_.slurmd_);
}

TEST_F(NodeJoinTest, ADynamicNodeTakesItsResourcesFromTheInventory) {
  options_.dynamic = true;
  ASSERT_TRUE(JoinNode(token_, options_, daemons_, now_));
  EXPECT_EQ(daemons_.args_,
            (std::vector<std::string>{"-D", "--conf-server", "127.0.0.1:6817", "-Z", "--conf",
                                      "CPUs=4 RealMemory=1024 Gres=gpu:h100:2"}));
}

TEST_F(NodeJoinTest, AFailedStepUndoesTheFilesAndDaemonsAndNamesTheStep) {
  // A file of the node's own that the join replaces, and must put back.
  fs::create_directories(dir_ + "/hooks");
  FileInstall mine;
  ASSERT_TRUE(mine.Put({dir_ + "/hooks/prolog", "#!/bin/sh\necho mine\n", 0755, 0, 0}));
  daemons_.fail_slurmd_ = true;
  auto report = JoinNode(token_, options_, daemons_, now_);
  ASSERT_FALSE(report);
  EXPECT_EQ(report.error().message.rfind("starting slurmd: ", 0), 0u) << report.error().message;
  EXPECT_EQ(daemons_.stops_, 1);
  EXPECT_FALSE(fs::exists(dir_ + "/etc-bmas"));
  EXPECT_FALSE(fs::exists(dir_ + "/munge"));
  EXPECT_FALSE(fs::exists(dir_ + "/hooks/epilog"));
  auto prolog = ReadNodeFile(dir_ + "/hooks/prolog");
  ASSERT_TRUE(prolog && *prolog);
  EXPECT_EQ((*prolog)->contents, "#!/bin/sh\necho mine\n");
}

TEST_F(NodeJoinTest, AnAgentThatDoesNotStartUndoesTheWholeJoin) {
  daemons_.fail_agent_ = true;
  auto report = JoinNode(token_, options_, daemons_, now_);
  ASSERT_FALSE(report);
  EXPECT_EQ(report.error().message.rfind("starting the agent: ", 0), 0u) << report.error().message;
  EXPECT_EQ(daemons_.stops_, 1);
  EXPECT_FALSE(daemons_.slurmd_);
  EXPECT_FALSE(daemons_.munge_);
  EXPECT_FALSE(fs::exists(dir_ + "/etc-bmas"));
  EXPECT_FALSE(fs::exists(dir_ + "/munge"));
}

TEST_F(NodeJoinTest, TheNodesBmasTomlPointsUsersAtACaTheyCanRead) {
  ASSERT_TRUE(JoinNode(token_, options_, daemons_, now_));
  auto toml = ReadNodeFile(dir_ + "/etc-bmas/bmas.toml");
  ASSERT_TRUE(toml && *toml);
  EXPECT_EQ((*toml)->mode, 0644u);
  const Cluster node = ParseCluster((*toml)->contents, "bmas.toml");
  EXPECT_EQ(node.slurm.slurmrestd_ca, dir_ + "/etc-bmas/ca.crt");
  EXPECT_EQ(node.slurm.prolog, dir_ + "/hooks/prolog");  // the rest as the controller sent it
  EXPECT_EQ(node.nodes.size(), 1u);
  auto ca = ReadNodeFile(node.slurm.slurmrestd_ca);
  ASSERT_TRUE(ca && *ca);
  EXPECT_EQ((*ca)->mode, 0644u);
  EXPECT_EQ((*ca)->contents, material_.ca.cert_pem);
  auto key = ReadNodeFile(dir_ + "/etc-bmas/node.key");
  ASSERT_TRUE(key && *key);
  EXPECT_EQ((*key)->mode, 0600u);
}

TEST(NodeBmasTomlTest, ReplacesACaPathTheControllerGaveAndAddsTheTableWhenAbsent) {
  auto replaced = NodeBmasToml(
      "[cluster]\ncontroller = { name = \"mgs1\", address = \"10.0.0.1\" }\n"
      "[cluster.slurm]\nslurmrestd = \"https://mgs1:6821\"\n"
      "slurmrestd_ca = \"/var/lib/bmas/cluster/ca.crt\"\n",
      "/etc/bmas/ca.crt");
  ASSERT_TRUE(replaced) << replaced.error().message;
  EXPECT_EQ(replaced->find("/var/lib/bmas"), std::string::npos) << *replaced;
  const toml::table back = toml::parse(*replaced);
  EXPECT_EQ(back["cluster"]["slurm"]["slurmrestd_ca"].value_or(std::string()), "/etc/bmas/ca.crt");
  EXPECT_EQ(back["cluster"]["slurm"]["slurmrestd"].value_or(std::string()), "https://mgs1:6821");
  EXPECT_EQ(back["cluster"]["controller"]["address"].value_or(std::string()), "10.0.0.1");
  auto added = NodeBmasToml("[cluster]\ncontroller = { name = \"mgs1\", address = \"10.0.0.1\" }\n",
                            "/etc/bmas/ca.crt");
  ASSERT_TRUE(added) << added.error().message;
  EXPECT_EQ(toml::parse(*added)["cluster"]["slurm"]["slurmrestd_ca"].value_or(std::string()),
            "/etc/bmas/ca.crt");
  EXPECT_FALSE(NodeBmasToml("[cluster", "/etc/bmas/ca.crt"));
  EXPECT_FALSE(NodeBmasToml("[gateway]\nport = 1\n", "/etc/bmas/ca.crt"));
}

TEST(WithAgentListenerTest, TheNodesAddressWithTheControllersPortOrTheDefault) {
  auto plain = WithAgentListener("[cluster]\n", "10.0.0.11", "/etc/bmas");
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(toml::parse(*plain)["agent"]["listen"].value_or(std::string()), "10.0.0.11:9400");
  auto port = WithAgentListener("[agent]\nlisten = \"0.0.0.0:9500\"\nca = \"/x\"\n", "fd00::11",
                                "/etc/bmas");
  ASSERT_TRUE(port) << port.error().message;
  const toml::table back = toml::parse(*port);
  EXPECT_EQ(back["agent"]["listen"].value_or(std::string()), "[fd00::11]:9500");
  EXPECT_EQ(back["agent"]["ca"].value_or(std::string()), "/etc/bmas/ca.crt");
  EXPECT_FALSE(WithAgentListener("[agent", "10.0.0.11", "/etc/bmas"));
}

TEST_F(NodeJoinTest, AMungedThatRunsWithAnotherKeyStopsTheJoin) {
  daemons_.munge_ = true;  // e.g. the system's, started before the node joined
  auto report = JoinNode(token_, options_, daemons_, now_);
  ASSERT_FALSE(report);
  EXPECT_EQ(report.error().message.rfind("starting munged: munged already runs", 0), 0u)
      << report.error().message;
  EXPECT_FALSE(fs::exists(dir_ + "/munge"));
  EXPECT_FALSE(fs::exists(dir_ + "/etc-bmas"));
}

TEST_F(NodeJoinTest, ARefusedJoinLeavesNothing) {
  token_.secret = std::string(kJoinSecretBytes, 'w');
  auto report = JoinNode(token_, options_, daemons_, now_);
  ASSERT_FALSE(report);
  EXPECT_EQ(report.error().message.rfind("asking the controller: ", 0), 0u)
      << report.error().message;
  EXPECT_FALSE(fs::exists(dir_ + "/etc-bmas"));
  EXPECT_FALSE(fs::exists(dir_ + "/munge"));
  EXPECT_EQ(daemons_.starts_, 0);
}

}  // namespace
}  // namespace bmas::cluster
