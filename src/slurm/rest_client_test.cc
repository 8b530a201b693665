#include "slurm/rest_client.h"

#include <gtest/gtest.h>

#include <csignal>
#include <deque>
#include <fstream>
#include <iterator>
#include <thread>

#include "common/asio.h"
#include "slurm/jwt.h"

namespace bmas {
namespace {

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(BMAS_SOURCE_DIR "/tests/fixtures/slurmrestd/") + name,
                   std::ios::binary);
  EXPECT_TRUE(in) << "missing fixture " << name;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Answers from a queue of canned responses and keeps the requests it was given.
class CannedTransport final : public HttpTransport {
 public:
  struct State {
    std::deque<Result<ClientResponse>> responses;
    std::vector<ClientRequest> requests;
  };
  explicit CannedTransport(State* state) : state_(state) {}

  Result<ClientResponse> RoundTrip(const ClientRequest& request) override {
    state_->requests.push_back(request);
    if (state_->responses.empty()) return Internal("no canned response left");
    Result<ClientResponse> r = std::move(state_->responses.front());
    state_->responses.pop_front();
    return r;
  }
  std::string Where() const override { return "http://canned:1"; }

 private:
  State* state_;
};

// A token for alice that expires in the year 2100.
const std::string kToken = *MintSlurmJwt("key", "alice", 4102444800 - 60, 60);

class SlurmRestClientTest : public ::testing::Test {
 protected:
  SlurmRestClient Client(std::string token = kToken) {
    RestEndpoint e;
    e.user = "alice";
    e.token = std::move(token);
    return SlurmRestClient(e, std::make_unique<CannedTransport>(&state_));
  }
  void Respond(int status, std::string body) {
    state_.responses.push_back(ClientResponse{status, std::move(body)});
  }
  const ClientRequest& LastRequest() { return state_.requests.back(); }

  CannedTransport::State state_;
};

std::string HeaderOf(const ClientRequest& r, std::string_view name) {
  for (const auto& [n, v] : r.headers) {
    if (n == name) return v;
  }
  return "<absent>";
}

TEST_F(SlurmRestClientTest, SendsTheUserAndToken) {
  Respond(200, Fixture("ping.json"));
  auto release = Client().Ping();
  ASSERT_TRUE(release) << release.error().message;
  EXPECT_EQ(*release, "22.05.8");
  EXPECT_EQ(LastRequest().method, "GET");
  EXPECT_EQ(LastRequest().target, "/slurm/v0.0.38/ping");
  EXPECT_EQ(HeaderOf(LastRequest(), "X-SLURM-USER-NAME"), "alice");
  EXPECT_EQ(HeaderOf(LastRequest(), "X-SLURM-USER-TOKEN"), kToken);
}

TEST_F(SlurmRestClientTest, SubmitPostsTheRenderedSpec) {
  Respond(200, Fixture("submit.json"));
  JobSpec spec;
  spec.name = "gpu2";
  spec.gres = "gpu:2";
  spec.cwd = "/tmp";
  spec.script = "#!/bin/sh\ntrue\n";
  auto id = Client().Submit(spec);
  ASSERT_TRUE(id) << id.error().message;
  EXPECT_EQ(*id, 1);
  EXPECT_EQ(LastRequest().method, "POST");
  EXPECT_EQ(LastRequest().target, "/slurm/v0.0.38/job/submit");
  EXPECT_EQ(LastRequest().body, *RenderJobSubmit(spec));
}

TEST_F(SlurmRestClientTest, SubmitRefusedCarriesSlurmsReason) {
  Respond(500, Fixture("submit_error_unavailable.json"));
  JobSpec spec;
  spec.name = "big";
  spec.cwd = "/tmp";
  spec.script = "#!/bin/sh\ntrue\n";
  auto id = Client().Submit(spec);
  ASSERT_FALSE(id);
  EXPECT_EQ(id.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(id.error().message.find("Requested node configuration is not available"),
            std::string::npos);
  EXPECT_NE(id.error().message.find("submit job \"big\""), std::string::npos);
}

// Slurm 22.05 queues a job whose only nodes are down (a standby MIG layout's) and answers with
// its id and ESLURM_NODE_NOT_AVAIL; sbatch prints the id, and so does bmas: the job waits.
TEST_F(SlurmRestClientTest, AJobQueuedWhileItsNodesAreDownIsSubmitted) {
  Respond(200, Fixture("submit_queued_node_not_available.json"));
  JobSpec spec;
  spec.name = "notebook";
  spec.cwd = "/tmp";
  spec.script = "#!/bin/sh\ntrue\n";
  auto id = Client().Submit(spec);
  ASSERT_TRUE(id) << id.error().message;
  EXPECT_EQ(*id, 7720002);
}

TEST_F(SlurmRestClientTest, SubmitOfABadSpecSendsNothing) {
  auto id = Client().Submit(JobSpec{});
  ASSERT_FALSE(id);
  EXPECT_EQ(id.error().param, "script");
  EXPECT_TRUE(state_.requests.empty());
}

TEST_F(SlurmRestClientTest, JobFindsItsIdAndUnknownIsNotFound) {
  Respond(200, Fixture("job_failed_exit3.json"));
  Respond(500, Fixture("error_unknown_job.json"));
  SlurmRestClient client = Client();
  auto job = client.Job(1);
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->exit_code, 3);
  EXPECT_EQ(LastRequest().target, "/slurm/v0.0.38/job/1");
  auto missing = client.Job(999);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
}

TEST_F(SlurmRestClientTest, CancelAndSignal) {
  Respond(200, R"({"errors": []})");
  Respond(200, R"({"errors": []})");
  SlurmRestClient client = Client();
  ASSERT_TRUE(client.Cancel(7));
  EXPECT_EQ(LastRequest().method, "DELETE");
  EXPECT_EQ(LastRequest().target, "/slurm/v0.0.38/job/7");
  ASSERT_TRUE(client.Cancel(7, SIGTERM));
  EXPECT_EQ(LastRequest().target, "/slurm/v0.0.38/job/7?signal=TERM");
  auto bad = client.Cancel(7, 33);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().param, "signal");
  EXPECT_EQ(state_.requests.size(), 2u);
}

