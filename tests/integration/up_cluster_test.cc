// `bmas up` on a real cluster's controller, where slurmctld and slurmrestd are the system's
// services (bmas cluster init, the Debian package's units) and not up's own: with `[up] slurm =
// false` and the config's [cluster.slurm] slurmrestd, up starts no Slurm, drives that one (the
// inference controller's replicas are its jobs, the Slurm monitor watches it) and leaves it
// running when it stops. The cluster's Slurm here is one `bmas slurm up` started in another
// state dir; the parts find it as they would on mgs1, through the config and SLURM_CONF (the
// system's /etc/slurm/slurm.conf there). Needs root and Slurm (scripts/install-deps.sh).

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "common/process.h"
#include "engine_process.h"
#include "http_client.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(UpClusterTest, WithSlurmOffUpDrivesTheClustersOwnSlurmAndLeavesItRunning) {
  if (geteuid() != 0 || access("/usr/sbin/slurmctld", X_OK) != 0) {
    GTEST_SKIP() << "needs root and Slurm (bash scripts/install-deps.sh)";
  }
  TempDir dir;
  fs::permissions(dir.path(), fs::perms::all | fs::perms::sticky_bit);
  const std::string cluster_state = dir.path() + "/cluster";
  const std::string state = dir.path() + "/up";
  struct CleanUp {
    std::string state;
    ~CleanUp() { RunBmas({"--state-dir", state, "slurm", "down"}, {}, 120s); }
  } clean_up{cluster_state};

  // The cluster's Slurm, up before bmas up and not by it.
  auto slurm = RunBmas({"--state-dir", cluster_state, "slurm", "up"}, {}, 180s);
  ASSERT_TRUE(slurm) << slurm.error().message;
  ASSERT_TRUE(slurm->status.Success()) << slurm->out << slurm->err;
  std::smatch m;
  const std::string said = slurm->out + slurm->err;
  ASSERT_TRUE(std::regex_search(said, m, std::regex(R"(slurmrestd +http://127\.0\.0\.1:([0-9]+))")))
      << said;
  const std::string rest_port = m[1];
  const std::string slurm_conf = cluster_state + "/slurm/etc/slurm.conf";

  // The controller's bmas.toml: the inventory the cluster runs, naming its slurmrestd.
  std::string inventory = ReadAll(std::string(BMAS_SOURCE_DIR) + "/examples/cluster-local.toml");
  const std::string jwt_line = "jwt_key = \"/var/lib/bmas/slurm/etc/jwt_hs256.key\"";
  const size_t at = inventory.find(jwt_line);
  ASSERT_NE(at, std::string::npos) << "examples/cluster-local.toml changed its jwt_key line";
  inventory.replace(at, jwt_line.size(),
                    fmt::format("jwt_key = \"{}/slurm/etc/jwt_hs256.key\"\nslurmrestd = "
                                "\"127.0.0.1:{}\"",
                                cluster_state, rest_port));
  const std::string config = dir.WriteFile(
      "bmas.toml", "[up]\nslurm = false\nlxd = false\ndashboard = false\nengines = 1\n"
                   "[engine]\nprofile = \"instant\"\n" + inventory);

  auto up = Process::Start({"--config", config, "--state-dir", state, "up"},
                           {{"SLURM_CONF", slurm_conf}});
  ASSERT_TRUE(up) << up.error().message;
  auto running = (*up)->WaitForLine("bmas up: running", 180s);
  ASSERT_TRUE(running) << running.error().message << (*up)->StderrText();
  const std::string summary = (*up)->stdout_text();
  EXPECT_THAT(summary, ::testing::ContainsRegex("\n  slurm +127\\.0\\.0\\.1:" + rest_port + " "));
  EXPECT_THAT(summary, HasSubstr("the cluster's Slurm ([cluster.slurm] slurmrestd of " + config +
                                 "); up neither starts nor stops it"))
      << summary;
  EXPECT_THAT(summary, HasSubstr("controller (Slurm jobs)")) << summary;
  EXPECT_THAT(summary, ::testing::ContainsRegex("\n  slurm-mon +http://")) << summary;
  ASSERT_TRUE(std::regex_search(summary, m, std::regex(R"(\n  gateway +http://127\.0\.0\.1:([0-9]+))")))
      << summary;
  const auto gateway_port = static_cast<uint16_t>(std::stoi(m[1]));
  EXPECT_FALSE(fs::exists(state + "/slurm/local.json")) << "up started a Slurm of its own";

  // A request is served by a replica that runs as a job of the cluster's Slurm.
  auto user = RunBmasIn(dir.path(), state, {"--config", config, "user", "add", "ada"}, "");
  ASSERT_TRUE(user && user->exit_code == 0) << (user ? user->err : user.error().message);
  auto key = RunBmasIn(dir.path(), state, {"--config", config, "key", "create", "ada"}, "");
  ASSERT_TRUE(key) << key.error().message;
  ASSERT_TRUE(std::regex_search(key->out, m, std::regex("sk-bmas-[A-Za-z0-9_-]+"))) << key->out;
  const std::string bearer = "Bearer " + m[0].str();
  HttpClient client(gateway_port, 60s);
  client.SetDefaultHeader("Authorization", bearer);
  int status = 0;
  Eventually(
      [&] {
        auto r = client.Post("/v1/completions",
                             R"({"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"hi","max_tokens":4})");
        status = r ? r->status : 0;
        return status == 200;
      },
      120s);
  EXPECT_EQ(status, 200);
  auto squeue = RunCommand({"squeue", "-h", "-o", "%i %u %T %j"}, {"SLURM_CONF=" + slurm_conf}, 10s);
  ASSERT_TRUE(squeue) << squeue.error().message;
  EXPECT_THAT(squeue->out, HasSubstr("RUNNING")) << squeue->out;

  // Stopped: its replicas go, the cluster's Slurm stays.
  (*up)->Signal(SIGINT);
  auto stopped = (*up)->Wait(120s);
  ASSERT_TRUE(stopped.has_value()) << "bmas up still running 120 s after SIGINT";
  EXPECT_TRUE(stopped->Success()) << stopped->ToString() << (*up)->StderrText();
  auto status_after = RunBmas({"--state-dir", cluster_state, "slurm", "status"}, {}, 30s);
  ASSERT_TRUE(status_after) << status_after.error().message;
  EXPECT_TRUE(status_after->status.Success()) << status_after->out << status_after->err;
  EXPECT_TRUE(fs::exists(cluster_state + "/slurm/local.json"));
}

}  // namespace
}  // namespace bmas::testing
