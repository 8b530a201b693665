#include "cluster/join_tls.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <thread>

#include "cluster/join_service.h"

namespace bmas::cluster {
namespace {

constexpr auto kTimeout = std::chrono::seconds(10);

// A join service on 127.0.0.1 whose certificate comes from `server_ca` for `server_names`,
// while the nodes' token pins `ca_`. Serves on a thread of its own until the test ends.
class JoinTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    now_ = static_cast<int64_t>(std::time(nullptr));
    auto ca = MakeClusterCa("lab", now_);
    ASSERT_TRUE(ca) << ca.error().message;
    material_.ca = *ca;
    material_.nodes = {{"oss01", "10.0.0.11"}};
    material_.munge_key = std::string(1024, 'k');
    material_.bmas_toml = "[cluster]\n";
    material_.operator_secret = "abcdef0123456789";
    token_.address = "127.0.0.1";
    token_.secret = std::string(kJoinSecretBytes, 's');
    token_.expires_at = now_ + 3600;
    token_.ca_sha256 = *CertificateSha256(material_.ca.cert_pem);
    records_ = {RecordOf(token_)};
    auto csr = MakeNodeCsr({"oss01", "10.0.0.11"});
    ASSERT_TRUE(csr) << csr.error().message;
    request_.host = "oss01";
    request_.address = "10.0.0.11";
    request_.csr_pem = csr->csr_pem;
  }

  void Serve(const CertAndKey& server_ca, const NodeIdentity& server_name) {
    auto server_cert = IssueNodeCertificate(server_ca, server_name, now_);
    ASSERT_TRUE(server_cert) << server_cert.error().message;
    JoinServerOptions options;
    options.host = "127.0.0.1";
    options.server = *server_cert;
    options.ca_cert_pem = server_ca.cert_pem;
    auto server = ListenForJoins(options, [this](const JoinRequest& r, const std::string&) {
      ++handled_;
      return DecideJoin(material_, records_, r, now_);
    });
    ASSERT_TRUE(server) << server.error().message;
    server_ = std::move(*server);
    token_.port = server_->port();
    thread_ = std::thread([this] { server_->Run(false); });
  }

  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }

  int64_t now_ = 0;
  JoinMaterial material_;
  JoinToken token_;
  std::vector<TokenRecord> records_;
  JoinRequest request_;
  std::unique_ptr<JoinServer> server_;
  std::thread thread_;
  std::atomic<int> handled_{0};
};

TEST_F(JoinTlsTest, ANodeWithTheTokenJoinsOverTls) {
  Serve(material_.ca, {"mgs1", "127.0.0.1"});
  auto reply = RequestJoin(token_, request_, now_, kTimeout);
  ASSERT_TRUE(reply) << reply.error().message;
  EXPECT_TRUE(VerifyPeerCertificate(material_.ca.cert_pem, reply->node_cert_pem, now_, "oss01"));
  EXPECT_EQ(reply->munge_key, material_.munge_key);
  EXPECT_EQ(handled_, 1);
}

TEST_F(JoinTlsTest, AWrongSecretIsRefusedByTheController) {
  Serve(material_.ca, {"mgs1", "127.0.0.1"});
  JoinToken wrong = token_;
  wrong.secret = std::string(kJoinSecretBytes, 'w');
  auto reply = RequestJoin(wrong, request_, now_, kTimeout);
  ASSERT_FALSE(reply);
  EXPECT_EQ(reply.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(reply.error().message.find("refused the join"), std::string::npos)
      << reply.error().message;
}

// What a controller of each protocol says to a node of the other, as the node prints it.
TEST_F(JoinTlsTest, AVersionMismatchNamesWhichSideToUpgrade) {
  // A controller of protocol 1 refused this node's "protocol" member as its strict parser does.
  auto old_controller = OlderControllerHint(Error{
      ErrorCode::kInvalidArgument,
      "the controller at 10.0.0.1:6830 refused the join: a join request has no member 'protocol'",
      {}});
  EXPECT_EQ(old_controller.param, "protocol");
  EXPECT_NE(old_controller.message.find("upgrade the controller first"), std::string::npos)
      << old_controller.message;
  auto other = OlderControllerHint(Error{ErrorCode::kPermissionDenied, "expired", {}});
  EXPECT_EQ(other.message, "expired");
  // This controller and a node of protocol 1 (no "protocol", no "replica_csr"), over TLS.
  Serve(material_.ca, {"mgs1", "127.0.0.1"});
  auto refused = RequestJoinBody(token_, R"({"secret":"aa","host":"oss01","address":"a","csr":"c"})",
                                 now_, kTimeout);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("refused the join: the node runs a bmas from before join "
                                         "protocol 2 (join protocol 1)"),
            std::string::npos)
      << refused.error().message;
  EXPECT_EQ(handled_, 0);
}

TEST_F(JoinTlsTest, AnImpostorIsRefusedBeforeTheSecretIsSent) {
  // Someone else's CA, and a certificate from it for the controller's very address.
  auto other = MakeClusterCa("impostor", now_);
  ASSERT_TRUE(other);
  Serve(*other, {"mgs1", "127.0.0.1"});
  auto reply = RequestJoin(token_, request_, now_, kTimeout);
  ASSERT_FALSE(reply);
  EXPECT_EQ(reply.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(reply.error().message.find("not this cluster's controller"), std::string::npos)
      << reply.error().message;
  EXPECT_EQ(handled_, 0);
}

TEST_F(JoinTlsTest, TheRightCaForAnotherAddressIsRefused) {
  // A certificate of this CA, but a node's, presented where the controller should answer.
  Serve(material_.ca, {"oss01", "10.0.0.11"});
  auto reply = RequestJoin(token_, request_, now_, kTimeout);
  ASSERT_FALSE(reply);
  EXPECT_EQ(reply.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(reply.error().message.find("not for 127.0.0.1"), std::string::npos)
      << reply.error().message;
  EXPECT_EQ(handled_, 0);
}

TEST_F(JoinTlsTest, AnOversizedRequestIsRefusedUnread) {
  Serve(material_.ca, {"mgs1", "127.0.0.1"});
  request_.csr_pem.append(kMaxJoinRequestBytes, 'A');
  auto reply = RequestJoin(token_, request_, now_, kTimeout);
  ASSERT_FALSE(reply);
  EXPECT_EQ(reply.error().code, ErrorCode::kTooLarge) << reply.error().message;
  EXPECT_EQ(handled_, 0);
}

TEST_F(JoinTlsTest, IdleConnectionsFromOneHostDoNotKeepOthersOut) {
  Serve(material_.ca, {"mgs1", "127.0.0.1"});
  // 70 connections from 127.0.0.2 that never speak: more than the service takes in all.
  std::vector<int> idle;
  for (int i = 0; i < 70; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(0x7f000002);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(token_.port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from), 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
    idle.push_back(fd);
  }
  auto reply = RequestJoin(token_, request_, now_, kTimeout);
  EXPECT_TRUE(reply) << reply.error().message;
  for (int fd : idle) close(fd);
}

TEST_F(JoinTlsTest, NoServiceIsUnavailable) {
  token_.port = 1;  // nothing listens on port 1 of loopback here
  auto reply = RequestJoin(token_, request_, now_, kTimeout);
  ASSERT_FALSE(reply);
  EXPECT_EQ(reply.error().code, ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace bmas::cluster
