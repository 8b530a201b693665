#include "lxd/peer_trust.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "lxd/fake_lxd_api.h"
#include "lxd/lxd_tls.h"

namespace bmas::lxd {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class PeerTrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "peer-trust-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A certificate (PEM) for `host`; which CA made it is the verifier's business.
  std::string Cert(const std::string& host) {
    const std::string cert = dir_ + "/made/" + host + ".crt";
    EXPECT_TRUE(EnsureClientCertificate(cert, dir_ + "/made/" + host + ".key", host));
    std::ifstream in(cert);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static std::string Fingerprint(const std::string& pem) { return *CertificateFingerprint(pem); }

  // Accepts every certificate but those of `refused` hosts, as the cluster CA's check would
  // refuse a certificate another CA issued.
  static std::function<Result<void>(const NodeCertificate&)> Verifier(
      std::set<std::string> refused = {}) {
    return [refused](const NodeCertificate& p) -> Result<void> {
      if (refused.contains(p.host)) {
        return Error{ErrorCode::kPermissionDenied, "not issued by the cluster CA", {}};
      }
      return {};
    };
  }

  std::string dir_;
};

TEST_F(PeerTrustTest, NewPeersAreAddedAndTheNodeItselfIsSkipped) {
  const std::string self = Cert("oss01");
  const std::vector<NodeCertificate> peers = {{"oss01", self}, {"oss02", Cert("oss02")},
                                              {"oss03", Cert("oss03")}};
  PeerTrustPlan plan = PlanPeerTrust({}, peers, self, Verifier());
  ASSERT_EQ(plan.add.size(), 2u);
  EXPECT_EQ(plan.add[0].host, "oss02");
  EXPECT_EQ(plan.add[1].host, "oss03");
  EXPECT_THAT(plan.remove, IsEmpty());
  EXPECT_THAT(plan.refused, IsEmpty());
  EXPECT_EQ(plan.peers, 2u);
  EXPECT_EQ(DescribePeerTrust(plan), "trusts 2 peer nodes (added oss02, oss03)");
}

TEST_F(PeerTrustTest, ACertificateTheCaDidNotIssueForItsHostIsRefusedAndNotAdded) {
  const std::vector<NodeCertificate> peers = {{"oss02", Cert("oss02")},
                                              {"oss03", Cert("stranger")}};
  PeerTrustPlan plan = PlanPeerTrust({}, peers, "", Verifier({"oss03"}));
  ASSERT_EQ(plan.add.size(), 1u);
  EXPECT_EQ(plan.add[0].host, "oss02");
  EXPECT_THAT(plan.refused, ElementsAre("oss03: not issued by the cluster CA"));
  EXPECT_THAT(DescribePeerTrust(plan), HasSubstr("refused oss03: not issued by the cluster CA"));
}

TEST_F(PeerTrustTest, ANodeThatLeftIsRemovedAndOthersEntriesAreLeftAlone) {
  const std::string two = Cert("oss02"), gone = Cert("oss09"), admins = Cert("laptop");
  const std::vector<TrustedCertificate> trusted = {
      {"bmas-node-oss02", Fingerprint(two), true, {"default"}},
      {"bmas-node-oss09", Fingerprint(gone), true, {"default"}},
      {"admin-laptop", Fingerprint(admins), false, {}},
      {kSharedTrustName, Fingerprint(Cert("shared")), false, {}}};
  PeerTrustPlan plan = PlanPeerTrust(trusted, {{"oss02", two}}, "", Verifier());
  EXPECT_THAT(plan.add, IsEmpty());
  ASSERT_EQ(plan.remove.size(), 1u);
  EXPECT_EQ(plan.remove[0].name, "bmas-node-oss09");
  EXPECT_TRUE(plan.shared_trusted);
  EXPECT_THAT(DescribePeerTrust(plan), HasSubstr("trusts 1 peer node (removed oss09)"));
  EXPECT_THAT(DescribePeerTrust(plan), HasSubstr("still trusts the shared certificate"));
}

TEST_F(PeerTrustTest, ARenewedCertificateReplacesTheOldOne) {
  const std::string old_cert = Cert("oss02");
  fs::remove_all(dir_ + "/made");
  const std::string renewed = Cert("oss02");
  ASSERT_NE(Fingerprint(old_cert), Fingerprint(renewed));
  PeerTrustPlan plan = PlanPeerTrust({{"bmas-node-oss02", Fingerprint(old_cert), true, {}}},
                                     {{"oss02", renewed}}, "", Verifier());
  ASSERT_EQ(plan.add.size(), 1u);
  EXPECT_EQ(Fingerprint(plan.add[0].pem), Fingerprint(renewed));
  ASSERT_EQ(plan.remove.size(), 1u);
  EXPECT_EQ(plan.remove[0].fingerprint, Fingerprint(old_cert));
}

TEST_F(PeerTrustTest, TwoCertificatesForOneHostAreBothRefused) {
  const std::string a = Cert("a"), b = Cert("b");
  PeerTrustPlan plan = PlanPeerTrust({}, {{"oss02", a}, {"oss02", b}, {"oss03", "junk"}}, "",
                                     Verifier());
  EXPECT_THAT(plan.add, IsEmpty());
  ASSERT_EQ(plan.refused.size(), 3u);
  EXPECT_THAT(plan.refused[0], HasSubstr("oss02: more than one certificate names this host"));
  EXPECT_EQ(plan.refused[2], "oss03: not a PEM certificate");
}

TEST_F(PeerTrustTest, ApplyTrustsPeersRestrictedToTheProjectAndIsIdempotent) {
  FakeLxdApi lxd;
  const std::string two = Cert("oss02"), gone = Cert("oss09");
  ASSERT_TRUE(lxd.TrustCertificate("bmas-node-oss09", gone, {kPeerProject}));
  const std::vector<NodeCertificate> peers = {{"oss02", two}};
  ASSERT_TRUE(ApplyPeerTrust(lxd, PlanPeerTrust(*lxd.TrustedCertificates(), peers, "", Verifier())));
  ASSERT_EQ(lxd.trust.size(), 1u);
  EXPECT_EQ(lxd.trust[0].name, "bmas-node-oss02");
  EXPECT_EQ(lxd.trust[0].fingerprint, Fingerprint(two));
  EXPECT_TRUE(lxd.trust[0].restricted);
  EXPECT_THAT(lxd.trust[0].projects, ElementsAre("default"));
  PeerTrustPlan again = PlanPeerTrust(*lxd.TrustedCertificates(), peers, "", Verifier());
  EXPECT_THAT(again.add, IsEmpty());
  EXPECT_THAT(again.remove, IsEmpty());
  EXPECT_EQ(DescribePeerTrust(again), "trusts 1 peer node");
}

TEST_F(PeerTrustTest, NodeCertificatesAreReadFromHostNamedFiles) {
  const std::string peers = dir_ + "/lxd-peers";
  EXPECT_THAT(*ReadNodeCertificates(peers), IsEmpty()) << "an absent directory is no peer";
  fs::create_directories(peers);
  std::ofstream(peers + "/oss03.crt") << Cert("oss03");
  std::ofstream(peers + "/oss02.crt") << Cert("oss02");
  std::ofstream(peers + "/README") << "not a certificate";
  std::ofstream(peers + "/-x.crt") << "not a host name";
  auto read = ReadNodeCertificates(peers);
  ASSERT_TRUE(read) << read.error().message;
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].host, "oss02");
  EXPECT_EQ((*read)[1].host, "oss03");
  EXPECT_THAT((*read)[0].pem, HasSubstr("BEGIN CERTIFICATE"));
}

