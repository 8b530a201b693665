#include "lxd/lxd_tls.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/ssl.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>
#include <vector>

#include "common/asio.h"

namespace bmas::lxd {
namespace {

namespace fs = std::filesystem;
namespace ssl = net::ssl;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// What the test server saw of one request.
struct Seen {
  std::string method, target, body, content_type;
  std::string client_cert;  // PEM
};

// A TLS server on 127.0.0.1 that, like LXD, asks for a client certificate and refuses a
// handshake without one. It answers every request with 201, a JSON body and an ETag.
class TestTlsServer {
 public:
  TestTlsServer(const fs::path& cert, const fs::path& key)
      : ctx_(ssl::context::tls_server),
        acceptor_(io_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)) {
    ctx_.use_certificate_chain_file(cert.string());
    ctx_.use_private_key_file(key.string(), ssl::context::pem);
    ctx_.set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    thread_ = std::thread([this] { Serve(); });
  }
  ~TestTlsServer() {
    stopping_ = true;
    net::io_context io;
    tcp::socket wake(io);
    beast::error_code ec;
    wake.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
  }

  std::string url() const {
    return fmt::format("https://127.0.0.1:{}", acceptor_.local_endpoint().port());
  }
  std::vector<Seen> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  void Serve() {
    while (!stopping_) {
      tcp::socket socket(io_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec || stopping_) return;
      Handle(socket);
    }
  }

  void Handle(tcp::socket& socket) {
    ssl::stream<tcp::socket&> stream(socket, ctx_);
    Seen seen;
    // Self-signed, as LXD's clients are: LXD compares it with its trust store, not with CAs.
    stream.set_verify_callback([&](bool, ssl::verify_context& vc) {
      X509_STORE_CTX* store = vc.native_handle();
      if (X509_STORE_CTX_get_error_depth(store) == 0) {
        BIO* bio = BIO_new(BIO_s_mem());
        PEM_write_bio_X509(bio, X509_STORE_CTX_get_current_cert(store));
        char* data = nullptr;
        long n = BIO_get_mem_data(bio, &data);
        seen.client_cert.assign(data, static_cast<size_t>(n));
        BIO_free(bio);
      }
      return true;
    });
    beast::error_code ec;
    stream.handshake(ssl::stream_base::server, ec);
    if (ec) return;
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    http::read(stream, buffer, req, ec);
    if (ec) return;
    seen.method = std::string(req.method_string());
    seen.target = std::string(req.target());
    seen.body = req.body();
    seen.content_type = std::string(req[http::field::content_type]);
    {
      std::lock_guard lock(mu_);
      seen_.push_back(std::move(seen));
    }
    http::response<http::string_body> res{http::status::created, 11};
    res.set(http::field::etag, "\"etag-1\"");
    res.set(http::field::content_type, "application/json");
    res.body() = R"({"type":"sync","status_code":200})";
    res.keep_alive(false);
    res.prepare_payload();
    http::write(stream, res, ec);
  }

