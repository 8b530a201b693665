// bmas's TLS front for slurmrestd and the HTTPS transport that reaches it, on loopback: a
// client that trusts the cluster CA reaches the backend through the front; one that finds
// another CA's certificate, or one for another host, stops before it sends its token; the
// front's bounds answer oversized requests and turn away connections over its cap.

#include "slurm/tls_front.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/asio/ssl.hpp>

#include "cluster/cluster_ca.h"
#include "common/asio.h"
#include "common/https_transport.h"
#include "slurm/jwt.h"
#include "slurm/rest_client.h"

namespace bmas {
namespace {

// Now: certificates are checked against the real clock by OpenSSL.
const int64_t kNow = static_cast<int64_t>(::time(nullptr));

// A token for alice that expires an hour from now (the client refuses an expired one).
std::string Token() {
  auto t = MintSlurmJwt(std::string(32, 'k'), "alice", static_cast<int64_t>(::time(nullptr)),
                        3600);
  EXPECT_TRUE(t) << t.error().message;
  return t ? *t : "";
}

// A plain HTTP server on loopback standing in for slurmrestd: answers every request with
// `body` and keeps the requests it got.
class FakeSlurmrestd {
 public:
  explicit FakeSlurmrestd(std::string body)
      : acceptor_(io_, tcp::endpoint(net::ip::make_address_v4("127.0.0.1"), 0)),
        body_(std::move(body)) {
    thread_ = std::thread([this] {
      for (;;) {
        tcp::socket socket(io_);
        beast::error_code ec;
        acceptor_.accept(socket, ec);
        if (ec) return;
        beast::flat_buffer buffer;
        http::request<http::string_body> req;
        http::read(socket, buffer, req, ec);
        if (ec) continue;
        {
          std::lock_guard lock(mu_);
          requests_.push_back(req);
        }
        http::response<http::string_body> res{http::status::ok, 11};
        res.set(http::field::content_type, "application/json");
        res.body() = body_;
        res.prepare_payload();
        http::write(socket, res, ec);
        socket.shutdown(tcp::socket::shutdown_both, ec);
      }
    });
  }
  ~FakeSlurmrestd() {
    beast::error_code ec;
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  std::vector<http::request<http::string_body>> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  net::io_context io_;
  tcp::acceptor acceptor_;
  std::string body_;
  std::mutex mu_;
  std::vector<http::request<http::string_body>> requests_;
  std::thread thread_;
};

class TlsFrontTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = cluster::MakeClusterCa("front", kNow);
    ASSERT_TRUE(ca) << ca.error().message;
    ca_ = *ca;
    dir_ = std::filesystem::temp_directory_path() /
           ("bmas-tls-front-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    ca_file_ = (dir_ / "ca.crt").string();
    std::ofstream(ca_file_) << ca_.cert_pem;
  }
  void TearDown() override {
    if (front_) front_->Stop();
    if (serving_.joinable()) serving_.join();
    std::filesystem::remove_all(dir_);
  }

  // Starts a front on 127.0.0.1 with a certificate for `who` from `ca`, relaying to `backend`.
  void StartFront(const cluster::CertAndKey& ca, const cluster::NodeIdentity& who,
                  uint16_t backend, TlsFrontOptions o = {}) {
    auto cert = cluster::IssueNodeCertificate(ca, who, kNow);
    ASSERT_TRUE(cert) << cert.error().message;
    o.listen_host = "127.0.0.1";
    o.listen_port = 0;
    o.backend_port = backend;
    o.cert_pem = cert->cert_pem;
    o.key_pem = cert->key_pem;
    auto front = TlsFront::Listen(std::move(o));
    ASSERT_TRUE(front) << front.error().message;
    front_ = std::move(*front);
    serving_ = std::thread([this] { front_->Run(); });
  }

  void ExpectTwoIdleConnectionsFillTheCap(const TlsFrontOptions& o);

  SlurmRestClient Client(const std::string& host = "127.0.0.1") {
    RestEndpoint e;
    e.host = host;
    e.port = front_->port();
    e.tls = true;
    e.ca_file = ca_file_;
    e.user = "alice";
    e.token = token_;
    return SlurmRestClient(
        e, NewHttpsTransport(e.host, e.port, e.ca_file, std::chrono::seconds(10), "slurmrestd"));
  }

