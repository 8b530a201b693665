#include "cluster/join_service.h"

#include <gtest/gtest.h>

namespace bmas::cluster {
namespace {

constexpr int64_t kNow = 1'800'000'000;

class JoinServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = MakeClusterCa("lab", kNow);
    ASSERT_TRUE(ca) << ca.error().message;
    material_.ca = *ca;
    material_.nodes = {{"oss01", "10.0.0.11"}, {"oss02", "10.0.0.12"}};
    material_.munge_key = std::string(1024, 'k');
    material_.bmas_toml = "[cluster]\n";
    material_.prolog = "#!/bin/sh\n";
    material_.epilog = "#!/bin/sh\n";
    token_.secret = std::string(kJoinSecretBytes, 's');
    token_.expires_at = kNow + 3600;
    records_ = {RecordOf(token_)};
    auto csr = MakeNodeCsr({"oss01", "10.0.0.11"});
    ASSERT_TRUE(csr) << csr.error().message;
    request_ = {token_.secret, "oss01", "10.0.0.11", csr->csr_pem};
    auto replica_csr = MakeNodeCsr({"oss01", "10.0.0.11"});
    ASSERT_TRUE(replica_csr) << replica_csr.error().message;
    request_.replica_csr_pem = replica_csr->csr_pem;
  }
  JoinMaterial material_;
  JoinToken token_;
  std::vector<TokenRecord> records_;
  JoinRequest request_;
};

TEST_F(JoinServiceTest, AnInvitedNodeGetsItsCertificateAndTheClustersFiles) {
  auto reply = DecideJoin(material_, records_, request_, kNow);
  ASSERT_TRUE(reply) << reply.error().message;
  EXPECT_TRUE(VerifyPeerCertificate(material_.ca.cert_pem, reply->node_cert_pem, kNow, "oss01"));
  EXPECT_EQ(reply->ca_cert_pem, material_.ca.cert_pem);
  EXPECT_EQ(reply->munge_key, material_.munge_key);
  EXPECT_EQ(reply->bmas_toml, "[cluster]\n");
}

TEST_F(JoinServiceTest, TheReplicaKeyIsSignedByTheReplicaCaWhichNoNodeChannelTrusts) {
  // No replica CA (a cluster initialised before there was one): no replica certificate.
  auto without = DecideJoin(material_, records_, request_, kNow);
  ASSERT_TRUE(without) << without.error().message;
  EXPECT_EQ(without->replica_cert_pem, "");
  auto replica_ca = MakeClusterCa("lab replicas", kNow);
  ASSERT_TRUE(replica_ca) << replica_ca.error().message;
  material_.replica_ca = *replica_ca;
  auto reply = DecideJoin(material_, records_, request_, kNow);
  ASSERT_TRUE(reply) << reply.error().message;
  // The gateway dials a replica by the node's name or address.
  EXPECT_TRUE(VerifyPeerCertificate(replica_ca->cert_pem, reply->replica_cert_pem, kNow, "oss01"));
  EXPECT_TRUE(
      VerifyPeerCertificate(replica_ca->cert_pem, reply->replica_cert_pem, kNow, "10.0.0.11"));
  // What the agents' clients, the store and the join service check a node with refuses it, and
  // the node's certificate is not a replica's.
  EXPECT_FALSE(VerifyPeerCertificate(material_.ca.cert_pem, reply->replica_cert_pem, kNow, "oss01"));
  EXPECT_FALSE(VerifyPeerCertificate(replica_ca->cert_pem, reply->node_cert_pem, kNow, "oss01"));
  // A replica CSR for another node is refused, naming it.
  JoinRequest other = request_;
  auto csr2 = MakeNodeCsr({"oss02", "10.0.0.12"});
  ASSERT_TRUE(csr2);
  other.replica_csr_pem = csr2->csr_pem;
  auto refused = DecideJoin(material_, records_, other, kNow);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().param, "replica_csr");
  EXPECT_NE(refused.error().message.find("replica CSR"), std::string::npos)
      << refused.error().message;
}

