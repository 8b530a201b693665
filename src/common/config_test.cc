#include "common/config.h"

#include <unistd.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/config_table.h"

namespace bmas {
namespace {

class ConfigFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    std::string path = (std::filesystem::temp_directory_path() /
                        ("bmas_config_test_" + std::to_string(::getpid()) + ".toml"))
                           .string();
    std::ofstream(path) << text;
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const auto& p : paths_) std::filesystem::remove(p);
  }
  std::vector<std::string> paths_;
};

TEST_F(ConfigFileTest, EmptyPathGivesDefaults) {
  Config c = LoadConfig("");
  EXPECT_EQ(c.engine.profile, "llama-3.1-8b-h100");
  EXPECT_EQ(c.engine.port, 0);
  EXPECT_EQ(c.up.engines, 2);
  EXPECT_TRUE(c.engine.prefix_caching);
}

// The documented example lists every key with its default: it must load and equal defaults.
TEST_F(ConfigFileTest, DocumentedExampleLoadsAndMatchesDefaults) {
  Config c = LoadConfig(std::string(BMAS_SOURCE_DIR) + "/examples/bmas.toml");
  Config d = LoadConfig("");
  EXPECT_EQ(c.engine.model, d.engine.model);
  EXPECT_EQ(c.engine.profile, d.engine.profile);
  EXPECT_EQ(c.engine.max_body_bytes, d.engine.max_body_bytes);
  EXPECT_EQ(c.engine.shutdown_timeout_s, d.engine.shutdown_timeout_s);
  EXPECT_EQ(c.engine.default_chat_max_tokens, d.engine.default_chat_max_tokens);
  EXPECT_EQ(c.engine.scheduling_policy, d.engine.scheduling_policy);
  EXPECT_EQ(c.up.engines, d.up.engines);
  EXPECT_EQ(c.up.engine_base_port, d.up.engine_base_port);
  EXPECT_EQ(c.up.gateway, d.up.gateway);
  EXPECT_EQ(c.gateway.routing, d.gateway.routing);
  EXPECT_EQ(c.gateway.fairness, d.gateway.fairness);
  EXPECT_EQ(c.gateway.backends, d.gateway.backends);
  EXPECT_EQ(c.gateway.reserve_fraction, d.gateway.reserve_fraction);
  EXPECT_EQ(c.gateway.default_capacity, d.gateway.default_capacity);
  EXPECT_EQ(c.gateway.threads, d.gateway.threads);
  EXPECT_EQ(c.up.slurm, d.up.slurm);
  EXPECT_EQ(c.up.inference, d.up.inference);
  EXPECT_EQ(c.up.replica_port_base, d.up.replica_port_base);
  EXPECT_EQ(c.up.replica_scale_down_idle_s, d.up.replica_scale_down_idle_s);
  EXPECT_EQ(c.up.replica_load_window_s, d.up.replica_load_window_s);
  EXPECT_EQ(c.up.replica_breach_settle_s, d.up.replica_breach_settle_s);
  EXPECT_EQ(c.up.timetable_lead_s, d.up.timetable_lead_s);
  EXPECT_EQ(c.up.timezone, d.up.timezone);
  EXPECT_EQ(c.gateway.queue_timeout_s, d.gateway.queue_timeout_s);
  EXPECT_EQ(c.gateway.max_body_bytes, d.gateway.max_body_bytes);
  EXPECT_EQ(c.lxd.listen, d.lxd.listen);
  EXPECT_EQ(c.lxd.peers.size(), d.lxd.peers.size());
  EXPECT_EQ(c.lxd.cert, d.lxd.cert);
  EXPECT_EQ(c.lxd.key, d.lxd.key);
  EXPECT_EQ(c.gpu.driver_root, d.gpu.driver_root);
  EXPECT_EQ(c.dashboard.agents, d.dashboard.agents);
  EXPECT_EQ(c.agent.listen, d.agent.listen);
  EXPECT_EQ(c.agent.tls_cert, d.agent.tls_cert);
  EXPECT_EQ(c.agent.tls_key, d.agent.tls_key);
  EXPECT_EQ(c.agent.ca, d.agent.ca);
  EXPECT_EQ(d.gpu.driver_root, "/");
  EXPECT_EQ(LoadConfig(Write("[gpu]\ndriver_root = \"\"\n")).gpu.driver_root, "");
}

