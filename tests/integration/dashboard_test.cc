// The web dashboard as `bmas up` starts it, against a real local Slurm: its URL in up's
// summary, sign-in, the /api/ twins with a student's key and an admin's, a running job's GPUs
// on the map and a pending job's reason in words; then the same in headless Chromium
// (dashboard/dashboard_browser_test.mjs through puppeteer-core), which keeps a screenshot of
// each page in the build tree (tests/integration/dashboard/shots). Needs root, Slurm, node,
// npm and chromium (scripts/install-deps.sh installs them all).

#include <pwd.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include "common/process.h"
#include "engine_process.h"
#include "http_client.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || access("/usr/sbin/slurmctld", X_OK) != 0) {
      GTEST_SKIP() << "needs root and Slurm (bash scripts/install-deps.sh)";
    }
    fs::permissions(dir_.path(), fs::perms::all | fs::perms::sticky_bit);
    state_ = dir_.path() + "/state";
    const std::string config = dir_.WriteFile("bmas.toml", "[up]\nlxd = false\nengines = 1\ninference = \"processes\"\n");
    auto up = Process::Start({"--config", config, "--state-dir", state_, "up"});
    ASSERT_TRUE(up) << up.error().message;
    up_ = std::move(*up);
    auto running = up_->WaitForLine("bmas up: running", std::chrono::seconds(120));
    ASSERT_TRUE(running) << running.error().message << up_->StderrText();
    const std::string& summary = up_->stdout_text();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(summary, m, std::regex(R"(\n  dashboard +(http://[0-9.:]+) )")))
        << summary;
    url_ = m[1];
    ASSERT_TRUE(std::regex_search(summary, m, std::regex(R"(\n  gateway +(http://[0-9.:]+) )")))
        << summary;
    gateway_ = m[1];
  }

  void TearDown() override {
    if (up_) up_->Stop(std::chrono::seconds(30));
    if (!state_.empty()) RunBmas({"--state-dir", state_, "slurm", "down"});
  }

  // `bmas --state-dir STATE ARGS...` in the test's directory, as `user` ("" = root).
  CommandOutput Bmas(const std::vector<std::string>& args, const std::string& user = "") {
    auto r = RunBmasIn(dir_.path(), state_, args, user);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  std::string Key(const std::string& user) {
    CommandOutput out = Bmas({"key", "create", user});
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out.out, m, std::regex("sk-bmas-[A-Za-z0-9_-]+"))) << out.out << out.err;
    return m.empty() ? "" : m[0].str();
  }

  static std::string Trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  TempDir dir_;
  std::string state_;
  std::unique_ptr<Process> up_;
  std::string url_;
  std::string gateway_;
};