TEST_F(JoinServiceTest, AWrongOrExpiredSecretIsRefusedBeforeAnythingElse) {
  JoinRequest wrong = request_;
  wrong.secret = std::string(kJoinSecretBytes, 'x');
  wrong.csr_pem = "not even a CSR";
  auto r = DecideJoin(material_, records_, wrong, kNow);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  auto late = DecideJoin(material_, records_, request_, kNow + 3601);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(late.error().message.find("expired"), std::string::npos) << late.error().message;
}

TEST_F(JoinServiceTest, AHostOrAddressNotInTheInventoryIsRefused) {
  JoinRequest stranger = request_;
  stranger.host = "evil01";
  auto r = DecideJoin(material_, records_, stranger, kNow);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(r.error().param, "host");
  JoinRequest moved = request_;
  moved.address = "10.0.0.99";
  auto m = DecideJoin(material_, records_, moved, kNow);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().param, "address");
}

TEST_F(JoinServiceTest, ACsrForAnotherNodeIsRefused) {
  // oss01's CSR sent as oss02: a node asking for another's identity.
  JoinRequest other = request_;
  other.host = "oss02";
  other.address = "10.0.0.12";
  auto r = DecideJoin(material_, records_, other, kNow);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().param, "csr");
}

TEST_F(JoinServiceTest, AJoiningNodeGetsTheCertificatesOfTheOtherNodesThatJoined) {
  material_.nodes.push_back({"oss03", "10.0.0.13"});
  material_.node_certs = {{"oss01", "old oss01"}, {"oss02", "oss02 pem"}, {"gone", "gone pem"}};
  auto reply = DecideJoin(material_, records_, request_, kNow);
  ASSERT_TRUE(reply) << reply.error().message;
  // Not its own (an earlier join's), not a host the inventory no longer has.
  const std::map<std::string, std::string> want = {{"oss02", "oss02 pem"}};
  EXPECT_EQ(reply->lxd_peers, want);
}

TEST_F(JoinServiceTest, AJoinedNodeGetsItsPeersAgainOnlyWithTheCertificateLastSignedForIt) {
  auto first = DecideJoin(material_, records_, request_, kNow);
  ASSERT_TRUE(first) << first.error().message;
  auto csr2 = MakeNodeCsr({"oss02", "10.0.0.12"});
  ASSERT_TRUE(csr2);
  auto second = DecideJoin(material_, records_,
                           {token_.secret, "oss02", "10.0.0.12", csr2->csr_pem}, kNow);
  ASSERT_TRUE(second);
  material_.node_certs = {{"oss01", first->node_cert_pem}, {"oss02", second->node_cert_pem}};

  auto peers = DecideLxdPeers(material_, "oss01", first->node_cert_pem, kNow);
  ASSERT_TRUE(peers) << peers.error().message;
  EXPECT_EQ(peers->size(), 1u);
  EXPECT_EQ(peers->at("oss02"), second->node_cert_pem);

  // oss02's certificate asking as oss01; no certificate; another CA's for oss01's name; a
  // certificate of oss01 that a later join replaced; a host not in the inventory.
  auto as_other = DecideLxdPeers(material_, "oss01", second->node_cert_pem, kNow);
  auto none = DecideLxdPeers(material_, "oss01", "", kNow);
  auto other_ca = MakeClusterCa("elsewhere", kNow);
  ASSERT_TRUE(other_ca);
  auto forged = IssueNodeCertificate(*other_ca, {"oss01", "10.0.0.11"}, kNow);
  ASSERT_TRUE(forged);
  auto foreign = DecideLxdPeers(material_, "oss01", forged->cert_pem, kNow);
  auto replaced_by = IssueNodeCertificate(material_.ca, {"oss01", "10.0.0.11"}, kNow);
  ASSERT_TRUE(replaced_by);
  material_.node_certs["oss01"] = replaced_by->cert_pem;
  auto replaced = DecideLxdPeers(material_, "oss01", first->node_cert_pem, kNow);
  auto stranger = DecideLxdPeers(material_, "evil01", first->node_cert_pem, kNow);
  for (const auto* r : {&as_other, &none, &foreign, &replaced, &stranger}) {
    ASSERT_FALSE(*r);
    EXPECT_EQ(r->error().code, ErrorCode::kPermissionDenied);
  }
  EXPECT_NE(replaced.error().message.find("replaced by a later join"), std::string::npos)
      << replaced.error().message;
}

}  // namespace
}  // namespace bmas::cluster