  net::io_context io_;
  ssl::context ctx_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<Seen> seen_;
  std::thread thread_;
};

class LxdTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bmas_lxd_tls_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Makes a certificate and key named `name` in the test's directory; the certificate's PEM.
  std::string MakeCert(const std::string& name) {
    auto made = EnsureClientCertificate(Path(name + ".crt"), Path(name + ".key"), name);
    EXPECT_TRUE(made) << made.error().message;
    return ReadFile(Path(name + ".crt"));
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  HttpsEndpoint Endpoint(const std::string& url, std::string server_cert) {
    return HttpsEndpoint{url, Path("client.crt"), Path("client.key"), std::move(server_cert)};
  }

  fs::path dir_;
};

TEST_F(LxdTlsTest, EnsureClientCertificateMakesAKeyPairOnce) {
  const std::string cert_file = Path("a/b/client.crt");
  const std::string key_file = Path("a/c/client.key");
  auto made = EnsureClientCertificate(cert_file, key_file, "bmas@node1");
  ASSERT_TRUE(made) << made.error().message;
  EXPECT_TRUE(*made);

  struct stat st {};
  ASSERT_EQ(::stat(key_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  const std::string cert_pem = ReadFile(cert_file);
  const std::string key_pem = ReadFile(key_file);
  BIO* bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ASSERT_NE(cert, nullptr);
  bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(X509_check_private_key(cert, key), 1);
  char cn[64] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  EXPECT_STREQ(cn, "bmas@node1");
  int days = 0, seconds = 0;
  ASSERT_EQ(ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(cert)), 1);
  EXPECT_GT(days, 3640);
  EXPECT_LE(days, 3650);

  // The fingerprint is the SHA-256 of the DER, as OpenSSL computes it.
  auto fingerprint = CertificateFingerprint(cert_pem);
  ASSERT_TRUE(fingerprint) << fingerprint.error().message;
  EXPECT_THAT(*fingerprint, MatchesRegex("[0-9a-f]{64}"));
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  ASSERT_EQ(X509_digest(cert, EVP_sha256(), md, &len), 1);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  EXPECT_EQ(*fingerprint, hex);
  X509_free(cert);
  EVP_PKEY_free(key);

  auto again = EnsureClientCertificate(cert_file, key_file, "bmas@node1");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_FALSE(*again);
  EXPECT_EQ(ReadFile(cert_file), cert_pem);
  EXPECT_EQ(ReadFile(key_file), key_pem);
}

TEST_F(LxdTlsTest, CertificateFingerprintRefusesWhatIsNotACertificate) {
  auto fingerprint = CertificateFingerprint("-----BEGIN CERTIFICATE-----\nnope\n");
  ASSERT_FALSE(fingerprint);
  EXPECT_EQ(fingerprint.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(LxdTlsTest, RoundTripWithThePinnedCertificate) {
  const std::string server_pem = MakeCert("server");
  const std::string client_pem = MakeCert("client");
  TestTlsServer server(Path("server.crt"), Path("server.key"));

  auto transport =
      NewHttpsLxdTransport(Endpoint(server.url(), server_pem), std::chrono::seconds(5));
  EXPECT_EQ(transport->Where(), server.url());
  auto response = transport->RoundTrip(
      ClientRequest{"POST", "/1.0/instances/ws-alice", {}, R"({"migration":true})"});
  ASSERT_TRUE(response) << response.error().message;
  EXPECT_EQ(response->status, 201);
  EXPECT_EQ(response->etag, "\"etag-1\"");
  EXPECT_EQ(response->body, R"({"type":"sync","status_code":200})");

  auto seen = server.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].target, "/1.0/instances/ws-alice");
  EXPECT_EQ(seen[0].body, R"({"migration":true})");
  EXPECT_EQ(seen[0].content_type, "application/json");
  EXPECT_EQ(*CertificateFingerprint(seen[0].client_cert), *CertificateFingerprint(client_pem));

  // One connection a request: a second one works the same.
  auto second = transport->RoundTrip(ClientRequest{"GET", "/1.0", {}, {}});
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(server.seen().size(), 2u);
}

TEST_F(LxdTlsTest, AnotherServerCertificateIsRefusedWithBothFingerprints) {
  MakeCert("server");
  MakeCert("client");
  const std::string other_pem = MakeCert("other");
  TestTlsServer server(Path("server.crt"), Path("server.key"));

  auto transport = NewHttpsLxdTransport(Endpoint(server.url(), other_pem), std::chrono::seconds(5));
  auto response = transport->RoundTrip(ClientRequest{"GET", "/1.0", {}, {}});
  ASSERT_FALSE(response);
  EXPECT_EQ(response.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(response.error().message, HasSubstr(server.url()));
  EXPECT_THAT(response.error().message,
              HasSubstr(*CertificateFingerprint(ReadFile(Path("server.crt")))));
  EXPECT_THAT(response.error().message, HasSubstr(*CertificateFingerprint(other_pem)));
  EXPECT_TRUE(server.seen().empty());
}

TEST_F(LxdTlsTest, MissingClientKeyIsInvalidArgumentNamingTheFile) {
  const std::string server_pem = MakeCert("server");
  MakeCert("client");
  fs::remove(Path("client.key"));
  TestTlsServer server(Path("server.crt"), Path("server.key"));

  auto transport =
      NewHttpsLxdTransport(Endpoint(server.url(), server_pem), std::chrono::seconds(5));
  auto response = transport->RoundTrip(ClientRequest{"GET", "/1.0", {}, {}});
  ASSERT_FALSE(response);
  EXPECT_EQ(response.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(response.error().message, HasSubstr(Path("client.key")));
}

TEST_F(LxdTlsTest, FetchServerCertificateReturnsTheServersPem) {
  const std::string server_pem = MakeCert("server");
  TestTlsServer server(Path("server.crt"), Path("server.key"));

  // Without a client certificate, which this server (as LXD) would refuse.
  auto fetched = FetchServerCertificate(server.url(), std::chrono::seconds(5));
  ASSERT_TRUE(fetched) << fetched.error().message;
  EXPECT_EQ(*fetched, server_pem);
}

TEST_F(LxdTlsTest, ASilentServerTimesOut) {
  MakeCert("client");
  const std::string pem = MakeCert("server");
  // Listens, so the kernel completes the connect, but never accepts: no answer to the handshake.
  net::io_context io;
  tcp::acceptor silent(io, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  const std::string url = fmt::format("https://127.0.0.1:{}", silent.local_endpoint().port());

  auto transport = NewHttpsLxdTransport(Endpoint(url, pem), std::chrono::milliseconds(50));
  auto response = transport->RoundTrip(ClientRequest{"GET", "/1.0", {}, {}});
  ASSERT_FALSE(response);
  EXPECT_EQ(response.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(response.error().message, HasSubstr("no answer within 50 ms"));
}

TEST_F(LxdTlsTest, ParseHttpsUrl) {
  auto a = ParseHttpsUrl("https://10.0.0.2:8443");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->host, "10.0.0.2");
  EXPECT_EQ(a->port, "8443");
  auto b = ParseHttpsUrl("https://node2.example");
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->host, "node2.example");
  EXPECT_EQ(b->port, "8443");
  auto c = ParseHttpsUrl("https://[fd00::2]:9443/");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->host, "fd00::2");
  EXPECT_EQ(c->port, "9443");

  for (const char* bad :
       {"http://x", "ftp://", "https://", "https://h:", "https://h:0", "https://h:65536",
        "https://h:84x3", "https://h/1.0", "https://u@h", "https://[fd00::2", "10.0.0.2:8443"}) {
    auto r = ParseHttpsUrl(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.error().message, HasSubstr("https://HOST[:PORT]")) << bad;
  }
}

TEST_F(LxdTlsTest, BadUrlsAreInvalidArgument) {
  auto fetched = FetchServerCertificate("http://x", std::chrono::seconds(1));
  ASSERT_FALSE(fetched);
  EXPECT_EQ(fetched.error().code, ErrorCode::kInvalidArgument);

  auto transport = NewHttpsLxdTransport(Endpoint("ftp://", "pem"), std::chrono::seconds(1));
  auto response = transport->RoundTrip(ClientRequest{"GET", "/1.0", {}, {}});
  ASSERT_FALSE(response);
  EXPECT_EQ(response.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(response.error().message, HasSubstr("ftp://"));
}

}  // namespace
}  // namespace bmas::lxd
