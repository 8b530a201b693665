// `bmas up` with its store on PostgreSQL: a real server that the test starts (pg_server.h),
// BMAS_STORE_URL naming it, one engine on the instant profile and the gateway (no Slurm, no
// LXD). A user and a key made with the CLI reach the gateway through PostgreSQL, and a chat
// request through it is metered into PostgreSQL, not into a SQLite file.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "engine_process.h"
#include "http_client.h"
#include "pg_server.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The port of the gateway in `bmas up`'s summary ("  gateway   http://127.0.0.1:PORT").
uint16_t GatewayPort(const std::string& summary) {
  static const std::regex kLine(R"(\n  gateway +(http://127\.0\.0\.1:[0-9]+))");
  std::smatch m;
  return std::regex_search(summary, m, kLine) ? PortOfUrl(m[1].str()) : 0;
}

TEST(PgUpTest, UpRunsOnPostgresAndTheGatewayMetersIntoIt) {
  // The cluster's store in PostgreSQL is root's, as its file would be: `bmas user` needs root.
  if (geteuid() != 0) GTEST_SKIP() << "needs root (bmas user add on the cluster's store)";
  auto server = PgServer::Start();
  ASSERT_TRUE(server) << server.error().message;
  PgServer& pg = **server;
  ASSERT_TRUE(pg.CreateDatabase("bmas"));
  const std::string url = pg.Url("bmas");

  TempDir dir;
  // As root, up runs the gateway as its service account, which must reach the binary.
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  const std::string binary = dir.path() + "/bmas", state = dir.path() + "/state";
  std::filesystem::copy_file(std::getenv("BMAS_BINARY"), binary);
  const std::string built = std::getenv("BMAS_BINARY");
  setenv("BMAS_BINARY", binary.c_str(), 1);
  const std::string config = dir.WriteFile(
      "bmas.toml", "[engine]\nprofile = \"instant\"\n[up]\nslurm = false\nlxd = false\n");
  chmod(config.c_str(), 0644);
  const EnvList env = {{"BMAS_STATE_DIR", state}, {"BMAS_STORE_URL", url}};
  auto up = Process::Start({"--config", config, "up", "--engines", "1"}, env);
  setenv("BMAS_BINARY", built.c_str(), 1);
  ASSERT_TRUE(up) << up.error().message;
  Process& p = **up;
  auto running = p.WaitForLine("bmas up: running", 60s);
  ASSERT_TRUE(running) << running.error().message << p.StderrText();
  const uint16_t gateway = GatewayPort(p.stdout_text());
  ASSERT_NE(gateway, 0) << p.stdout_text();

  // The CLI writes the user and the key into PostgreSQL; the running gateway reads them there.
  auto added = RunBmas({"user", "add", "alice"}, env);
  ASSERT_TRUE(added && added->status.Success()) << (added ? added->err : added.error().message);
  auto key = RunBmas({"key", "create", "alice"}, env);
  ASSERT_TRUE(key && key->status.Success()) << (key ? key->err : key.error().message);
  const std::string bearer = key->out.substr(0, key->out.find('\n'));
  auto users = pg.Psql("bmas", "SELECT name FROM users");
  ASSERT_TRUE(users);
  EXPECT_EQ(users->out, "alice\n");

  HttpClient client(gateway);
  client.SetDefaultHeader("Authorization", "Bearer " + bearer);
  std::string last;
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = client.Post("/v1/chat/completions",
                             R"({"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":5,)"
                             R"("messages":[{"role":"user","content":"hello there"}]})");
        last = r ? fmt::format("{} {}", r->status, r->body) : r.error().message;
        return r && r->status == 200;
      },
      20s))
      << last;

  // Metered into PostgreSQL: the gateway flushes its usage there.
  std::string metered;
  EXPECT_TRUE(Eventually(
      [&] {
        auto r = pg.Psql("bmas",
                         "SELECT user_name, SUM(requests), SUM(completion_tokens) FROM usage "
                         "GROUP BY user_name");
        metered = r ? r->out + r->err : r.error().message;
        return std::regex_match(metered, std::regex("alice\\|1\\|[1-9][0-9]*\n"));
      },
      30s))
      << metered;
  // And `bmas usage` reads it back from there.
  auto usage = RunBmas({"usage", "--json"}, env);
  ASSERT_TRUE(usage && usage->status.Success()) << (usage ? usage->err : usage.error().message);
  EXPECT_THAT(usage->out, HasSubstr("\"alice\""));
  // No SQLite store was made beside it.
  EXPECT_FALSE(std::filesystem::exists(state + "/store/bmas.db"));
  // The gateway's log names the store without a password (the URL has none here, but the
  // server's socket is named).
  EXPECT_THAT(p.StderrText() + p.stdout_text(), Not(HasSubstr("store/bmas.db")));

  p.Signal(SIGINT);
  auto status = p.Wait(30s);
  ASSERT_TRUE(status.has_value()) << "bmas up still running 30 s after SIGINT";
  EXPECT_TRUE(status->Success()) << status->ToString() << "\n" << p.StderrText();
}

// The CLI on a store URL whose server is down: the error names the server and the fix, and
// never the password.
TEST(PgUpTest, TheCliNamesAServerItCannotReachAndNeverThePassword) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (bmas user list on the cluster's store)";
  TempDir dir;
  const EnvList env = {
      {"BMAS_STATE_DIR", dir.path() + "/state"},
      {"BMAS_STORE_URL", "postgresql://bmas:s3cr3t-pw@/bmas?host=" + dir.path() + "&port=1"}};
  auto r = RunBmas({"user", "list"}, env);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->status.Success());
  EXPECT_THAT(r->err, HasSubstr("cannot reach PostgreSQL at " + dir.path() + ":1/bmas"));
  EXPECT_THAT(r->err, HasSubstr("start it, or fix [store] url or BMAS_STORE_URL"));
  EXPECT_THAT(r->out + r->err, Not(HasSubstr("s3cr3t")));
}

}  // namespace
}  // namespace bmas::testing