  cluster::CertAndKey ca_;
  std::filesystem::path dir_;
  std::string ca_file_;
  std::unique_ptr<TlsFront> front_;
  std::thread serving_;
  std::string token_ = Token();
};

const char* kPing = R"({"errors": [], "pings": [{"hostname": "mgs1", "ping": "UP"}],)"
                    R"( "meta": {"Slurm": {"release": "22.05.8"}}})";

TEST_F(TlsFrontTest, AClientThatTrustsTheClusterCaReachesSlurmrestdThroughIt) {
  FakeSlurmrestd backend(kPing);
  StartFront(ca_, {"mgs1", "127.0.0.1"}, backend.port());
  auto client = Client();
  auto pong = client.Ping();
  ASSERT_TRUE(pong) << pong.error().message;
  EXPECT_EQ(*pong, "22.05.8");
  auto got = backend.requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["X-SLURM-USER-NAME"], "alice");
  EXPECT_EQ(got[0]["X-SLURM-USER-TOKEN"], token_);
  EXPECT_EQ(got[0].target(), "/slurm/v0.0.38/ping");
  // The backend hop names the backend, and is one request per connection.
  EXPECT_EQ(got[0][http::field::host], "127.0.0.1:" + std::to_string(backend.port()));
}

TEST_F(TlsFrontTest, AnImpostorWithAnotherCasCertificateGetsNoToken) {
  FakeSlurmrestd backend(kPing);
  auto other = cluster::MakeClusterCa("impostor", kNow);
  ASSERT_TRUE(other);
  // Same name and address, wrong CA: what a user who bound the port first would present.
  StartFront(*other, {"mgs1", "127.0.0.1"}, backend.port());
  auto r = Client().Ping();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied) << r.error().message;
  EXPECT_NE(r.error().message.find("nothing was sent"), std::string::npos) << r.error().message;
  EXPECT_TRUE(backend.requests().empty());
}

TEST_F(TlsFrontTest, TheClusterCasCertificateForAnotherHostIsRefused) {
  FakeSlurmrestd backend(kPing);
  // A node's own certificate (oss01's, say), served from 127.0.0.1: right CA, wrong name.
  StartFront(ca_, {"oss01", "10.200.0.11"}, backend.port());
  for (const char* dialled : {"127.0.0.1", "localhost"}) {
    auto r = Client(dialled).Ping();
    ASSERT_FALSE(r) << dialled;
    EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied) << r.error().message;
    EXPECT_NE(r.error().message.find("mismatch"), std::string::npos) << r.error().message;
  }
  EXPECT_TRUE(backend.requests().empty());
}

TEST_F(TlsFrontTest, ACaFileThatCannotBeReadStopsTheRequest) {
  FakeSlurmrestd backend(kPing);
  StartFront(ca_, {"mgs1", "127.0.0.1"}, backend.port());
  auto transport = NewHttpsTransport("127.0.0.1", front_->port(), (dir_ / "absent.crt").string(),
                                     std::chrono::seconds(5), "slurmrestd");
  auto r = transport->RoundTrip({"GET", "/slurm/v0.0.38/ping", {}, {}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("absent.crt"), std::string::npos) << r.error().message;
  EXPECT_TRUE(backend.requests().empty());
}

TEST_F(TlsFrontTest, OversizedRequestsAreAnsweredWithoutReachingSlurmrestd) {
  FakeSlurmrestd backend(kPing);
  TlsFrontOptions o;
  o.max_body_bytes = 1024;
  o.max_header_bytes = 2048;
  StartFront(ca_, {"mgs1", "127.0.0.1"}, backend.port(), o);
  auto transport = NewHttpsTransport("127.0.0.1", front_->port(), ca_file_,
                                     std::chrono::seconds(10), "slurmrestd");
  auto big_body = transport->RoundTrip(
      {"POST", "/slurm/v0.0.38/job/submit", {}, std::string(4096, 'x')});
  ASSERT_TRUE(big_body) << big_body.error().message;
  EXPECT_EQ(big_body->status, 413);
  auto big_header = transport->RoundTrip(
      {"GET", "/slurm/v0.0.38/ping", {{"X-Padding", std::string(4096, 'y')}}, {}});
  ASSERT_TRUE(big_header) << big_header.error().message;
  EXPECT_EQ(big_header->status, 431);
  EXPECT_TRUE(backend.requests().empty());
  // The front still serves after them.
  auto ok = transport->RoundTrip({"GET", "/slurm/v0.0.38/ping", {}, {}});
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->status, 200);
}

