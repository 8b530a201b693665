// Issue 25: the dashboard reads the agents of other nodes across the bed's network, over TLS.
// An agent in oss01 serves its metrics listener on the bridge with oss01's certificate from a
// test cluster CA; `bmas agent get` in mgs1 (the dashboard's client, HttpGet) reads its /gpus,
// fake NVML's GPUs, checking the certificate against that CA and the name dialled, and sending
// the operator secret. Impostors in oss02 (another CA's certificate for oss02; the cluster CA's
// certificate for another host) are refused before any request, and so before the secret, is
// sent; plain http off loopback is refused before anything is dialled; an agent told to listen
// off loopback with no certificate to serve refuses to start. A non-root student on a node gets
// 401 from the agent's port and can read neither the operator secret nor the node's key.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <fmt/format.h>

#include "cluster/cluster_ca.h"
#include "bed_cas.h"
#include "net_bed.h"
#include "test_helpers.h"

namespace bmas::testbed {
namespace {

using bmas::testing::Eventually;

void WriteFile(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

class AgentTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the test bed needs root";
    const char* bmas = std::getenv("BMAS_BINARY");
    if (bmas == nullptr) GTEST_SKIP() << "BMAS_BINARY is not set";
    bmas_ = bmas;
    BedOptions o;
    o.name = "agenttls";
    o.nodes = 2;
    auto started = bed_.Start(o);
    ASSERT_TRUE(started) << started.error().message;
    dir_ = bed_.dir() + "/agenttls";
    std::filesystem::create_directories(dir_);
    auto cas = BedCas::Make(dir_);
    ASSERT_TRUE(cas) << cas.error().message;
    cas_ = std::move(*cas);
    // The fake GPUs every agent reads.
    values_ = dir_ + "/nvml.txt";
    WriteFile(values_,
              "uuid=GPU-fake-tls-0 name=NVIDIA_H100_80GB_HBM3 util=42 mem_used_mib=512 "
              "mem_total_mib=81559 power_mw=72000 temp=33 mig=0 nvlinks=18 nvlinks_up=18 cc=9.0\n",
              0644);
  }

  // The agents go with the bed, and nothing is left.
  void TearDown() override {
    if (bmas_.empty()) return;
    bed_.Stop();
    EXPECT_EQ(bed_.Leftovers(), std::vector<std::string>{});
  }

  CommandOutput In(const std::string& host, const std::vector<std::string>& args) {
    auto r = bed_.Run(host, args, "", std::chrono::seconds(60));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }


  // A bmas.toml of `name`'s own: [agent] as given, no LXD of this host's (the reconcile pass
  // must not touch it), no idle-GPU policing.
  std::string Config(const std::string& name, const std::string& agent_table) {
    const std::string path = fmt::format("{}/{}.toml", dir_, name);
    WriteFile(path,
              fmt::format("[agent]\n{}\n[lxd]\ndir = \"{}/{}-lxd\"\n[idle]\nenabled = false\n",
                          agent_table, dir_, name),
              0644);
    return path;
  }

  std::string State(const std::string& name) { return fmt::format("{}/{}-state", dir_, name); }

  std::vector<std::string> AgentArgs(const std::string& name, const std::string& config) {
    return {bmas_, "--config", config, "--state-dir", State(name), "agent", "--socket",
            State(name) + "/agent.sock", "--nvml-library", BMAS_FAKE_NVML_LIBRARY,
            "--telemetry-interval", "0.2", "--reconcile-interval", "3600"};
  }

