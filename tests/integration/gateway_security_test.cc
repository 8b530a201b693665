// Attacks on `bmas gateway` and `bmas engine` (bmas issue 11), each made as a remote client
// would make it, each followed by the normal path, which must still work. Real processes on
// loopback: engines that require a backend key, and a gateway that holds it.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <atomic>
#include <csignal>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/backend_identity.h"
#include "engine_process.h"
#include "http_client.h"
#include "port_squatter.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using namespace std::chrono_literals;

constexpr std::string_view kModel = "meta-llama/Llama-3.1-8B-Instruct";
constexpr std::string_view kBackendKey = "backend-secret-0123456789abcdef";
const std::vector<std::string> kInstant = {"--profile", "instant"};
// Real-time steps of a few ms: a 2,000-token stream takes several seconds.
const std::vector<std::string> kLlama = {"--profile", "llama-3.1-8b-h100"};

std::string CompletionBody(std::string_view prompt, int max_tokens, std::string_view extra = "") {
  return fmt::format(R"({{"model":{},"prompt":{},"max_tokens":{}{}{}}})", Quote(kModel),
                     Quote(prompt), max_tokens, extra.empty() ? "" : ",", extra);
}

HeaderList Bearer(std::string_view key) {
  return {{"Authorization", fmt::format("Bearer {}", key)}};
}

bool IsErrorEvent(const std::string& data) {
  rapidjson::Document doc;
  doc.Parse(data.c_str());
  return !doc.HasParseError() && At(At(doc, "error"), "message").IsString();
}

// A chat chunk with a token: every chunk but the role-only first one and error events (bmas
// engine, like vLLM, streams one token per chunk).
bool CarriesAToken(const std::string& data) {
  return !IsErrorEvent(data) && data.find("\"role\"") == std::string::npos &&
         data.find("\"delta\"") != std::string::npos;
}

class GatewaySecurityTest : public ::testing::Test {
 protected:
  // One engine with `engine_args` whose key derives from kBackendKey, and a gateway with
  // `gateway_args` that sends it; user "alice" with a key (key_).
  void Start(const std::vector<std::string>& engine_args,
             const std::vector<std::string>& gateway_args = {}) {
    auto engine = EngineProcess::Start(engine_args, EngineEnv());
    ASSERT_TRUE(engine) << engine.error().message;
    engine_ = std::move(*engine);
    ASSERT_NO_FATAL_FAILURE(key_ = AddUser("alice"));
    std::vector<std::string> args = {"--backend", engine_->url()};
    args.insert(args.end(), gateway_args.begin(), gateway_args.end());
    EnvList env = Env();
    env.emplace_back("BMAS_BACKEND_API_KEY", std::string(kBackendKey));
    auto gateway = GatewayProcess::Start(args, env);
    ASSERT_TRUE(gateway) << gateway.error().message;
    gateway_ = std::move(*gateway);
    ASSERT_NE(gateway_->metrics_port(), 0) << gateway_->process().stdout_text();
    ASSERT_TRUE(Eventually([&] { return Healthy(); }, 10s))
        << "the backend never became healthy; gateway stderr:\n"
        << gateway_->process().StderrText();
  }

  void TearDown() override {
    if (engine_ != nullptr && engine_->process().running()) engine_->process().Signal(SIGCONT);
    if (gateway_ != nullptr && gateway_->process().running()) {
      ExitStatus s = gateway_->process().Stop(10s);
      EXPECT_TRUE(s.Success()) << "gateway " << s.ToString() << "; stderr:\n"
                               << gateway_->process().StderrText();
    }
    if (engine_ != nullptr && engine_->process().running()) engine_->process().Stop(10s);
  }

  EnvList Env() const { return {{"BMAS_STATE_DIR", dir_.path() + "/state"}}; }
  // An engine whose key is derived from the backend secret and its port, as `bmas up` starts.
  static EnvList EngineEnv() { return {{"BMAS_BACKEND_API_KEY", std::string(kBackendKey)}}; }

