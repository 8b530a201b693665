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

}  // namespace
}  // namespace bmas::cluster