// With a front whose cap `o` is two connections: two idle ones fill it, a third is closed,
// and once they leave a real client is served.
void TlsFrontTest::ExpectTwoIdleConnectionsFillTheCap(const TlsFrontOptions& o) {
  FakeSlurmrestd backend(kPing);
  StartFront(ca_, {"mgs1", "127.0.0.1"}, backend.port(), o);
  // Two idle TCP connections that never handshake hold both slots.
  net::io_context io;
  const tcp::endpoint front(net::ip::make_address_v4("127.0.0.1"), front_->port());
  std::vector<tcp::socket> idle;
  for (int i = 0; i < 2; ++i) {
    idle.emplace_back(io);
    idle.back().connect(front);
  }
  // A third is closed at once: its read ends with EOF (or a reset), never with data.
  tcp::socket third(io);
  third.connect(front);
  char byte;
  beast::error_code ec;
  third.read_some(net::buffer(&byte, 1), ec);
  EXPECT_TRUE(ec == net::error::eof || ec == net::error::connection_reset) << ec.message();
  // Once the idle ones leave, a real client gets through.
  for (auto& s : idle) s.close();
  // The front frees their slots when it reads their EOF, which it does on its own thread:
  // a refused attempt is closed before anything is sent, so trying again is harmless.
  Result<std::string> r = Error{ErrorCode::kUnavailable, "not tried"};
  for (int attempt = 0; attempt < 500 && !r; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    r = Client().Ping();
  }
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_GE(front_->refused(), 1u);
}

TEST_F(TlsFrontTest, ConnectionsOverTheCapAreClosedAndTheFrontServesOn) {
  TlsFrontOptions o;
  o.max_connections = 2;
  ExpectTwoIdleConnectionsFillTheCap(o);
}

TEST_F(TlsFrontTest, OneAddressGetsNoMoreThanItsShareOfConnections) {
  TlsFrontOptions o;
  o.max_connections_per_address = 2;
  ExpectTwoIdleConnectionsFillTheCap(o);
}

TEST_F(TlsFrontTest, AClientThatNeverFinishesItsRequestIsClosedAtTheDeadline) {
  FakeSlurmrestd backend(kPing);
  TlsFrontOptions o;
  o.client_timeout = std::chrono::milliseconds(200);
  StartFront(ca_, {"mgs1", "127.0.0.1"}, backend.port(), o);
  // Connects and sends nothing: the front's deadline, not the client, ends the connection.
  net::io_context io;
  tcp::socket silent(io);
  silent.connect(tcp::endpoint(net::ip::make_address_v4("127.0.0.1"), front_->port()));
  char byte;
  beast::error_code ec;
  silent.read_some(net::buffer(&byte, 1), ec);
  EXPECT_TRUE(ec == net::error::eof || ec == net::error::connection_reset) << ec.message();
  EXPECT_TRUE(backend.requests().empty());
}

// `raw` sent as-is over TLS to the front at `port`; what comes back until it closes.
std::string RawTlsExchange(uint16_t port, const std::string& raw) {
  net::io_context io;
  net::ssl::context ctx(net::ssl::context::tls_client);
  net::ssl::stream<tcp::socket> stream(io, ctx);
  stream.next_layer().connect(tcp::endpoint(net::ip::make_address_v4("127.0.0.1"), port));
  stream.handshake(net::ssl::stream_base::client);
  net::write(stream, net::buffer(raw));
  std::string out;
  char buf[4096];
  beast::error_code ec;
  for (size_t n; (n = stream.read_some(net::buffer(buf), ec)) > 0 || !ec;) out.append(buf, n);
  return out;
}

TEST_F(TlsFrontTest, ATokenOrUserGivenTwiceIsRefused) {
  FakeSlurmrestd backend(kPing);
  StartFront(ca_, {"mgs1", "127.0.0.1"}, backend.port());
  for (const char* header : {"X-SLURM-USER-TOKEN", "X-SLURM-USER-NAME"}) {
    const std::string answer = RawTlsExchange(
        front_->port(), fmt::format("GET /slurm/v0.0.38/ping HTTP/1.1\r\nHost: mgs1\r\n"
                                    "{0}: a\r\n{0}: b\r\n\r\n",
                                    header));
    EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
    EXPECT_NE(answer.find("more than once"), std::string::npos) << answer;
  }
  EXPECT_TRUE(backend.requests().empty());
  // Garbage is a 400 too, and the backend never sees it.
  EXPECT_EQ(RawTlsExchange(front_->port(), "\x01\x02 not http\r\n\r\n").rfind("HTTP/1.1 400", 0),
            0u);
  EXPECT_TRUE(backend.requests().empty());
}

TEST(TlsFrontListenTest, ABackendOffLoopbackIsRefused) {
  auto ca = cluster::MakeClusterCa("front", kNow);
  ASSERT_TRUE(ca);
  auto cert = cluster::IssueNodeCertificate(*ca, {"mgs1", "127.0.0.1"}, kNow);
  ASSERT_TRUE(cert);
  TlsFrontOptions o;
  o.listen_host = "127.0.0.1";
  o.listen_port = 0;
  o.backend_host = "10.200.0.1";
  o.cert_pem = cert->cert_pem;
  o.key_pem = cert->key_pem;
  auto r = TlsFront::Listen(o);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("clear text"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace bmas