  std::string Cli(const std::vector<std::string>& args) {
    auto r = RunBmas(args, Env());
    if (!r) {
      ADD_FAILURE() << r.error().message;
      return "";
    }
    EXPECT_TRUE(r->status.Success()) << r->err;
    return r->out;
  }
  std::string AddUser(const std::string& name) {
    Cli({"user", "add", name});
    std::string out = Cli({"key", "create", name});
    EXPECT_THAT(out, StartsWith("sk-bmas-"));
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  std::string Metrics() { return gateway_->OperatorGet("/metrics"); }
  bool Healthy() { return Healthy(engine_->url()); }
  bool Healthy(const std::string& url) {
    auto v = MetricValue(Metrics(), fmt::format("bmas_gateway_backend_healthy{{backend={}}}",
                                                Quote(url)));
    return v == 1;
  }

  HttpResponse PostAs(std::string_view key, std::string_view target, std::string body,
                      uint16_t port = 0) {
    HttpClient c(port != 0 ? port : gateway_->port());
    RequestOptions o;
    o.headers = Bearer(key);
    auto r = c.Request(http::verb::post, target, std::move(body), o);
    if (!r) {
      ADD_FAILURE() << r.error().message;
      return {};
    }
    return std::move(*r);
  }

  TempDir dir_;
  std::unique_ptr<EngineProcess> engine_;
  std::unique_ptr<GatewayProcess> gateway_;
  std::string key_;
};

// Issue 11.6: a bearer string is kept only when it has a key's form, and the cache is bounded.
TEST_F(GatewaySecurityTest, KeylessRequestsDoNotGrowTheKeyCache) {
  ASSERT_NO_FATAL_FAILURE(Start(kInstant, {"--key-cache-size", "64"}));
  // Used once before the flood: a known key stays usable from an address past its unknown keys.
  ASSERT_EQ(PostAs(key_, "/v1/completions", CompletionBody("hi", 2)).status, 200);
  HttpClient c(gateway_->port());
  std::mt19937_64 rng(11);
  auto hex = [&](size_t n) {
    std::string s;
    while (s.size() < n) s += fmt::format("{:016x}", rng());
    return s.substr(0, n);
  };
  for (int i = 0; i < 10000; ++i) {
    // Half garbage of any length (up to 8 KB), half of a key's exact form but unknown.
    std::string bearer = i % 2 == 0 ? hex(16 + rng() % 8192) : "sk-bmas-" + hex(12) + "-" + hex(48);
    c.SetDefaultHeader("Authorization", "Bearer " + bearer);
    auto r = c.Get("/v1/models");
    ASSERT_TRUE(r) << r.error().message;
    // 429 once this address sent too many unknown keys (issue 23.7).
    ASSERT_TRUE(r->status == 401 || r->status == 429) << r->status << " " << bearer;
  }
  const auto entries = MetricValue(Metrics(), "bmas_gateway_key_cache_entries");
  ASSERT_TRUE(entries.has_value());
  EXPECT_LE(*entries, 64);
  // The valid key still works, and is cached among the rest.
  HttpResponse ok = PostAs(key_, "/v1/completions", CompletionBody("hi", 2));
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_LE(MetricValue(Metrics(), "bmas_gateway_key_cache_entries").value_or(1e9), 64);
}

// Issue 23.7: a client sending random keys of a key's form gets no negative answer cached (so
// no look-up at each refresh, no real user pushed out), and after a few failures its address
// gets 429 without any store look-up. A real user's key keeps working, cached or from another
// address.
TEST_F(GatewaySecurityTest, UnknownKeysAreNotCachedAndLimitedPerAddress) {
  ASSERT_NO_FATAL_FAILURE(Start(kInstant, {"--key-cache-size", "64"}));
  const std::string bob = AddUser("bob");
  HttpClient c(gateway_->port());
  c.SetDefaultHeader("Authorization", "Bearer " + key_);
  ASSERT_EQ(c.Get("/v1/models")->status, 200);  // alice's key, cached from here on
  const double lookups_before =
      MetricValue(Metrics(), "bmas_gateway_key_lookups_total").value_or(-1);
  ASSERT_GE(lookups_before, 1);
  // Alice's key with one thing changed, so of a key's length but not its form: a letter of
  // the prefix, a digit made upper case, one not hex. Each is refused without a look-up in
  // the store, and does not count against the address (the counts below stay exact).
  std::vector<std::string> misshapen(3, key_);
  misshapen[0][5] = 'z';
  misshapen[1].back() = 'A';
  misshapen[2][10] = 'g';
  for (const std::string& bad : misshapen) {
    ASSERT_NE(bad, key_);
    c.SetDefaultHeader("Authorization", "Bearer " + bad);
    auto r = c.Get("/v1/models");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, 401) << bad << " " << r->body;
  }
  EXPECT_EQ(MetricValue(Metrics(), "bmas_gateway_key_lookups_total").value_or(-1),
            lookups_before);
  std::mt19937_64 rng(23);
  int refused = 0, limited = 0;
  std::string last_body;
  for (int i = 0; i < 500; ++i) {
    c.SetDefaultHeader("Authorization",
                       fmt::format("Bearer sk-bmas-{:012x}-{:016x}{:016x}{:016x}",
                                   rng() & 0xffffffffffffULL, rng(), rng(), rng()));
    auto r = c.Get("/v1/models");
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_TRUE(r->status == 401 || r->status == 429) << r->status << r->body;
    (r->status == 401 ? refused : limited) += 1;
    if (r->status == 429) {
      last_body = r->body;
      EXPECT_TRUE(r->Header("Retry-After").has_value());
    }
  }
  // The default limit: 20 unknown keys per address and minute; then no look-up at all.
  EXPECT_EQ(refused, 20);
  EXPECT_EQ(limited, 480);
  EXPECT_THAT(last_body, HasSubstr("too many unknown API keys from your address"));
  const std::string metrics = Metrics();
  EXPECT_EQ(MetricValue(metrics, "bmas_gateway_key_lookups_total").value_or(-1),
            lookups_before + 20);
  EXPECT_EQ(MetricValue(metrics, "bmas_gateway_keys_limited_total").value_or(-1), 480);
  // No negative entry: the cache holds alice's key alone.
  EXPECT_EQ(MetricValue(metrics, "bmas_gateway_key_cache_entries").value_or(-1), 1);
  // Alice (cached) still gets through from the limited address.
  c.SetDefaultHeader("Authorization", "Bearer " + key_);
  EXPECT_EQ(c.Get("/v1/models")->status, 200);
  EXPECT_EQ(PostAs(key_, "/v1/completions", CompletionBody("hi", 2)).status, 200);
  // Bob, never seen, from another address (127.0.0.2 is loopback too) is looked up and served.
  auto from_elsewhere = RunCommand(
      {"curl", "-sS", "-m", "10", "--interface", "127.0.0.2", "-o", "/dev/null", "-w",
       "%{http_code}", "-H", "Authorization: Bearer " + bob,
       fmt::format("http://127.0.0.1:{}/v1/models", gateway_->port())});
  ASSERT_TRUE(from_elsewhere);
  EXPECT_EQ(from_elsewhere->out, "200") << from_elsewhere->err;
}

