// Issue 25: the gateway reaches replicas on other nodes over TLS. A `bmas engine` in oss01
// serves on the bridge with a certificate the cluster CA issued for oss01 (vLLM's
// --ssl-certfile/--ssl-keyfile); a gateway in mgs1 streams a chat completion through it for a
// non-root user's key, checking the certificate against the CA and the name dialled, then the
// engine's identity challenge, over TLS. Impostors in oss02 (another CA's certificate for
// oss02; the cluster CA's certificate for another host) get no prompt: their handshake fails
// before anything is sent. A plain http:// backend off loopback is refused at start.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cluster/cluster_ca.h"
#include "bed_cas.h"
#include "net_bed.h"
#include "test_helpers.h"

namespace bmas::testbed {
namespace {

using bmas::testing::Eventually;

constexpr const char* kBackendSecret = "replica-tls-backend-secret-0123456789";

void WriteFile(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

class ReplicaTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the test bed needs root";
    const char* bmas = std::getenv("BMAS_BINARY");
    if (bmas == nullptr) GTEST_SKIP() << "BMAS_BINARY is not set";
    bmas_ = bmas;
    BedOptions o;
    o.name = "replicatls";
    o.nodes = 2;
    auto started = bed_.Start(o);
    ASSERT_TRUE(started) << started.error().message;
    dir_ = bed_.dir() + "/replicatls";
    std::filesystem::create_directories(dir_);
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
    auto cas = BedCas::Make(dir_);
    ASSERT_TRUE(cas) << cas.error().message;
    cas_ = std::move(*cas);
    WriteFile(dir_ + "/backend.secret", std::string(kBackendSecret) + "\n");
    user_ = bmas::testing::EnsureUnixUser("bmasreplica");
  }

  void TearDown() override {
    if (bmas_.empty()) return;
    bed_.Stop();
    EXPECT_EQ(bed_.Leftovers(), std::vector<std::string>{});
  }

  CommandOutput In(const std::string& host, const std::vector<std::string>& args,
                   const std::string& user = "") {
    auto r = bed_.Run(host, args, user, std::chrono::seconds(60));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }


  // `bmas engine` in `host` on `listen` over TLS with `cert`, its key derived from the backend
  // secret and its port, as `bmas up` and the inference controller start replicas.
  void StartEngine(const std::string& host, const std::string& name, const std::string& address,
                   int port, const std::pair<std::string, std::string>& cert) {
    auto d = bed_.StartDaemon(
        host, name, "bmas",
        {bmas_, "engine", "--profile", "instant", "--host", address, "--port",
         std::to_string(port), "--ssl-certfile", cert.first, "--ssl-keyfile", cert.second},
        {std::string("BMAS_BACKEND_API_KEY=") + kBackendSecret});
    ASSERT_TRUE(d) << d.error().message;
    const std::string ready = fmt::format("listening on https://{}:{}", address, port);
    ASSERT_TRUE(Eventually([&] { return bed_.LogTail(name).find(ready) != std::string::npos; },
                           std::chrono::seconds(20)))
        << bed_.LogTail(name);
  }

  std::string GatewayConfig(const std::string& name, const std::string& backends,
                            int port = 8080) {
    const std::string path = fmt::format("{}/{}.toml", dir_, name);
    WriteFile(path,
              fmt::format("[gateway]\nhost = \"10.200.0.1\"\nport = {}\nbackends = [{}]\n"
                          "backend_api_key_file = \"{}/backend.secret\"\nmetrics_listen = \"\"\n",
                          port, backends, dir_),
              0644);
    return path;
  }

  // The gateway's command, the test CA named in $BMAS_BACKEND_CA_FILE (through env(1)).
  std::vector<std::string> GatewayArgs(const std::string& config,
                                       const std::string& state = "mgs1-state",
                                       const std::string& ca_file = "") {
    return {"env", "BMAS_BACKEND_CA_FILE=" + (ca_file.empty() ? cas_.ca_file : ca_file), bmas_,
            "--config", config, "--state-dir", dir_ + "/" + state, "gateway"};
  }

  // A user of the gateway's store and a key of theirs.
  std::string AddUser(const std::string& name, const std::string& state_name = "mgs1-state") {
    const std::string state = dir_ + "/" + state_name;
    EXPECT_EQ(In("mgs1", {bmas_, "--state-dir", state, "user", "add", name}).exit_code, 0);
    std::string key = In("mgs1", {bmas_, "--state-dir", state, "key", "create", name}).out;
    while (!key.empty() && key.back() == '\n') key.pop_back();
    EXPECT_EQ(key.rfind("sk-bmas-", 0), 0u) << key;
    return key;
  }