TEST_F(SlurmRestClientTest, CancelOfAnotherUsersJobIsPermissionDenied) {
  Respond(500, Fixture("error_cancel_denied.json"));
  auto r = Client().Cancel(2);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(r.error().message.find("cancel job 2"), std::string::npos);
}

TEST_F(SlurmRestClientTest, SlurmctldSilenceNamesBothCauses) {
  Respond(500, Fixture("error_token_rejected.json"));
  auto r = Client().Jobs();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("slurmctld is down"), std::string::npos);
  EXPECT_NE(r.error().message.find("JWT"), std::string::npos);
}

TEST_F(SlurmRestClientTest, ExpiredTokenIsRefusedBeforeSending) {
  auto r = Client(*MintSlurmJwt("key", "alice", 1700000000, 60)).Jobs();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(r.error().message.find("expired"), std::string::npos) << r.error().message;
  EXPECT_TRUE(state_.requests.empty());
}

TEST_F(SlurmRestClientTest, NonJwtTokenIsRefusedBeforeSending) {
  auto r = Client("abc").Ping();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(r.error().param, "token");
  EXPECT_TRUE(state_.requests.empty());
}

TEST_F(SlurmRestClientTest, NoTokenIsLeftToSlurmrestd) {
  Respond(401, "Authentication failure");
  auto r = Client("").Ping();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(r.error().message.find("HTTP 401"), std::string::npos) << r.error().message;
  EXPECT_EQ(state_.requests.size(), 1u);
}

TEST_F(SlurmRestClientTest, UnreachableSaysHowToStartIt) {
  state_.responses.push_back(
      Error{ErrorCode::kUnavailable, "connect to slurmrestd at http://x:1 failed: refused", {}});
  auto r = Client().Nodes();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("bmas slurm up"), std::string::npos);
  EXPECT_NE(r.error().message.find("http://x:1"), std::string::npos);
}

TEST(ParseRestAddressTest, Forms) {
  auto a = ParseRestAddress("127.0.0.1:6820");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 6820);
  auto b = ParseRestAddress("[::1]:7000");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 7000);
  for (const char* bad : {"", "host", ":80", "h:", "h:0", "h:65536", "h:8x", "[::1]80"}) {
    EXPECT_FALSE(ParseRestAddress(bad)) << bad;
  }
  EXPECT_TRUE(ParseRestAddress("localhost:6820"));
  EXPECT_TRUE(ParseRestAddress("127.0.0.53:6820"));
}