// Issue 11.8: user names and per-user tokens are operator data, off the users' port.
TEST_F(GatewaySecurityTest, MetricsOnlyOnTheOperatorListener) {
  ASSERT_NO_FATAL_FAILURE(Start(kInstant));
  EXPECT_EQ(PostAs(key_, "/v1/completions", CompletionBody("hi", 2)).status, 200);
  HttpClient users(gateway_->port());
  users.SetDefaultHeader("Authorization", "Bearer " + key_);
  auto r = users.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_THAT(r->body, Not(HasSubstr("alice")));
  EXPECT_TRUE(Eventually([&] { return Metrics().find("user=\"alice\"") != std::string::npos; }))
      << Metrics();
  // The operator listener serves nothing else.
  HttpClient op(gateway_->metrics_port());
  op.SetDefaultHeader("Authorization", gateway_->operator_bearer());
  auto models = op.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 404);
}

// Issue 23.4: every user's token counts (/metrics) and the queues (/load) are operator data: a
// student on the same machine gets 401 and nothing from the operator listener without the
// operator secret, or with a wrong one, and cannot read the secret's file; the operator (and
// the dashboard and controller, which read the same file) gets the data with it.
TEST_F(GatewaySecurityTest, OperatorListenerAnswersOnlyWithTheSecret) {
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);  // the student can reach the state dir
  ASSERT_NO_FATAL_FAILURE(Start(kInstant));
  const std::string student = EnsureUnixUser("bmastest1");
  EXPECT_EQ(PostAs(key_, "/v1/completions", CompletionBody("hi", 2)).status, 200);
  ASSERT_TRUE(Eventually([&] { return Metrics().find("user=\"alice\"") != std::string::npos; }))
      << Metrics();
  const std::string state = dir_.path() + "/state";
  const std::string secret = OperatorSecretOf(state);
  ASSERT_EQ(secret.size(), 64u);
  for (const std::string target : {"/metrics", "/load", "/metrics?format=json", "/nothing"}) {
    for (const std::string bearer :
         {std::string(), std::string("Bearer wrong"), "Bearer " + std::string(64, '0'),
          std::string("Bearer "), std::string("Basic YWxpY2U6")}) {
      SCOPED_TRACE(target + " with '" + bearer + "'");
      const HttpResponse r = GetAsUser(student, gateway_->metrics_port(), target, bearer);
      EXPECT_EQ(r.status, 401) << r.body;
      EXPECT_THAT(r.body, HasSubstr("operator secret"));
      EXPECT_THAT(r.body, Not(HasSubstr("alice")));
      EXPECT_THAT(r.body, Not(HasSubstr("bmas_gateway")));
    }
  }
  EXPECT_FALSE(UserCanRead(student, state + "/run/operator.secret"));
  struct stat st {};
  ASSERT_EQ(stat((state + "/run/operator.secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // The operator's way: the secret answers both.
  HttpClient op(gateway_->metrics_port());
  op.SetDefaultHeader("Authorization", "Bearer " + secret);
  auto metrics = op.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->body, HasSubstr("user=\"alice\""));
  auto load = op.Get("/load");
  ASSERT_TRUE(load);
  EXPECT_EQ(load->status, 200);
  EXPECT_THAT(load->body, HasSubstr("backends"));
  // So does `bmas gateway backend list`, which reads the secret as root.
  EXPECT_THAT(Cli({"gateway", "backend", "list"}), HasSubstr("healthy"));
}

// Issue 11.8: a backend answers /v1/* only with its key (vLLM's --api-key); the gateway has it.
TEST_F(GatewaySecurityTest, BackendsRequireTheirKey) {
  ASSERT_NO_FATAL_FAILURE(Start(kInstant));
  // Its key is its own: not the backend secret, nor another port's key.
  const std::string own_key = DeriveBackendKey(kBackendKey, engine_->port());
  for (const std::string& bearer :
       {std::string(), std::string("wrong"), key_, std::string(kBackendKey),
        DeriveBackendKey(kBackendKey, engine_->port() + 1), own_key + "x"}) {
    HttpClient direct(engine_->port());
    RequestOptions o;
    if (!bearer.empty()) o.headers = Bearer(bearer);
    auto r = direct.Request(http::verb::post, "/v1/completions", CompletionBody("hi", 2), o);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << "bearer '" << bearer << "': " << r->body;
    auto models = direct.Request(http::verb::get, "/v1/models", "", o);
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 401);
  }
  HttpClient direct(engine_->port());
  EXPECT_EQ(direct.Get("/health")->status, 200);
  EXPECT_EQ(direct.Get("/metrics")->status, 200);
  EXPECT_EQ(PostAs(own_key, "/v1/completions", CompletionBody("hi", 2), engine_->port()).status,
            200);
  // Through the gateway, with a user's key.
  HttpResponse ok = PostAs(key_, "/v1/completions", CompletionBody("hi", 2));
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_THAT(gateway_->process().StderrText(), Not(HasSubstr(std::string(kBackendKey))));
  EXPECT_THAT(gateway_->process().StderrText(), Not(HasSubstr(own_key)));
}

