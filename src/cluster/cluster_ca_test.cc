#include "cluster/cluster_ca.h"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

namespace bmas::cluster {
namespace {

constexpr int64_t kNow = 1'800'000'000;  // 2027-01-15
constexpr int64_t kDay = 86400;

struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
std::unique_ptr<X509, X509Deleter> Parse(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return std::unique_ptr<X509, X509Deleter>(x);
}

class ClusterCaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = MakeClusterCa("lab", kNow);
    ASSERT_TRUE(ca) << ca.error().message;
    ca_ = *ca;
    auto node = IssueNodeCertificate(ca_, {"oss01", "10.0.0.11"}, kNow);
    ASSERT_TRUE(node) << node.error().message;
    node_ = *node;
  }
  CertAndKey ca_;
  CertAndKey node_;
};

TEST_F(ClusterCaTest, CaIsAnEcP256CaForTenYears) {
  auto cert = Parse(ca_.cert_pem);
  ASSERT_TRUE(cert);
  EXPECT_EQ(X509_check_ca(cert.get()), 1);
  EVP_PKEY* key = X509_get0_pubkey(cert.get());
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(EVP_PKEY_get_base_id(key), EVP_PKEY_EC);
  EXPECT_EQ(EVP_PKEY_get_bits(key), 256);
  int days = 0, seconds = 0;
  ASSERT_EQ(ASN1_TIME_diff(&days, &seconds, X509_get0_notBefore(cert.get()),
                           X509_get0_notAfter(cert.get())),
            1);
  // Ten years from now, backdated by an hour.
  EXPECT_EQ(days, 3650);
  EXPECT_EQ(seconds, 3600);
  EXPECT_NE(ca_.key_pem.find("PRIVATE KEY"), std::string::npos);
}

TEST_F(ClusterCaTest, NodeCertificateChainsAndNamesItsHostAndAddress) {
  EXPECT_TRUE(VerifyPeerCertificate(ca_.cert_pem, node_.cert_pem, kNow));
  EXPECT_TRUE(VerifyPeerCertificate(ca_.cert_pem, node_.cert_pem, kNow, "oss01"));
  EXPECT_TRUE(VerifyPeerCertificate(ca_.cert_pem, node_.cert_pem, kNow, "10.0.0.11"));
  auto cert = Parse(node_.cert_pem);
  ASSERT_TRUE(cert);
  EXPECT_EQ(X509_check_ca(cert.get()), 0);
  EXPECT_EQ(X509_check_purpose(cert.get(), X509_PURPOSE_SSL_SERVER, 0), 1);
  EXPECT_EQ(X509_check_purpose(cert.get(), X509_PURPOSE_SSL_CLIENT, 0), 1);
}

TEST_F(ClusterCaTest, RefusesAnotherHostOrAddress) {
  for (const char* other : {"oss02", "10.0.0.12", "mgs1"}) {
    auto r = VerifyPeerCertificate(ca_.cert_pem, node_.cert_pem, kNow, other);
    ASSERT_FALSE(r) << other;
    EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
    EXPECT_NE(r.error().message.find(other), std::string::npos) << r.error().message;
  }
}

TEST_F(ClusterCaTest, RefusesACertificateOfAnotherCa) {
  auto other_ca = MakeClusterCa("lab", kNow);
  ASSERT_TRUE(other_ca);
  auto stranger = IssueNodeCertificate(*other_ca, {"oss01", "10.0.0.11"}, kNow);
  ASSERT_TRUE(stranger);
  auto r = VerifyPeerCertificate(ca_.cert_pem, stranger->cert_pem, kNow, "oss01");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(r.error().message.find("does not chain to the cluster CA"), std::string::npos)
      << r.error().message;
}

TEST_F(ClusterCaTest, RefusesOutsideTheValidity) {
  EXPECT_FALSE(VerifyPeerCertificate(ca_.cert_pem, node_.cert_pem, kNow + 3651 * kDay));
  EXPECT_FALSE(VerifyPeerCertificate(ca_.cert_pem, node_.cert_pem, kNow - 2 * 3600));
  // A peer whose clock lags by less than an hour still accepts it.
  EXPECT_TRUE(VerifyPeerCertificate(ca_.cert_pem, node_.cert_pem, kNow - 1800));
}

TEST_F(ClusterCaTest, RefusesTheCaCertificateAndGarbageAsAPeer) {
  auto as_peer = VerifyPeerCertificate(ca_.cert_pem, ca_.cert_pem, kNow);
  ASSERT_FALSE(as_peer);
  EXPECT_EQ(as_peer.error().code, ErrorCode::kPermissionDenied);
  EXPECT_FALSE(VerifyPeerCertificate(ca_.cert_pem, "not a certificate", kNow));
  std::string tampered = node_.cert_pem;
  tampered[tampered.size() / 2] = tampered[tampered.size() / 2] == 'A' ? 'B' : 'A';
  EXPECT_FALSE(VerifyPeerCertificate(ca_.cert_pem, tampered, kNow));
}