  // A streamed chat completion through the gateway as the Unix account user_.
  CommandOutput Stream(const std::string& key) {
    return In("mgs1",
              {"curl", "-sS", "-N", "-m", "20", "-H", "Authorization: Bearer " + key, "-H",
               "Content-Type: application/json", "-d",
               R"({"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"max_tokens":8,)"
               R"("messages":[{"role":"user","content":"a secret prompt"}]})",
               "http://10.200.0.1:8080/v1/chat/completions"},
              user_);
  }

  // The prompt tokens an engine in `host` has seen (its /metrics over TLS, not checked: this
  // reads the impostor's own count).
  double PromptTokens(const std::string& host, const std::string& url) {
    const CommandOutput m = In(host, {"curl", "-sk", "-m", "5", url + "/metrics"});
    EXPECT_NE(m.out.find("vllm:prompt_tokens_total"), std::string::npos) << m.out << m.err;
    double sum = 0;
    std::istringstream lines(m.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("vllm:prompt_tokens_total", 0) == 0) {
        sum += std::strtod(line.substr(line.rfind(' ') + 1).c_str(), nullptr);
      }
    }
    return sum;
  }

  NetBed bed_;
  std::string bmas_;
  std::string dir_;
  std::string user_;
  BedCas cas_;
};

TEST_F(ReplicaTlsTest, AGatewayStreamsThroughAReplicaOnAnotherNodeAndImpostorsGetNoPrompt) {
  StartEngine("oss01", "replica", "10.200.0.11", 18100,
              cas_.Issue(cas_.ca, {"oss01", "10.200.0.11"}, "oss01"));
  StartEngine("oss02", "impostor", "10.200.0.12", 18100,
              cas_.Issue(cas_.impostor, {"oss02", "10.200.0.12"}, "impostor"));
  StartEngine("oss02", "wrong-name", "10.200.0.12", 18101,
              cas_.Issue(cas_.ca, {"oss09", ""}, "wrong"));
  const std::string key = AddUser("alice");
  auto gw = bed_.StartDaemon(
      "mgs1", "gateway", "bmas",
      GatewayArgs(GatewayConfig("gateway", R"("https://oss01:18100", "https://oss02:18100", )"
                                            R"("https://10.200.0.12:18101")")));
  ASSERT_TRUE(gw) << gw.error().message;
  CommandOutput got;
  ASSERT_TRUE(Eventually(
      [&] {
        got = Stream(key);
        return got.out.find("data: [DONE]") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << got.out << got.err << bed_.LogTail("gateway", 40);
  EXPECT_NE(got.out.find("\"delta\""), std::string::npos) << got.out;
  for (int i = 0; i < 4; ++i) {
    got = Stream(key);
    EXPECT_NE(got.out.find("data: [DONE]"), std::string::npos) << got.out << got.err;
  }
  // The gateway refused both impostors at their certificates, before the challenge, the key or
  // a prompt, and says why.
  const std::string log = bed_.LogTail("gateway", 200);
  EXPECT_NE(log.find("backend https://oss02:18100 is not the server the cluster CA vouches for: "
                     "unable to get local issuer"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("backend https://10.200.0.12:18101 is not the server the cluster CA "
                     "vouches for"),
            std::string::npos)
      << log;
  EXPECT_EQ(PromptTokens("oss02", "https://10.200.0.12:18100"), 0);
  EXPECT_EQ(PromptTokens("oss02", "https://10.200.0.12:18101"), 0);
  EXPECT_GT(PromptTokens("oss01", "https://10.200.0.11:18100"), 0);
  // The engine's port on the bridge is TLS only.
  const CommandOutput plain =
      In("mgs1", {"curl", "-s", "-m", "5", "http://10.200.0.11:18100/health"});
  EXPECT_EQ(plain.out.find("ok"), std::string::npos) << plain.out;
}

TEST_F(ReplicaTlsTest, APlainHttpBackendOffLoopbackIsRefused) {
  const CommandOutput r =
      In("mgs1", GatewayArgs(GatewayConfig("plain", R"("http://10.200.0.11:18100")")));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("plain HTTP off loopback"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("https://10.200.0.11:18100"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("BMAS_PLAIN_REMOTE_BACKENDS"), std::string::npos) << r.err;
  // An https:// backend with no CA to check it by is a config error too.
  const CommandOutput noca =
      In("mgs1", GatewayArgs(GatewayConfig("noca", R"("https://oss01:18100")"), "mgs1-state",
                             "/nonexistent/ca.crt"));
  EXPECT_EQ(noca.exit_code, 2) << noca.out << noca.err;
  EXPECT_NE(noca.err.find("BMAS_BACKEND_CA_FILE"), std::string::npos) << noca.err;
}

// Not a test: what TLS to a replica on another node adds to a stream (bench/RESULTS.md,
// "Replicas across the network"). Run with --gtest_also_run_disabled_tests.
TEST_F(ReplicaTlsTest, DISABLED_MeasureStreamsToAReplicaOnAnotherNode) {
  StartEngine("oss01", "remote", "10.200.0.11", 18100,
              cas_.Issue(cas_.ca, {"oss01", "10.200.0.11"}, "oss01"));
  auto local = bed_.StartDaemon(
      "mgs1", "local", "bmas",
      {bmas_, "engine", "--profile", "instant", "--host", "127.0.0.1", "--port", "18100"},
      {std::string("BMAS_BACKEND_API_KEY=") + kBackendSecret});
  ASSERT_TRUE(local) << local.error().message;
  auto tls = bed_.StartDaemon(
      "mgs1", "gw-tls", "bmas",
      GatewayArgs(GatewayConfig("gw-tls", R"("https://oss01:18100")", 8080), "tls-state"));
  ASSERT_TRUE(tls) << tls.error().message;
  auto plain = bed_.StartDaemon(
      "mgs1", "gw-plain", "bmas",
      GatewayArgs(GatewayConfig("gw-plain", R"("http://127.0.0.1:18100")", 8081), "plain-state"));
  ASSERT_TRUE(plain) << plain.error().message;
  const std::string tls_key = AddUser("alice", "tls-state");
  const std::string plain_key = AddUser("alice", "plain-state");
  const int n = std::getenv("BMAS_BENCH_N") ? std::atoi(std::getenv("BMAS_BENCH_N")) : 200;
  // `n` streams one after another, as user_: curl's time to the stream's first byte (the
  // gateway opens it with the backend's first event) and to its end, in seconds.
  auto run = [&](int port, const std::string& key) {
    const std::string script = fmt::format(
        "for i in $(seq {}); do curl -sS -N -o /dev/null -w '%{{time_starttransfer}} "
        "%{{time_total}}\n' -H 'Authorization: Bearer {}' -H 'Content-Type: application/json' "
        "-d '{{\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"stream\":true,"
        "\"max_tokens\":16,\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}' "
        "http://10.200.0.1:{}/v1/chat/completions; done",
        n, key, port);
    auto r = bed_.Run("mgs1", {"sh", "-c", script}, user_, std::chrono::seconds(600));
    std::vector<double> first, total;
    if (!r) return std::pair{first, total};
    std::istringstream lines(r->out);
    for (double a, b; lines >> a >> b;) {
      first.push_back(a * 1000);
      total.push_back(b * 1000);
    }
    return std::pair{first, total};
  };
  // Both up: a first stream each (the TLS one pays the handshake to oss01 here).
  for (auto [port, key] : {std::pair{8080, tls_key}, std::pair{8081, plain_key}}) {
    ASSERT_TRUE(Eventually(
        [&, port = port, key = key] {
          return In("mgs1",
                    {"sh", "-c",
                     fmt::format("curl -sS -N -H 'Authorization: Bearer {}' -H 'Content-Type: "
                                 "application/json' -d '{{\"model\":\"meta-llama/"
                                 "Llama-3.1-8B-Instruct\",\"stream\":true,\"max_tokens\":4,"
                                 "\"messages\":[{{\"role\":\"user\",\"content\":\"x\"}}]}}' "
                                 "http://10.200.0.1:{}/v1/chat/completions",
                                 key, port)},
                    user_)
                     .out.find("[DONE]") != std::string::npos;
        },
        std::chrono::seconds(30)));
  }
  auto pct = [](std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(p * (v.size() - 1))];
  };
  // Alternating rounds, so that load elsewhere on the machine falls on both alike.
  std::vector<double> tf, tt, pf, pt;
  for (int round = 0; round < 3; ++round) {
    auto [a, b] = run(8080, tls_key);
    auto [c, d] = run(8081, plain_key);
    tf.insert(tf.end(), a.begin(), a.end());
    tt.insert(tt.end(), b.begin(), b.end());
    pf.insert(pf.end(), c.begin(), c.end());
    pt.insert(pt.end(), d.begin(), d.end());
  }
  ASSERT_EQ(tf.size(), pf.size());
  ASSERT_FALSE(tf.empty());
  fmt::print("streams: {} each, max_tokens 16, profile instant\n", tf.size());
  fmt::print("first byte ms   p50 {:.3f} tls-remote vs {:.3f} plain-loopback (+{:.3f}); p90 {:.3f} vs "
             "{:.3f}\n",
             pct(tf, 0.5), pct(pf, 0.5), pct(tf, 0.5) - pct(pf, 0.5), pct(tf, 0.9), pct(pf, 0.9));
  fmt::print("whole stream ms p50 {:.3f} tls-remote vs {:.3f} plain-loopback (+{:.3f}); p90 {:.3f} vs "
             "{:.3f}\n",
             pct(tt, 0.5), pct(pt, 0.5), pct(tt, 0.5) - pct(pt, 0.5), pct(tt, 0.9), pct(pt, 0.9));
}

}  // namespace
}  // namespace bmas::testbed