// Issue 23.1: a student who holds a backend's port (here before the gateway starts; a replica
// that restarts or loads leaves the same opening) answers the gateway in its place. It never
// receives a key or a prompt: the gateway challenges each new connection first, and the
// impostor cannot answer. The real backend beside it serves as before.
TEST_F(GatewaySecurityTest, AnImpostorOnABackendsPortGetsNoKeyAndNoPrompt) {
  const std::string student = EnsureUnixUser("bmas-test-student");
  const uint16_t port = static_cast<uint16_t>(FreeTcpPort());
  auto impostor = PortSquatter::Start(student, port, dir_.path() + "/impostor-received");
  ASSERT_TRUE(impostor) << impostor.error().message;
  ASSERT_NO_FATAL_FAILURE(Start(kInstant, {"--backend", (*impostor)->url()}));
  constexpr std::string_view kCanary = "canary-prompt-of-another-user";
  for (int i = 0; i < 6; ++i) {
    HttpResponse r = PostAs(key_, "/v1/completions", CompletionBody(kCanary, 2));
    EXPECT_EQ(r.status, 200) << r.body;
  }
  // Health checks every second: wait until the gateway has come back to it a few times.
  auto challenges = [&] {
    const std::string got = (*impostor)->Received();
    size_t n = 0;
    for (size_t at = got.find("/bmas/challenge"); at != std::string::npos;
         at = got.find("/bmas/challenge", at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_TRUE(Eventually([&] { return challenges() >= 3; }, 15s))
      << "received:\n" << (*impostor)->Received();
  const std::string received = (*impostor)->Received();
  EXPECT_THAT(received, Not(HasSubstr("Authorization")));
  EXPECT_THAT(received, Not(HasSubstr(std::string(kBackendKey))));
  EXPECT_THAT(received, Not(HasSubstr(DeriveBackendKey(kBackendKey, port))));
  EXPECT_THAT(received, Not(HasSubstr(DeriveBackendKey(kBackendKey, engine_->port()))));
  EXPECT_THAT(received, Not(HasSubstr(std::string(kCanary))));
  EXPECT_THAT(received, Not(HasSubstr("/v1/")));
  EXPECT_FALSE(Healthy((*impostor)->url()));
  EXPECT_THAT(gateway_->process().StderrText(),
              HasSubstr(fmt::format("backend {} did not prove its identity", (*impostor)->url())));
  EXPECT_TRUE(Healthy());
  EXPECT_EQ(PostAs(key_, "/v1/completions", CompletionBody("hi", 2)).status, 200);
}

// Issue 11.8: the gateway reads the first copy of a key, vLLM the last: a repeat is refused.
TEST_F(GatewaySecurityTest, RepeatedTopLevelKeyIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Start(kInstant));
  HttpResponse r = PostAs(
      key_, "/v1/completions",
      fmt::format(R"({{"model":{},"prompt":"hi","max_tokens":1,"max_tokens":50}})", Quote(kModel)));
  ExpectError(r, 400, "max_tokens");
  r = PostAs(key_, "/v1/completions",
             fmt::format(R"({{"model":"nobody/cheap","model":{},"prompt":"hi","max_tokens":1}})",
                         Quote(kModel)));
  ExpectError(r, 400, "model");
  EXPECT_EQ(PostAs(key_, "/v1/completions", CompletionBody("hi", 1)).status, 200);
}

// Issue 11.8: GET /v1/usage gives the caller's own usage and limits, no one else's.
TEST_F(GatewaySecurityTest, UsageEndpointShowsOnlyTheCallersOwn) {
  ASSERT_NO_FATAL_FAILURE(Start(kInstant));
  Cli({"user", "set", "alice", "--rpm", "1000"});
  const std::string bob = AddUser("bob");
  EXPECT_EQ(PostAs(key_, "/v1/completions", CompletionBody(PromptOfTokens(10), 3)).status, 200);
  HttpClient c(gateway_->port());
  auto anonymous = c.Get("/v1/usage");
  ASSERT_TRUE(anonymous);
  ExpectError(*anonymous, 401, std::nullopt);
  rapidjson::Document mine;
  EXPECT_TRUE(Eventually(
      [&] {
        c.SetDefaultHeader("Authorization", "Bearer " + key_);
        auto r = c.Get("/v1/usage");
        if (!r || r->status != 200) return false;
        mine = ParseJson(r->body);
        return Int(At(mine, "requests")) == 1;
      },
      5s));
  EXPECT_EQ(Str(At(mine, "user")), "alice");
  EXPECT_EQ(Int(At(mine, "completion_tokens")), 3);
  EXPECT_EQ(Int(At(mine, "prompt_tokens")), 10);
  EXPECT_EQ(Str(At(At(At(mine, "models"), 0), "model")), kModel);
  EXPECT_EQ(Int(At(At(mine, "limits"), "rpm")), 1000);
  c.SetDefaultHeader("Authorization", "Bearer " + bob);
  auto theirs = c.Get("/v1/usage");
  ASSERT_TRUE(theirs);
  ASSERT_EQ(theirs->status, 200);
  EXPECT_THAT(theirs->body, Not(HasSubstr("alice")));
  EXPECT_EQ(Int(At(ParseJson(theirs->body), "requests")), 0);
}

// Issue 11.9: stop strings are bounded as in the OpenAI API, at the gateway and the engine.
TEST_F(GatewaySecurityTest, StopStringsAreBounded) {
  ASSERT_NO_FATAL_FAILURE(Start(kInstant));
  std::string many = "[";
  for (int i = 0; i < 150000; ++i) many += fmt::format("{}\"s{}\"", i ? "," : "", i);
  many += "]";
  HttpResponse r = PostAs(key_, "/v1/completions", CompletionBody("hi", 2, R"("stop":)" + many));
  ExpectError(r, 400, "stop");
  EXPECT_THAT(r.body, HasSubstr("at most 4"));
  r = PostAs(DeriveBackendKey(kBackendKey, engine_->port()), "/v1/completions",
             CompletionBody("hi", 2, R"("stop":["a","b","c","d","e"])"), engine_->port());
  ExpectError(r, 400, "stop");
  EXPECT_EQ(PostAs(key_, "/v1/completions", CompletionBody("hi", 2, R"("stop":["a","b","c","d"])"))
                .status,
            200);
}

// Issue 11.9: a backend that stops answering (SIGSTOP) ends its streams with an error event
// after the idle timeout, not the 600 s upstream timeout, and is marked down.
TEST_F(GatewaySecurityTest, HungBackendEndsStreamsWithAnErrorEvent) {
  ASSERT_NO_FATAL_FAILURE(Start(kLlama, {"--upstream-idle-timeout", "1"}));
  std::vector<std::unique_ptr<SseStream>> streams;
  for (int i = 0; i < 4; ++i) {
    auto s = SseStream::Open(gateway_->port(), "/v1/completions",
                             CompletionBody(PromptOfTokens(8, i * 10), 4000, R"("stream":true)"),
                             20s, Bearer(key_));
    ASSERT_TRUE(s) << s.error().message;
    ASSERT_EQ((*s)->status(), 200);
    auto first = (*s)->Next();
    ASSERT_TRUE(first && *first) << "no first event";
    streams.push_back(std::move(*s));
  }
  engine_->process().Signal(SIGSTOP);
  for (auto& s : streams) {
    // Each ends cleanly (the chunked body ends) with an error event last; a read that hangs
    // past the client's 20 s deadline fails here.
    auto rest = s->ReadAll();
    ASSERT_TRUE(rest) << rest.error().message;
    ASSERT_FALSE(rest->empty());
    EXPECT_TRUE(IsErrorEvent(rest->back())) << rest->back();
  }
  EXPECT_TRUE(Eventually([&] { return !Healthy(); }, 5s));
  EXPECT_THAT(gateway_->process().StderrText(),
              HasSubstr(fmt::format("backend {} is down", engine_->url())));
  engine_->process().Signal(SIGCONT);
  EXPECT_TRUE(Eventually([&] { return Healthy(); }, 10s));
  EXPECT_EQ(PostAs(key_, "/v1/completions", CompletionBody("hi", 2)).status, 200);
}

// Issue 23.7: a non-streaming request to a backend that stops answering ends with a 504 naming
// the backend after the idle timeout, not after 600 s; the gateway serves others meanwhile.
TEST_F(GatewaySecurityTest, HungBackendAnswersAWholeRequestWith504) {
  auto other = EngineProcess::Start({"--profile", "instant", "--model", "other-model"},
                                    EngineEnv());
  ASSERT_TRUE(other) << other.error().message;
  ASSERT_NO_FATAL_FAILURE(Start(kInstant, {"--upstream-idle-timeout", "5", "--backend",
                                           (*other)->url()}));
  ASSERT_TRUE(Eventually([&] { return Healthy((*other)->url()); }, 10s));
  // A request first: the gateway keeps its connection, which then reaches the stopped engine.
  EXPECT_EQ(PostAs(key_, "/v1/completions", CompletionBody("hi", 2)).status, 200);
  engine_->process().Signal(SIGSTOP);
  std::atomic<bool> done = false;
  HttpResponse hung;
  std::thread t([&] {
    hung = PostAs(key_, "/v1/completions", CompletionBody("hi", 2));
    done = true;
  });
  bool served_meanwhile = false;
  for (int i = 0; i < 3; ++i) {
    const std::string body = fmt::format(R"({{"model":"other-model","prompt":"hi","max_tokens":2}})");
    HttpResponse r = PostAs(key_, "/v1/completions", body);
    EXPECT_EQ(r.status, 200) << r.body;
    served_meanwhile = served_meanwhile || (r.status == 200 && !done);
  }
  t.join();
  EXPECT_TRUE(served_meanwhile) << "the hung request ended before the others were served";
  ExpectError(hung, 504, std::nullopt);
  EXPECT_THAT(hung.body, HasSubstr(engine_->url())) << hung.body;
  EXPECT_THAT(hung.body, HasSubstr("5000 ms")) << hung.body;
  engine_->process().Signal(SIGCONT);
  EXPECT_TRUE(Eventually([&] { return Healthy(); }, 10s));
  EXPECT_EQ(PostAs(key_, "/v1/completions", CompletionBody("hi", 2)).status, 200);
}

// Issue 11.9: a cut stream is metered by its content events (not the role-only first one),
// and its prompt by the characters-per-token ratio the model's replies have shown.
TEST_F(GatewaySecurityTest, CutStreamIsMeteredByWhatItCarried) {
  ASSERT_NO_FATAL_FAILURE(Start(kLlama));
  const std::string prompt = PromptOfTokens(300);
  // A whole reply teaches the gateway this model's characters per token.
  HttpResponse whole = PostAs(key_, "/v1/completions", CompletionBody(prompt, 1));
  ASSERT_EQ(whole.status, 200);
  const int64_t true_prompt = Int(At(At(ParseJson(whole.body), "usage"), "prompt_tokens"));
  ASSERT_EQ(true_prompt, 300);

  const std::string chat = fmt::format(
      R"({{"model":{},"messages":[{{"role":"user","content":{}}}],"max_tokens":4000,"stream":true}})",
      Quote(kModel), Quote(prompt));
  auto s = SseStream::Open(gateway_->port(), "/v1/chat/completions", chat, 20s, Bearer(key_));
  ASSERT_TRUE(s) << s.error().message;
  int content = 0;
  for (int i = 0; i < 10; ++i) {
    auto e = (*s)->Next();
    ASSERT_TRUE(e && *e);
    if (CarriesAToken(**e)) ++content;
  }
  engine_->process().Signal(SIGKILL);
  auto rest = (*s)->ReadAll();
  ASSERT_TRUE(rest) << rest.error().message;
  for (const std::string& e : *rest) {
    if (CarriesAToken(e)) ++content;
  }
  ASSERT_FALSE(rest->empty());
  EXPECT_TRUE(IsErrorEvent(rest->back()));

  rapidjson::Document usage;
  ASSERT_TRUE(Eventually(
      [&] {
        usage = ParseJson(Cli({"usage", "--json"}));
        int64_t requests = 0;
        for (const auto& row : usage.GetArray()) requests += Int(At(row, "requests"));
        return requests == 2;
      },
      5s))
      << Cli({"usage", "--json"});
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (const auto& row : usage.GetArray()) {
    prompt_tokens += Int(At(row, "prompt_tokens"));
    completion_tokens += Int(At(row, "completion_tokens"));
  }
  // The whole reply: 300 + 1; the cut one: its content events, and its prompt estimated from
  // 300 tokens' worth of characters (the chat template adds none here).
  EXPECT_EQ(completion_tokens - 1, content);
  EXPECT_NEAR(static_cast<double>(prompt_tokens - 300), 300.0, 3.0);
}

// Issue 11.9: SIGTERM's deadline ends a stream still running as a failed backend would: an
// SSE error event, then the end of the response.
TEST_F(GatewaySecurityTest, ShutdownDeadlineEndsStreamsWithAnErrorEvent) {
  ASSERT_NO_FATAL_FAILURE(Start(kLlama, {"--shutdown-timeout", "1"}));
  auto s = SseStream::Open(gateway_->port(), "/v1/completions",
                           CompletionBody("long", 100000, R"("stream":true)"), 20s, Bearer(key_));
  ASSERT_TRUE(s) << s.error().message;
  auto first = (*s)->Next();
  ASSERT_TRUE(first && *first);
  gateway_->process().Signal(SIGTERM);
  auto rest = (*s)->ReadAll();
  ASSERT_TRUE(rest) << rest.error().message;
  ASSERT_FALSE(rest->empty());
  EXPECT_TRUE(IsErrorEvent(rest->back())) << rest->back();
  auto status = gateway_->process().Wait(10s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(status->Success()) << status->ToString();
}

// A backend key in a file that others may read is refused, by the engine and the gateway;
// one only its owner reads works.
TEST_F(GatewaySecurityTest, KeyFilesOthersCanReadAreRefused) {
  const std::string key_file = dir_.WriteFile("backend.key", std::string(kBackendKey) + "\n");
  ASSERT_EQ(chmod(key_file.c_str(), 0644), 0);
  const std::string config = dir_.WriteFile(
      "bmas.toml", fmt::format("[engine]\nprofile = \"instant\"\napi_key_file = \"{}\"\n"
                               "[gateway]\nbackend_api_key_file = \"{}\"\n",
                               key_file, key_file));
  for (const char* command : {"engine", "gateway"}) {
    auto refused = RunBmas({"--config", config, command, "--port", "0"}, Env(), 10s);
    ASSERT_TRUE(refused) << refused.error().message;
    EXPECT_FALSE(refused->status.Success()) << command;
    EXPECT_THAT(refused->err, HasSubstr("chmod 600")) << command;
    EXPECT_THAT(refused->err, Not(HasSubstr(std::string(kBackendKey)))) << command;
  }
  ASSERT_EQ(chmod(key_file.c_str(), 0600), 0);
  auto engine = Process::Start({"--config", config, "engine", "--port", "0"});
  ASSERT_TRUE(engine) << engine.error().message;
  auto line = (*engine)->WaitForLine("listening on", 10s);
  ASSERT_TRUE(line) << line.error().message << (*engine)->StderrText();
  const uint16_t port = PortOfUrl(line->substr(line->find("http://")));
  HttpClient c(port);
  EXPECT_EQ(c.Get("/v1/models")->status, 401);
  c.SetDefaultHeader("Authorization", fmt::format("Bearer {}", kBackendKey));
  EXPECT_EQ(c.Get("/v1/models")->status, 200);
  EXPECT_TRUE((*engine)->Stop(10s).Success());
}

// Issue 11.9: out of file descriptors (EMFILE), the accept loop backs off, logs once per
// interval rather than once per attempt, and serves again once descriptors are free.
TEST_F(GatewaySecurityTest, AcceptLoopSurvivesEmfile) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  // Only the gateway gets the low limit: lowered around its start, which it inherits.
  struct Restore {
    rlimit limit;
    ~Restore() { setrlimit(RLIMIT_NOFILE, &limit); }
  } restore{saved};
  auto engine = EngineProcess::Start(kInstant, EngineEnv());
  ASSERT_TRUE(engine) << engine.error().message;
  engine_ = std::move(*engine);
  ASSERT_NO_FATAL_FAILURE(key_ = AddUser("alice"));
  EnvList env = Env();
  env.emplace_back("BMAS_BACKEND_API_KEY", std::string(kBackendKey));
  rlimit low = saved;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  auto gateway = GatewayProcess::Start({"--backend", engine_->url()}, env);
  setrlimit(RLIMIT_NOFILE, &saved);
  ASSERT_TRUE(gateway) << gateway.error().message;
  gateway_ = std::move(*gateway);
  ASSERT_TRUE(Eventually([&] { return Healthy(); }, 10s));

  // 200 connections that send nothing: more than the gateway has descriptors for.
  net::io_context io;
  std::vector<tcp::socket> held;
  for (int i = 0; i < 200; ++i) {
    tcp::socket s(io);
    boost::system::error_code ec;
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), gateway_->port()), ec);
    if (!ec) held.push_back(std::move(s));
  }
  EXPECT_TRUE(Eventually(
      [&] { return gateway_->process().StderrText().find("accept failed") != std::string::npos; },
      5s))
      << "the gateway never ran out of descriptors";
  // Left failing for a while: one line, not one per attempt (20 a second).
  std::this_thread::sleep_for(1s);
  const std::string log = gateway_->process().StderrText();
  size_t lines = 0;
  for (size_t at = log.find("accept failed"); at != std::string::npos;
       at = log.find("accept failed", at + 1)) {
    ++lines;
  }
  EXPECT_LE(lines, 2u) << log;
  held.clear();
  // The loop kept going: the gateway serves again.
  EXPECT_TRUE(Eventually(
      [&] {
        HttpClient c(gateway_->port());
        RequestOptions o;
        o.headers = Bearer(key_);
        auto r = c.Request(http::verb::post, "/v1/completions", CompletionBody("hi", 2), o);
        return r && r->status == 200;
      },
      10s));
  EXPECT_TRUE(gateway_->process().running());
}

}  // namespace
}  // namespace bmas::testing