// Finding 8 of issue 11: root's Slurm JWT never crosses a network in clear text.
TEST(ParseRestAddressTest, ARemoteSlurmrestdIsRefusedWithTheReason) {
  for (const char* remote : {"10.0.0.5:6820", "head01:6820", "[fe80::1]:6820",
                             "127.evil.example:6820"}) {
    auto r = ParseRestAddress(remote);
    ASSERT_FALSE(r) << remote;
    EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
    EXPECT_NE(r.error().message.find("in clear text"), std::string::npos) << r.error().message;
  }
}

// Issue 25: a slurmrestd on another machine is reached through `bmas slurm tls-front`, and the
// refusal of a plain remote address says so.
TEST(ParseRestAddressTest, TheRefusalNamesTheTlsFront) {
  auto r = ParseSlurmRestd("mgs1:6820", "/etc/bmas/ca.crt");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(r.error().message.find("in clear text"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("bmas slurm tls-front"), std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("https://HOST:PORT"), std::string::npos) << r.error().message;
}

TEST(ParseSlurmRestdTest, HttpsTakesAnyHostWithItsCa) {
  auto a = ParseSlurmRestd("https://mgs1:6821", "/var/lib/bmas/cluster/ca.crt");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_TRUE(a->tls);
  EXPECT_EQ(a->host, "mgs1");
  EXPECT_EQ(a->port, 6821);
  EXPECT_EQ(a->ca_file, "/var/lib/bmas/cluster/ca.crt");
  auto b = ParseSlurmRestd("https://10.200.0.1:6821/", "/ca.crt");
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->host, "10.200.0.1");
  auto c = ParseSlurmRestd("https://[fd00::1]:6821", "/ca.crt");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->host, "fd00::1");
  // The plain form is as before: loopback, no TLS.
  auto d = ParseSlurmRestd("127.0.0.1:6820", "/ca.crt");
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_FALSE(d->tls);
}

TEST(ParseSlurmRestdTest, OtherFormsAreRefusedWithTheExpectedOne) {
  for (const char* bad : {"https://", "https://mgs1", "https://mgs1:0", "https://mgs1:6821/slurm",
                          "https://:6821", "https://mgs1:x"}) {
    auto r = ParseSlurmRestd(bad, "/ca.crt");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(r.error().message.find("https://HOST:PORT"), std::string::npos) << r.error().message;
  }
  // Plain http to another machine by URL is the same clear-text token: refused, never dialled.
  for (const char* scheme : {"http://mgs1:6820", "http://127.0.0.1:6820", "ftp://mgs1:6820"}) {
    auto r = ParseSlurmRestd(scheme, "/ca.crt");
    ASSERT_FALSE(r) << scheme;
    EXPECT_NE(r.error().message.find("https://HOST:PORT"), std::string::npos) << r.error().message;
  }
  auto no_ca = ParseSlurmRestd("https://mgs1:6821", "");
  ASSERT_FALSE(no_ca);
  EXPECT_NE(no_ca.error().message.find("slurmrestd_ca"), std::string::npos)
      << no_ca.error().message;
}

// Issue 25: the dashboard reads agents on other nodes over TLS only; the operator secret never
// crosses the network in clear text.
TEST(ParseOperatorAddressTest, HttpsAnywhereWithTheCaPlainOnlyOnLoopback) {
  auto a = ParseOperatorAddress("https://oss01:9400", "/etc/bmas/ca.crt");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_TRUE(a->tls);
  EXPECT_EQ(a->host, "oss01");
  EXPECT_EQ(a->port, 9400);
  EXPECT_EQ(a->ca_file, "/etc/bmas/ca.crt");
  for (const char* plain : {"127.0.0.1:9400", "localhost:9400", "[::1]:9400"}) {
    auto p = ParseOperatorAddress(plain, "/etc/bmas/ca.crt");
    ASSERT_TRUE(p) << plain << ": " << p.error().message;
    EXPECT_FALSE(p->tls) << plain;
  }
  for (const char* remote : {"oss01:9400", "10.0.0.11:9400", "http://oss01:9400"}) {
    auto r = ParseOperatorAddress(remote, "/etc/bmas/ca.crt");
    ASSERT_FALSE(r) << remote;
    EXPECT_NE(r.error().message.find("https://"), std::string::npos) << r.error().message;
  }
  auto r = ParseOperatorAddress("oss01:9400", "/etc/bmas/ca.crt");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(r.error().message.find("operator secret across the network in clear text"),
            std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("\"https://oss01:9400\""), std::string::npos)
      << r.error().message;
  auto no_ca = ParseOperatorAddress("https://oss01:9400", "");
  ASSERT_FALSE(no_ca);
  EXPECT_NE(no_ca.error().message.find("[agent] ca"), std::string::npos) << no_ca.error().message;
  for (const char* bad : {"https://oss01", "https://oss01:9400/gpus", "oss01", "h:0"}) {
    auto b = ParseOperatorAddress(bad, "/ca.crt");
    ASSERT_FALSE(b) << bad;
    EXPECT_EQ(b.error().code, ErrorCode::kInvalidArgument) << bad;
  }
}