  // `bmas agent` in `host` as a daemon of the bed, up once it says where it listens.
  void StartAgent(const std::string& host, const std::string& name, const std::string& listen,
                  const std::pair<std::string, std::string>& cert) {
    const std::string config =
        Config(name, fmt::format("listen = \"{}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"", listen,
                                 cert.first, cert.second));
    auto d = bed_.StartDaemon(host, name, "bmas", AgentArgs(name, config),
                              {"BMAS_FAKE_NVML=" + values_});
    ASSERT_TRUE(d) << d.error().message;
    const std::string ready = fmt::format("metrics listening on https://{}", listen);
    ASSERT_TRUE(Eventually([&] { return bed_.LogTail(name).find(ready) != std::string::npos; },
                           std::chrono::seconds(20)))
        << bed_.LogTail(name);
  }

  // `bmas agent get ADDRESS` in mgs1, with the operator secret of agent `secret_of`.
  CommandOutput Get(const std::string& address, const std::string& secret_of = "oss01") {
    const std::string state = State("mgs1");
    std::filesystem::create_directories(state + "/run");
    std::filesystem::copy_file(State(secret_of) + "/run/operator.secret",
                               state + "/run/operator.secret",
                               std::filesystem::copy_options::overwrite_existing);
    EXPECT_EQ(::chmod((state + "/run/operator.secret").c_str(), 0600), 0);
    const std::string config = Config("mgs1", fmt::format("ca = \"{}\"", cas_.ca_file));
    return In("mgs1", {bmas_, "--config", config, "--state-dir", state, "agent", "get", address});
  }

