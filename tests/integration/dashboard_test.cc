// The web dashboard as `bmas up` starts it, against a real local Slurm: its URL in up's
// summary, sign-in, the /api/ twins with a student's key and an admin's, a running job's GPUs
// on the map and a pending job's reason in words; then the same in headless Chromium
// (dashboard/dashboard_browser_test.mjs through puppeteer-core), which keeps a screenshot of
// each page in the build tree (tests/integration/dashboard/shots). Needs root, Slurm, node,
// npm and chromium (scripts/install-deps.sh installs them all).

#include <pwd.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
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
    // A log an older bmas left readable by everyone: up closes it (issue 23.4).
    fs::create_directories(state_ + "/logs");
    const std::string old_log = state_ + "/logs/gateway.log";
    std::ofstream(old_log) << "an older bmas's log\n";
    fs::permissions(old_log, fs::perms(0644));
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
  for (const char* name :
       {"login", "cluster", "node-down", "queue", "inference", "users", "mode", "refused"}) {
    EXPECT_TRUE(fs::exists(shots + "/" + name + ".png")) << name;
  }
  EXPECT_EQ(Bmas({"cancel", running}, student).exit_code, 0);
  EXPECT_EQ(Bmas({"cancel", pending}, student).exit_code, 0);
}

// Issue 23.7: a key revoked with the CLI ends the dashboard sessions signed in with it at their
// next request (it used to last up to 8 hours), and the sign-in page says why; a session of
// the user's other key goes on.
TEST_F(DashboardTest, ARevokedKeyEndsItsSessions) {
  const std::string student = EnsureUnixUser("bmastest1");
  ASSERT_EQ(Bmas({"user", "add", student}).exit_code, 0);
  const std::string key = Key(student), other = Key(student);
  ASSERT_FALSE(key.empty());
  ASSERT_FALSE(other.empty());
  HttpClient http(PortOfUrl(url_));
  auto sign_in = [&](const std::string& k) -> std::string {
    auto r = http.Post("/login", fmt::format(R"({{"key":"{}"}})", k));
    if (!r || r->status != 200) return "";
    const std::string cookie = r->Header("Set-Cookie").value_or("");
    return cookie.substr(0, cookie.find(';'));
  };
  auto as = [&](const std::string& cookie, const std::string& target) {
    auto r = http.Request(http::verb::get, target, "",
                          RequestOptions{"application/json", false, {{"Cookie", cookie}}});
    return r ? *r : HttpResponse{};
  };
  const std::string session = sign_in(key), kept = sign_in(other);
  ASSERT_THAT(session, StartsWith("bmas_session="));
  ASSERT_THAT(kept, StartsWith("bmas_session="));
  // The dashboard learns of a new user at its next refresh of the store (every few seconds).
  EXPECT_TRUE(Eventually([&] { return as(session, "/api/me").status == 200; },
                         std::chrono::seconds(30)));
  EXPECT_EQ(as(session, "/cluster").status, 200);

  // The key's id: "sk-bmas-<id>-<secret>".
  // A third key, signed in on a page: its session ends at its next page, which says why.
  const std::string paged_key = Key(student);
  const std::string paged = sign_in(paged_key);
  ASSERT_THAT(paged, StartsWith("bmas_session="));
  for (const std::string& k : {key, paged_key}) {
    const CommandOutput revoked = Bmas({"key", "revoke", k.substr(8, 12)});
    ASSERT_EQ(revoked.exit_code, 0) << revoked.err;
  }

  const HttpResponse api = as(session, "/api/me");
  EXPECT_EQ(api.status, 401) << api.body;
  EXPECT_THAT(api.body, HasSubstr("was revoked"));
  EXPECT_EQ(Str(At(At(ParseJson(api.body), "error"), "param")), "revoked");
  // A page sends the browser to sign in, and the sign-in page says why.
  const HttpResponse page = as(paged, "/queue");
  EXPECT_EQ(page.status, 303);
  EXPECT_EQ(page.Header("Location"), "/login?next=/queue&ended=revoked");
  auto script = http.Get("/assets/login.js");
  ASSERT_TRUE(script);
  EXPECT_THAT(script->body, HasSubstr("\"ended\") === \"revoked\""));
  EXPECT_THAT(script->body, HasSubstr("the API key you signed in with was revoked"));
  // Both sessions are gone.
  EXPECT_EQ(as(session, "/api/me").status, 401);
  EXPECT_EQ(as(paged, "/api/me").status, 401);
  // Signing in again with it fails; the other key's session is untouched.
  EXPECT_EQ(sign_in(key), "");
  EXPECT_EQ(as(kept, "/api/me").status, 200);
}