// HttpGet refuses a plain remote address before it dials anything.
TEST(ParseOperatorAddressTest, HttpGetRefusesPlainHttpOffLoopback) {
  auto r = HttpGet("10.0.0.11:9400", "/gpus", "the agent", "Bearer x");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPermissionDenied);
}

// ---- The real TCP transport, against a one-shot server on loopback ----

// Accepts one connection, keeps the request, answers `response` verbatim.
class OneShotServer {
 public:
  explicit OneShotServer(std::string response)
      : acceptor_(io_, tcp::endpoint(net::ip::make_address_v4("127.0.0.1"), 0)),
        response_(std::move(response)) {
    thread_ = std::thread([this] {
      tcp::socket socket(io_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec) return;
      beast::flat_buffer buffer;
      http::read(socket, buffer, request_, ec);
      net::write(socket, net::buffer(response_), ec);
      socket.shutdown(tcp::socket::shutdown_both, ec);
    });
  }
  ~OneShotServer() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  const http::request<http::string_body>& request() const { return request_; }

 private:
  net::io_context io_;
  tcp::acceptor acceptor_;
  std::string response_;
  http::request<http::string_body> request_;
  std::thread thread_;
};

TEST(TcpRestTransportTest, RoundTrip) {
  const std::string body = R"({"errors": [], "job_id": 5})";
  ClientResponse got;
  std::string content_type;
  std::string sent_body;
  {
    OneShotServer server("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n" + body);
    auto transport =
        NewTcpHttpTransport("127.0.0.1", server.port(), std::chrono::seconds(5), "slurmrestd");
    ClientRequest req{"POST", "/slurm/v0.0.38/job/submit", {{"X-SLURM-USER-NAME", "alice"}}, "{}"};
    auto r = transport->RoundTrip(req);
    ASSERT_TRUE(r) << r.error().message;
    got = *r;
    server.Join();
    content_type = std::string(server.request()[http::field::content_type]);
    sent_body = server.request().body();
    EXPECT_EQ(server.request()["X-SLURM-USER-NAME"], "alice");
    EXPECT_EQ(server.request().target(), "/slurm/v0.0.38/job/submit");
  }
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, body);
  EXPECT_EQ(content_type, "application/json") << "slurmrestd needs it to parse the body as JSON";
  EXPECT_EQ(sent_body, "{}");
}

TEST(TcpRestTransportTest, ConnectionRefusedNamesTheUrl) {
  uint16_t port = 0;
  {
    net::io_context io;
    tcp::acceptor a(io, tcp::endpoint(net::ip::make_address_v4("127.0.0.1"), 0));
    port = a.local_endpoint().port();
  }
  RestEndpoint e;
  e.port = port;
  e.user = "alice";
  SlurmRestClient client(e, std::chrono::seconds(5));
  auto r = client.Ping();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("http://127.0.0.1:" + std::to_string(port)), std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("connect"), std::string::npos);
  EXPECT_NE(r.error().message.find("bmas slurm up"), std::string::npos);
}

TEST(TcpRestTransportTest, SilentServerTimesOut) {
  net::io_context io;
  tcp::acceptor a(io, tcp::endpoint(net::ip::make_address_v4("127.0.0.1"), 0));
  // The kernel completes the handshake from the backlog; nobody ever answers.
  auto transport =
      NewTcpHttpTransport("127.0.0.1", a.local_endpoint().port(), std::chrono::milliseconds(200),
                          "slurmrestd");
  const auto start = std::chrono::steady_clock::now();
  auto r = transport->RoundTrip(ClientRequest{"GET", "/slurm/v0.0.38/ping", {}, ""});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("no answer within 200 ms"), std::string::npos)
      << r.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

}  // namespace
}  // namespace bmas