  NetBed bed_;
  std::string bmas_;
  std::string dir_;
  BedCas cas_;
  std::string values_;
};

TEST_F(AgentTlsTest, TheControllerReadsANodesGpusOverTls) {
  StartAgent("oss01", "oss01", "10.200.0.11:9400",
             cas_.Issue(cas_.ca, {"oss01", "10.200.0.11"}, "oss01"));
  CommandOutput got;
  EXPECT_TRUE(Eventually(
      [&] {
        got = Get("https://oss01:9400");
        return got.exit_code == 0 && got.out.find("GPU-fake-tls-0") != std::string::npos;
      },
      std::chrono::seconds(20)))
      << got.exit_code << " " << got.err << got.out;
  // The same through the address the certificate names.
  got = Get("https://10.200.0.11:9400");
  EXPECT_EQ(got.exit_code, 0) << got.err;
  // The agent answered through its TLS front, and the secret was checked: another secret is
  // refused (401), not served.
  const std::string log = bed_.LogTail("oss01", 200);
  EXPECT_NE(log.find("bmas agent tls: GET /gpus 200"), std::string::npos) << log;
  StartAgent("oss02", "oss02", "10.200.0.12:9400",
             cas_.Issue(cas_.ca, {"oss02", "10.200.0.12"}, "oss02"));
  const CommandOutput wrong = Get("https://oss01:9400", "oss02");
  EXPECT_NE(wrong.exit_code, 0) << wrong.out;
  EXPECT_NE(wrong.err.find("401"), std::string::npos) << wrong.err;
  // The listener on the bridge is TLS only: plain HTTP to it gets no metrics.
  const CommandOutput plain =
      In("mgs1", {"curl", "-s", "-m", "5", "http://10.200.0.11:9400/health"});
  EXPECT_EQ(plain.out.find("\"ok\""), std::string::npos) << plain.out;
}

// A student with a shell on a node (oss01, the agent's own, and oss02) is not root: the agent's
// port on the bridge serves them nothing without the operator secret, and neither the secret nor
// the node's key can be read to get one.
TEST_F(AgentTlsTest, AStudentOnANodeGetsNothingFromTheAgentsPort) {
  const auto cert = cas_.Issue(cas_.ca, {"oss01", "10.200.0.11"}, "oss01");
  StartAgent("oss01", "oss01", "10.200.0.11:9400", cert);
  const std::string student = bmas::testing::EnsureUnixUser("bmastest1");
  for (const char* host : {"oss01", "oss02"}) {
    SCOPED_TRACE(host);
    for (const std::string& bearer : {std::string(), std::string("Authorization: Bearer guess")}) {
      std::vector<std::string> curl = {"curl", "-sk", "-m", "5", "-o", "/dev/null", "-w",
                                       "%{http_code}", "https://10.200.0.11:9400/gpus"};
      if (!bearer.empty()) curl.insert(curl.begin() + 1, {"-H", bearer});
      auto r = bed_.Run(host, curl, student);
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_EQ(r->out, "401") << bearer << r->err;
    }
    for (const std::string& secret : {State("oss01") + "/run/operator.secret", cert.second}) {
      auto r = bed_.Run(host, {"cat", secret}, student);
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_NE(r->exit_code, 0) << secret << " is readable by " << student;
      EXPECT_EQ(r->out, "") << secret;
    }
  }
  const std::string log = bed_.LogTail("oss01", 200);
  EXPECT_EQ(log.find("/gpus 200"), std::string::npos) << log;
}

TEST_F(AgentTlsTest, ImpostorAgentsAreRefusedBeforeTheSecretIsSent) {
  StartAgent("oss02", "impostor", "10.200.0.12:9400",
             cas_.Issue(cas_.impostor, {"oss02", "10.200.0.12"}, "impostor"));
  StartAgent("oss02", "wrong-name", "10.200.0.12:9402",
             cas_.Issue(cas_.ca, {"oss09", ""}, "wrong-name"));
  for (const auto& [url, secret_of, why] :
       {std::tuple<std::string, std::string, std::string>{"https://oss02:9400", "impostor",
                                                          "unable to get local issuer"},
        {"https://10.200.0.12:9402", "wrong-name", "mismatch"}}) {
    const CommandOutput r = Get(url, secret_of);
    EXPECT_NE(r.exit_code, 0) << url << r.out;
    EXPECT_NE(r.err.find("nothing was sent"), std::string::npos) << url << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << url << r.err;
  }
  for (const char* agent : {"impostor", "wrong-name"}) {
    const std::string log = bed_.LogTail(agent, 200);
    EXPECT_EQ(log.find("/gpus"), std::string::npos) << agent << ": " << log;
  }
}

TEST_F(AgentTlsTest, PlainHttpOffLoopbackIsRefusedBothWays) {
  // The client never dials a plain remote address: the secret would cross in clear text.
  std::filesystem::create_directories(State("oss01") + "/run");
  WriteFile(State("oss01") + "/run/operator.secret", "0123456789abcdef\n");
  for (const char* plain : {"10.200.0.11:9400", "oss01:9400", "http://oss01:9400"}) {
    const CommandOutput r = Get(plain);
    EXPECT_EQ(r.exit_code, 2) << plain << r.out;
    EXPECT_NE(r.err.find("https://"), std::string::npos) << plain << r.err;
  }
  const CommandOutput dashboard =
      In("mgs1", {bmas_, "--config", Config("mgs1", fmt::format("ca = \"{}\"", cas_.ca_file)),
                  "--state-dir", State("mgs1"), "dashboard", "--no-slurm", "--agent",
                  "10.200.0.11:9400"});
  EXPECT_EQ(dashboard.exit_code, 2) << dashboard.out;
  EXPECT_NE(dashboard.err.find("clear text"), std::string::npos) << dashboard.err;
  // An agent told to listen on the bridge with no certificate to serve does not start.
  const std::string config = Config(
      "bare", fmt::format("listen = \"10.200.0.11:9401\"\ntls_cert = \"{0}/none.crt\"\n"
                          "tls_key = \"{0}/none.key\"",
                          dir_));
  const CommandOutput bare = In("oss01", AgentArgs("bare", config));
  EXPECT_EQ(bare.exit_code, 1) << bare.out;
  EXPECT_NE(bare.err.find("serves TLS only off loopback"), std::string::npos) << bare.err;
  EXPECT_NE(bare.err.find("set [agent] tls_cert and tls_key"), std::string::npos) << bare.err;
}

}  // namespace
}  // namespace bmas::testbed