TEST_F(DashboardTest, AStudentSeesTheirJobsOnTheMapAndInTheQueueButNotOthersDetails) {
  const std::string student = EnsureUnixUser("bmastest1");
  ASSERT_EQ(Bmas({"user", "add", student}).exit_code, 0);
  ASSERT_EQ(Bmas({"user", "add", "root", "--admin"}).exit_code, 0);
  EXPECT_THAT(Bmas({"user", "list", "--json"}).out, HasSubstr(R"("name":"root")"));
  const std::string key = Key(student);
  const std::string admin_key = Key("root");
  ASSERT_FALSE(key.empty());

  const std::string running = Trim(Bmas({"run", "--gpus", "2", "--", "sleep", "300"}, student).out);
  const std::string pending = Trim(Bmas({"run", "--gpus", "12", "--", "true"}, student).out);
  ASSERT_FALSE(running.empty());
  ASSERT_FALSE(pending.empty());

  HttpClient http(PortOfUrl(url_));
  // No key, no session: 401 that says how to sign in; a page sends the browser to /login.
  auto anonymous = http.Get("/api/cluster");
  ASSERT_TRUE(anonymous) << anonymous.error().message;
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_THAT(anonymous->body, HasSubstr("Authorization: Bearer"));
  auto page = http.Get("/queue");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 303);
  EXPECT_EQ(page->Header("Location"), "/login?next=/queue");
  EXPECT_THAT(page->Header("Content-Security-Policy").value_or(""), HasSubstr("default-src 'self'"));

  http.SetDefaultHeader("Authorization", "Bearer " + key);
  rapidjson::Document cluster;
  auto held_by_running = [&] {
    int n = 0;
    for (const auto& node : At(cluster, "nodes").GetArray()) {
      for (const auto& gpu : At(node, "gpus").GetArray()) {
        if (std::to_string(Int(At(gpu, "job_id"))) == running) {
          EXPECT_EQ(Str(At(gpu, "state")), "training");
          EXPECT_EQ(Str(At(gpu, "user")), student);
          ++n;
        }
      }
    }
    return n;
  };
  EXPECT_TRUE(Eventually(
      [&] {
        auto r = http.Get("/api/cluster");
        if (!r || r->status != 200) return false;
        cluster = ParseJson(r->body);
        return held_by_running() == 2;
      },
      std::chrono::seconds(30)));
  EXPECT_EQ(Int(At(At(cluster, "totals"), "gpus")), 12);

  rapidjson::Document queue;
  EXPECT_TRUE(Eventually(
      [&] {
        auto r = http.Get("/api/queue");
        if (!r || r->status != 200) return false;
        queue = ParseJson(r->body);
        return At(queue, "pending").IsArray() && At(queue, "pending").Size() == 1 &&
               Str(At(At(At(queue, "pending"), 0), "reason")) == "Resources";
      },
      std::chrono::seconds(30)))
      << ::testing::PrintToString(http.Get("/api/queue")->body);
  const auto& waiting = At(At(queue, "pending"), 0);
  EXPECT_EQ(std::to_string(Int(At(waiting, "id"))), pending);
  EXPECT_THAT(Str(At(waiting, "reason_text")), StartsWith("waiting for 12 GPUs on whole nodes; "));

  // Another user's details: refused to a student, shown to an admin.
  auto refused = http.Get("/api/users/root");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403);
  EXPECT_THAT(refused->body, HasSubstr("only an admin"));
  HttpClient admin(PortOfUrl(url_));
  admin.SetDefaultHeader("Authorization", "Bearer " + admin_key);
  auto details = admin.Get("/api/users/" + student);
  ASSERT_TRUE(details);
  EXPECT_EQ(details->status, 200) << details->body;
  EXPECT_EQ(At(ParseJson(details->body), "jobs").Size(), 2u);
  auto bad = admin.Request(http::verb::get, "/api/cluster", "",
                           RequestOptions{"application/json", false, {{"Authorization", "Bearer sk-bmas-0-x"}}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 401);

  // Requests through the gateway show on the inference page as the student's tokens (streamed,
  // so that they have a time to first token).
  HttpClient gateway(PortOfUrl(gateway_));
  gateway.SetDefaultHeader("Authorization", "Bearer " + key);
  for (int i = 0; i < 5; ++i) {
    auto r = gateway.Post("/v1/completions",
                          R"({"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"Hello from the )"
                          R"(lab","max_tokens":16,"stream":true})");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, 200) << r->body;
  }
  EXPECT_TRUE(Eventually(
      [&] {
        auto r = http.Get("/api/inference");
        return r && r->status == 200 && Int(At(ParseJson(r->body), "tokens_last_hour")) > 0;
      },
      std::chrono::seconds(30)));

  // The same in a browser: sign-in, map, reason, refusal, live refresh; screenshots kept.
  const std::string shots = std::string(BMAS_DASHBOARD_WORK_DIR) + "/shots";
  auto browser = RunCommand({"bash", std::string(BMAS_DASHBOARD_TEST_DIR) + "/run.sh",
                             BMAS_DASHBOARD_WORK_DIR, url_, key, admin_key, running, "2", pending,
                             "root", shots},
                            {}, std::chrono::seconds(240));
  ASSERT_TRUE(browser) << browser.error().message;
  EXPECT_EQ(browser->exit_code, 0) << browser->out << browser->err;
  std::cout << browser->out;
  for (const char* name : {"login", "cluster", "queue", "inference", "users", "mode", "refused"}) {
    EXPECT_TRUE(fs::exists(shots + "/" + name + ".png")) << name;
  }
  EXPECT_EQ(Bmas({"cancel", running}, student).exit_code, 0);
  EXPECT_EQ(Bmas({"cancel", pending}, student).exit_code, 0);
}

}  // namespace
}  // namespace bmas::testing