TEST(PeerIdentityTest, AJoinedNodeShowsItsOwnCertificateUnlessASharedOneIsConfigured) {
  LxdSettings s;
  s.node_dir = "/etc/bmas";
  PeerIdentity joined = ChoosePeerIdentity(s, true);
  EXPECT_EQ(joined.cert, "/etc/bmas/node.crt");
  EXPECT_EQ(joined.key, "/etc/bmas/node.key");
  EXPECT_TRUE(joined.own);
  EXPECT_EQ(joined.note, "");

  PeerIdentity lone = ChoosePeerIdentity(s, false);
  EXPECT_EQ(lone.cert, "/etc/bmas/lxd-peer.crt");
  EXPECT_FALSE(lone.own);
  EXPECT_THAT(lone.note, HasSubstr("bmas node join"));

  s.cert = "/etc/bmas/lxd-peer.crt";
  s.key = "/etc/bmas/lxd-peer.key";
  PeerIdentity shared = ChoosePeerIdentity(s, true);
  EXPECT_EQ(shared.cert, "/etc/bmas/lxd-peer.crt");
  EXPECT_FALSE(shared.own);
  EXPECT_THAT(shared.note, HasSubstr("shared by every node"));
  EXPECT_THAT(shared.note, HasSubstr("remove [lxd] cert and key"));
}

}  // namespace
}  // namespace bmas::lxd