TEST_F(ClusterCaTest, IssuingNeedsTheCasOwnKeyAndAHostName) {
  auto other_ca = MakeClusterCa("lab", kNow);
  ASSERT_TRUE(other_ca);
  auto mixed = IssueNodeCertificate({ca_.cert_pem, other_ca->key_pem}, {"oss01", ""}, kNow);
  ASSERT_FALSE(mixed);
  EXPECT_EQ(mixed.error().code, ErrorCode::kInvalidArgument);
  for (const char* bad : {"", "-x", "a b", "a/b"}) {
    auto r = IssueNodeCertificate(ca_, {bad, ""}, kNow);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().param, "host");
  }
  auto bad_address = IssueNodeCertificate(ca_, {"oss01", "10.0.0.1/24"}, kNow);
  ASSERT_FALSE(bad_address);
  EXPECT_EQ(bad_address.error().param, "address");
  auto no_address = IssueNodeCertificate(ca_, {"oss01", ""}, kNow);
  ASSERT_TRUE(no_address);
  EXPECT_TRUE(VerifyPeerCertificate(ca_.cert_pem, no_address->cert_pem, kNow, "oss01"));
}

TEST_F(ClusterCaTest, FingerprintIsTheSha256OfTheDer) {
  auto a = CertificateSha256(ca_.cert_pem);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->size(), 32u);
  EXPECT_EQ(*CertificateSha256(ca_.cert_pem), *a);
  EXPECT_NE(*CertificateSha256(node_.cert_pem), *a);
  EXPECT_FALSE(CertificateSha256("junk"));
  EXPECT_EQ(Hex(std::string("\x00\xab\xff", 3)), "00abff");
}

TEST_F(ClusterCaTest, ASignedCsrChainsToTheCaForItsKeyAndNames) {
  auto made = MakeNodeCsr({"oss02", "10.0.0.12"});
  ASSERT_TRUE(made) << made.error().message;
  auto cert = SignNodeCsr(ca_, made->csr_pem, {"oss02", "10.0.0.12"}, kNow);
  ASSERT_TRUE(cert) << cert.error().message;
  EXPECT_TRUE(VerifyPeerCertificate(ca_.cert_pem, *cert, kNow + kDay, "10.0.0.12"));
  EXPECT_TRUE(VerifyPeerCertificate(ca_.cert_pem, *cert, kNow + kDay, "oss02"));
  EXPECT_FALSE(VerifyPeerCertificate(ca_.cert_pem, *cert, kNow + kDay, "oss01"));
  // The certificate is for the node's own key, which never left it.
  auto x = Parse(*cert);
  ASSERT_TRUE(x);
  BIO* bio = BIO_new_mem_buf(made->key_pem.data(), static_cast<int>(made->key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(X509_check_private_key(x.get(), key), 1);
  EVP_PKEY_free(key);
  EXPECT_EQ(X509_check_ca(x.get()), 0);
}

TEST_F(ClusterCaTest, ACsrForAnotherNameOrAddressIsRefused) {
  auto made = MakeNodeCsr({"oss02", "10.0.0.12"});
  ASSERT_TRUE(made) << made.error().message;
  struct Case {
    NodeIdentity asked;
    const char* why;
  };
  for (const Case& c : {Case{{"oss03", "10.0.0.12"}, "for 'oss02', not for oss03"},
                        Case{{"oss02", "10.0.0.13"}, "names 'DNS:oss02,IP:10.0.0.12'"},
                        Case{{"oss02", ""}, "not 'DNS:oss02'"}}) {
    auto cert = SignNodeCsr(ca_, made->csr_pem, c.asked, kNow);
    ASSERT_FALSE(cert) << c.why;
    EXPECT_EQ(cert.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(cert.error().message.find(c.why), std::string::npos) << cert.error().message;
  }
}

TEST_F(ClusterCaTest, ACsrThatIsNotPemOrWhoseSignatureFailsIsRefused) {
  EXPECT_FALSE(SignNodeCsr(ca_, "not a csr", {"oss02", "10.0.0.12"}, kNow));
  auto made = MakeNodeCsr({"oss02", "10.0.0.12"});
  ASSERT_TRUE(made) << made.error().message;
  // A byte of the signature's base64, near the end, changed.
  std::string bad = made->csr_pem;
  const size_t at = bad.rfind("-----END") - 6;
  bad[at] = bad[at] == 'A' ? 'B' : 'A';
  auto cert = SignNodeCsr(ca_, bad, {"oss02", "10.0.0.12"}, kNow);
  ASSERT_FALSE(cert);
  EXPECT_EQ(cert.error().param, "csr");
}

}  // namespace
}  // namespace bmas::cluster