TEST_F(ConfigFileTest, ValuesAreRead) {
  std::string path = Write("[engine]\nprofile = \"instant\"\nport = 8100\n"
                           "scheduling_policy = \"priority\"\n[up]\nengines = 3\n");
  Config c = LoadConfig(path);
  EXPECT_EQ(c.engine.profile, "instant");
  EXPECT_EQ(c.engine.port, 8100);
  EXPECT_EQ(c.engine.scheduling_policy, "priority");
  EXPECT_EQ(c.up.engines, 3);
}

struct BadConfigCase {
  const char* text;
  const char* expected;  // substring of the error
};

class BadConfigTest : public ConfigFileTest,
                      public ::testing::WithParamInterface<BadConfigCase> {};

TEST_P(BadConfigTest, ErrorNamesFileLineAndKey) {
  std::string path = Write(GetParam().text);
  try {
    LoadConfig(path);
    FAIL() << "no error for: " << GetParam().text;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(GetParam().expected), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadConfigTest,
    ::testing::Values(BadConfigCase{"[engine]\nfoo = 1\n", ":2: unknown key 'engine.foo'"},
                      BadConfigCase{"bogus = true\n", ":1: unknown key 'bogus'"},
                      BadConfigCase{"[engine]\n\nport = \"x\"\n", ":3: engine.port: expected an integer"},
                      BadConfigCase{"[engine]\nport = 70000\n", ":2: engine.port: 70000 is out of range"},
                      BadConfigCase{"[engine]\nscheduling_policy = \"lifo\"\n",
                                    ":2: engine.scheduling_policy: \"lifo\" is not one of"},
                      BadConfigCase{"[up]\nengines = -1\n", ":2: up.engines"},
                      BadConfigCase{"[gateway]\nrouting = \"random\"\n", ":2: gateway.routing"},
                      BadConfigCase{"[gateway]\nbackends = [1]\n", ":2: gateway.backends"},
                      BadConfigCase{"[lxd]\npeers = [\"https://node02:8443\"]\n",
                                    "each peer is { url = \"https://HOST:8443\", fingerprint"},
                      BadConfigCase{"[lxd]\npeers = [{ url = \"node02:8443\", fingerprint = "
                                    "\"ab\" }]\n",
                                    "lxd.peers[0].url: \"node02:8443\" is not another node's LXD"},
                      BadConfigCase{"[lxd]\npeers = [{ url = \"https://node02:8443\", "
                                    "fingerprint = \"ab\" }]\n",
                                    "lxd.peers[0].fingerprint: \"ab\" is not a SHA-256"},
                      BadConfigCase{"[lxd]\nlisten = \"10.0.0.1\"\n", "needs a port"},
                      BadConfigCase{"[lxd]\ncert = \"/etc/bmas/lxd-peer.crt\"\n",
                                    "lxd.cert and lxd.key go together"},
                      BadConfigCase{"[store]\nurl = \"/var/lib/bmas/x.db\"\n",
                                    ":2: store.url: give a PostgreSQL URL"},
                      BadConfigCase{"[store]\nurl = \"postgresql://bmas:pw@db1/bmas\"\n",
                                    ":2: store.url: holds a password, and every user reads"},
                      BadConfigCase{"[store]\nurl = \"postgresql://db1/bmas?password=pw\"\n",
                                    "holds a password"},
                      BadConfigCase{"[gpu]\ndriver_root = \"usr\"\n",
                                    "gpu.driver_root = \"usr\" must be an absolute path"},
                      BadConfigCase{"[agent]\nlisten = \"10.0.0.11\"\n",
                                    ":2: agent.listen: needs a port"},
                      BadConfigCase{"[agent]\ntls_cert = \"/etc/bmas/node.crt\"\n",
                                    "agent.tls_key: give tls_cert and tls_key together"},
                      BadConfigCase{"[engine\n", ":1:"}));

TEST_F(ConfigFileTest, TheStoreIsSqliteUnlessAPostgresUrlIsGiven) {
  EXPECT_EQ(LoadConfig("").store.url, "");
  Config c = LoadConfig(Write("[store]\nurl = \"postgresql://bmas@db1:5432/bmas\"\n"));
  EXPECT_EQ(c.store.url, "postgresql://bmas@db1:5432/bmas");
  c = LoadConfig(Write("[store]\nurl = \"postgresql:///bmas?host=/run/postgresql&passfile=/x\"\n"));
  EXPECT_EQ(c.store.url, "postgresql:///bmas?host=/run/postgresql&passfile=/x");
}

TEST_F(ConfigFileTest, TheAgentsListenerAndItsClientsAreRead) {
  const Config d = LoadConfig("");
  EXPECT_EQ(d.agent.listen, "127.0.0.1:0");
  EXPECT_EQ(d.agent.tls_cert, "");
  EXPECT_EQ(d.agent.ca, "/etc/bmas/ca.crt");
  const Config c = LoadConfig(Write(
      "[agent]\nlisten = \"10.0.0.11:9400\"\ntls_cert = \"/a.crt\"\ntls_key = \"/a.key\"\n"
      "ca = \"/ca.crt\"\n[dashboard]\nagents = [\"https://oss01:9400\", \"127.0.0.1:9400\"]\n"));
  EXPECT_EQ(c.agent.listen, "10.0.0.11:9400");
  EXPECT_EQ(c.agent.tls_cert, "/a.crt");
  EXPECT_EQ(c.agent.tls_key, "/a.key");
  EXPECT_EQ(c.agent.ca, "/ca.crt");
  EXPECT_EQ(c.dashboard.agents,
            (std::vector<std::string>{"https://oss01:9400", "127.0.0.1:9400"}));
}

TEST_F(ConfigFileTest, PeersCarryTheirCertificatesFingerprint) {
  const std::string hex(64, 'a');
  std::string colons;
  for (size_t i = 0; i < hex.size(); i += 2) colons += (i ? ":" : "") + std::string("AA");
  Config c = LoadConfig(Write(fmt::format(
      "[lxd]\npeers = [{{ url = \"https://n2:8443\", fingerprint = \"{}\" }},\n"
      "  {{ url = \"https://n3:8443\", fingerprint = \"{}\" }}]\n",
      hex, colons)));
  ASSERT_EQ(c.lxd.peers.size(), 2u);
  EXPECT_EQ(c.lxd.peers[0].url, "https://n2:8443");
  EXPECT_EQ(c.lxd.peers[0].fingerprint, hex);
  EXPECT_EQ(c.lxd.peers[1].fingerprint, hex);
}

TEST(StateDirTest, FlagThenEnvironmentThenConfig) {
  Config c;
  c.state_dir = "/from/config";
  ::setenv("BMAS_STATE_DIR", "/from/env", 1);
  EXPECT_EQ(ResolveStateDir("/from/flag", c), "/from/flag");
  EXPECT_EQ(ResolveStateDir("", c), "/from/env");
  ::unsetenv("BMAS_STATE_DIR");
  EXPECT_EQ(ResolveStateDir("", c), "/from/config");
  c.state_dir.clear();
  // Every user's default is the cluster's state dir: never a private one by accident.
  EXPECT_EQ(ResolveStateDir("", c), "/var/lib/bmas");
}

TEST(StateDirTest, TheConfigIsBmasConfigElseTheSystemOne) {
  ::setenv("BMAS_CONFIG", "/from/env.toml", 1);
  EXPECT_EQ(DefaultConfigPath(), "/from/env.toml");
  ::setenv("BMAS_CONFIG", "", 1);  // set but empty: none (what the integration tests use)
  EXPECT_EQ(DefaultConfigPath(), "");
  ::unsetenv("BMAS_CONFIG");
  EXPECT_EQ(DefaultConfigPath(), access(kSystemConfigPath, F_OK) == 0 ? kSystemConfigPath : "");
}

}  // namespace
}  // namespace bmas