// Issue 23.4: operator data is closed to students. As a student: the gateway's operator
// /metrics and /load and the Slurm monitor's /metrics answer 401 and nothing without the
// operator secret or with a wrong one; the logs, run/up.txt, the up record, the Prometheus
// config and the secret itself cannot be read, and a log an older bmas left 0644 was closed.
// As the operator: the secret answers, the dashboard (which reads /load with it) sees the
// gateway, and the Prometheus config carries the secret's file.
TEST_F(DashboardTest, OperatorDataIsClosedToStudents) {
  const std::string student = EnsureUnixUser("bmastest1");
  const std::string& summary = up_->stdout_text();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(summary, m,
                                std::regex(R"(operator metrics: http://127\.0\.0\.1:([0-9]+))")))
      << summary;
  const uint16_t gateway_op = static_cast<uint16_t>(std::stoi(m[1].str()));
  ASSERT_TRUE(std::regex_search(summary, m, std::regex(R"(\n  slurm-mon +http://127\.0\.0\.1:([0-9]+))")))
      << summary;
  const uint16_t monitor = static_cast<uint16_t>(std::stoi(m[1].str()));
  const std::string secret = OperatorSecretOf(state_);
  ASSERT_EQ(secret.size(), 64u);

  for (const auto& [port, target] : std::vector<std::pair<uint16_t, std::string>>{
           {gateway_op, "/metrics"}, {gateway_op, "/load"}, {monitor, "/metrics"}}) {
    for (const std::string bearer :
         {std::string(), std::string("Bearer wrong"), "Bearer " + std::string(64, 'f')}) {
      SCOPED_TRACE(fmt::format("{}{} with '{}'", port, target, bearer));
      const HttpResponse r = GetAsUser(student, port, target, bearer);
      EXPECT_EQ(r.status, 401) << r.body;
      EXPECT_THAT(r.body, HasSubstr("operator secret"));
      EXPECT_THAT(r.body, ::testing::Not(HasSubstr("bmas_")));
    }
    HttpClient op(port);
    op.SetDefaultHeader("Authorization", "Bearer " + secret);
    auto r = op.Get(target);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << port << target;
  }

  for (const std::string file : {"/run/up.txt", "/run/up.json", "/run/operator.secret",
                                 "/run/prometheus.yml", "/logs/gateway.log",
                                 "/logs/dashboard.log", "/logs/slurm-monitor.log",
                                 "/slurm/log/slurmctld.log"}) {
    SCOPED_TRACE(file);
    ASSERT_TRUE(fs::exists(state_ + file));
    EXPECT_FALSE(UserCanRead(student, state_ + file));
    // slurmctld makes its own log with its own mode; the directory closes it.
    if (file.starts_with("/slurm/")) continue;
    EXPECT_EQ(fs::status(state_ + file).permissions() & fs::perms::others_all, fs::perms::none);
  }
  for (const auto& entry : fs::directory_iterator(state_ + "/logs")) {
    EXPECT_EQ(entry.status().permissions() & fs::perms::others_all, fs::perms::none)
        << entry.path();
  }

  // The dashboard reads the gateway's /load with the secret.
  ASSERT_EQ(Bmas({"user", "add", "root", "--admin"}).exit_code, 0);
  HttpClient http(PortOfUrl(url_));
  http.SetDefaultHeader("Authorization", "Bearer " + Key("root"));
  std::string inference;
  EXPECT_TRUE(Eventually(
      [&] {
        auto r = http.Get("/api/inference");
        inference = r ? r->body : "";
        return r && r->status == 200 &&
               At(At(ParseJson(inference), "gateway"), "reachable").IsTrue();
      },
      std::chrono::seconds(30)))
      << inference;

  // Prometheus's scrape config: every operator listener, with the secret's file.
  std::ifstream in(state_ + "/run/prometheus.yml");
  const std::string prometheus((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
  EXPECT_THAT(prometheus, HasSubstr("credentials_file: " + state_ + "/run/operator.secret"));
  EXPECT_THAT(prometheus, HasSubstr(fmt::format("'127.0.0.1:{}'", gateway_op)));
  EXPECT_THAT(prometheus, HasSubstr(fmt::format("'127.0.0.1:{}'", monitor)));
  EXPECT_THAT(prometheus, ::testing::Not(HasSubstr(secret)));
}

}  // namespace
}  // namespace bmas::testing
