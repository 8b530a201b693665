// Integration tests of `bmas up` and of configuration errors: the real binary, its real
// child engines on loopback ports, stopped by signals as a user would.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <pwd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <cstring>
#include <vector>

#include "common/process.h"
#include "engine_process.h"
#include "http_client.h"
#include "port_squatter.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::string_view kInstantConfig = "[engine]\nprofile = \"instant\"\n";

// The URLs of the components named `prefix...` ("engine-", "gateway") in `bmas up`'s summary.
std::vector<std::string> ComponentUrls(const std::string& text, const std::string& prefix) {
  std::vector<std::string> urls;
  static const std::regex kLine(R"(\n  ([a-z0-9-]+) +(http://127\.0\.0\.1:[0-9]+))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kLine); it != std::sregex_iterator();
       ++it) {
    if ((*it)[1].str().rfind(prefix, 0) == 0) urls.push_back((*it)[2].str());
  }
  return urls;
}

std::vector<std::string> EngineUrls(const std::string& text) {
  return ComponentUrls(text, "engine-");
}

TEST(UpTest, StartsTwoEnginesAndStopsThemOnSigint) {
  TempDir dir;
  const std::string state = dir.path() + "/state";
  // LXD's data under the test's own directory, never the system's.
  const std::string config = dir.WriteFile(
      "bmas.toml", std::string(kInstantConfig) + "[lxd]\ndir = \"" + dir.path() + "/lxd\"\n");
  auto up =
      Process::Start({"--config", config, "up", "--engines", "2"}, {{"BMAS_STATE_DIR", state}});
  ASSERT_TRUE(up) << up.error().message;
  Process& p = **up;
  auto running = p.WaitForLine("bmas up: running", 30s);
  ASSERT_TRUE(running) << running.error().message;
  EXPECT_THAT(p.stdout_text(), HasSubstr("state dir " + state));
  // Slurm runs, or the summary says why not (here: the test's directory is private).
  EXPECT_THAT(p.stdout_text(), ::testing::ContainsRegex("\n  slurm +(http://|not started: )"));
  // So does LXD (its socket, or why not: here the test's directory is private).
  EXPECT_THAT(p.stdout_text(), ::testing::ContainsRegex("\n  lxd +(/|not started: )"));

  std::vector<std::string> urls = EngineUrls(p.stdout_text());
  ASSERT_EQ(urls.size(), 2u) << p.stdout_text();
  ASSERT_NE(urls[0], urls[1]);
  std::vector<uint16_t> ports;
  for (const std::string& url : urls) {
    SCOPED_TRACE(url);
    uint16_t port = PortOfUrl(url);
    ASSERT_NE(port, 0);
    ports.push_back(port);
    HttpClient client(port);
    // The engines require the key `bmas up` made (vLLM's --api-key), which only the gateway has.
    auto models = client.Get("/v1/models");
    ASSERT_TRUE(models) << models.error().message;
    EXPECT_EQ(models->status, 401);
    auto version = client.Get("/version");
    ASSERT_TRUE(version) << version.error().message;
    EXPECT_EQ(version->status, 200);
    // The engines run with the config file's settings.
    EXPECT_THAT(version->body, HasSubstr(R"("profile":"instant")"));
  }

  // The gateway runs in front of the engines; without a key it answers 401.
  std::vector<std::string> gateway = ComponentUrls(p.stdout_text(), "gateway");
  ASSERT_EQ(gateway.size(), 1u) << p.stdout_text();
  const uint16_t gateway_port = PortOfUrl(gateway[0]);
  ports.push_back(gateway_port);
  HttpClient client(gateway_port);
  auto unauthorized = client.Get("/v1/models");
  ASSERT_TRUE(unauthorized) << unauthorized.error().message;
  EXPECT_EQ(unauthorized->status, 401);
  // With a user's key it serves: it sends the engines their key.
  auto added = RunBmas({"user", "add", "alice"}, {{"BMAS_STATE_DIR", state}});
  ASSERT_TRUE(added && added->status.Success());
  auto key = RunBmas({"key", "create", "alice"}, {{"BMAS_STATE_DIR", state}});
  ASSERT_TRUE(key && key->status.Success());
  std::string bearer = key->out.substr(0, key->out.find('\n'));
  client.SetDefaultHeader("Authorization", "Bearer " + bearer);
  EXPECT_TRUE(Eventually([&] {
    auto r = client.Get("/v1/models");
    return r && r->status == 200 && r->body.find("bmas-simulated") != std::string::npos;
  }, 10s));
  // The engines' key is in their environment (only their owner reads it), on no command line
  // (which every user sees in ps).
  auto read_file = [](const std::filesystem::path& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  std::vector<std::string> cmdlines;
  std::set<std::string> keys;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string args = read_file(entry.path() / "cmdline");
    if (args.find(config) == std::string::npos) continue;
    cmdlines.push_back(args);
    std::string env = read_file(entry.path() / "environ");
    for (size_t at = env.find("BMAS_BACKEND_API_KEY="); at != std::string::npos;
         at = env.find("BMAS_BACKEND_API_KEY=", at + 1)) {
      const size_t value = at + std::string_view("BMAS_BACKEND_API_KEY=").size();
      keys.insert(env.substr(value, env.find('\0', value) - value));
    }
  }
  ASSERT_EQ(keys.size(), 1u) << "the gateway and engines have no backend secret, or not the same one";
  EXPECT_GE(keys.begin()->size(), 32u);
  for (const std::string& args : cmdlines) EXPECT_THAT(args, Not(HasSubstr(*keys.begin())));

  p.Signal(SIGINT);
  auto status = p.Wait(20s);
  ASSERT_TRUE(status.has_value()) << "bmas up still running 20 s after SIGINT";
  EXPECT_TRUE(status->Success()) << status->ToString() << "\n" << p.StderrText();
  p.DrainStdout(2s);
  EXPECT_THAT(p.stdout_text(), HasSubstr("bmas up: stopped."));
  // bmas up waits for its children, so their ports are closed by the time it exits.
  for (uint16_t port : ports) EXPECT_TRUE(ConnectionRefused(port)) << "port " << port;
  // Nor does an lxcfs or lxd it started outlive it, whether or not LXD could be prepared.
  std::ifstream lxd_json(state + "/lxd.json");
  std::stringstream recorded;
  recorded << lxd_json.rdbuf();
  if (lxd_json.is_open()) {
    rapidjson::Document d = ParseJson(recorded.str());
    EXPECT_EQ(At(d, "started").Size(), 0u) << recorded.str();
  }
}

// Finding 8 of issue 11: as root, `bmas up` runs the daemons that face the network (engines,
// gateway) as the unprivileged service account, which alone owns the store.
TEST(UpTest, AsRootTheEnginesAndTheGatewayRunAsTheServiceAccount) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (bmas up drops to the service account)";
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);  // the account must reach the binary and state
  const std::string binary = dir.path() + "/bmas", state = dir.path() + "/state";
  std::filesystem::copy_file(std::getenv("BMAS_BINARY"), binary);
  const std::string built = std::getenv("BMAS_BINARY");
  setenv("BMAS_BINARY", binary.c_str(), 1);
  const std::string config = dir.WriteFile(
      "bmas.toml", std::string(kInstantConfig) + "[up]\nslurm = false\nlxd = false\n");
  chmod(config.c_str(), 0644);
  auto up = Process::Start({"--config", config, "up", "--engines", "1"},
                           {{"BMAS_STATE_DIR", state}});
  setenv("BMAS_BINARY", built.c_str(), 1);
  ASSERT_TRUE(up) << up.error().message;
  Process& p = **up;
  auto running = p.WaitForLine("bmas up: running", 30s);
  ASSERT_TRUE(running) << running.error().message << p.StderrText();
  EXPECT_THAT(p.stdout_text(), HasSubstr("engines and gateway run as the bmas account"));
  passwd* account = getpwnam("bmas");
  ASSERT_NE(account, nullptr);
  // Every `bmas engine` and `bmas gateway` of this state dir runs as the account.
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    if (args.find(state) == std::string::npos) continue;
    if (args.find(std::string("\0engine\0", 8)) == std::string::npos &&
        args.find(std::string("\0gateway", 8)) == std::string::npos) {
      continue;
    }
    struct stat st {};
    ASSERT_EQ(stat(entry.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, account->pw_uid) << args;
    ++seen;
  }
  EXPECT_EQ(seen, 2) << "one engine and the gateway";
  struct stat st {};
  ASSERT_EQ(stat((state + "/store").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, account->pw_uid);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  // Root's `bmas gateway backend list` finds the gateway the account runs, and the engine
  // `bmas up` gave it on its command line.
  std::string listed;
  EXPECT_TRUE(Eventually(
      [&] {
        auto list = RunBmas({"gateway", "backend", "list", "--json"}, {{"BMAS_STATE_DIR", state}});
        listed = list ? list->out + list->err : list.error().message;
        rapidjson::Document rows;
        rows.Parse(listed.c_str());
        return !rows.HasParseError() && rows.IsArray() && rows.Size() == 1 &&
               Str(At(At(rows, 0), "health")) == "healthy" &&
               Str(At(At(At(rows, 0), "origins"), 0)) == "command line";
      },
      10s))
      << listed;
  p.Signal(SIGINT);
  auto status = p.Wait(20s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->Success()) << status->ToString() << "\n" << p.StderrText();
}

// Closing the terminal (SIGHUP) stops what up started, as Ctrl-C does; nothing is left running
// for the next `bmas up` to collide with (issue 15).
TEST(UpTest, AHangupStopsEverythingUpStarted) {
  TempDir dir;
  const std::string state = dir.path() + "/state";
  const std::string config = dir.WriteFile(
      "bmas.toml", std::string(kInstantConfig) + "[lxd]\ndir = \"" + dir.path() + "/lxd\"\n");
  auto up =
      Process::Start({"--config", config, "up", "--engines", "1"}, {{"BMAS_STATE_DIR", state}});
  ASSERT_TRUE(up) << up.error().message;
  Process& p = **up;
  auto running = p.WaitForLine("bmas up: running", 60s);
  ASSERT_TRUE(running) << running.error().message << p.StderrText();
  std::vector<uint16_t> ports;
  for (const std::string& url : ComponentUrls(p.stdout_text(), "")) {
    ports.push_back(PortOfUrl(url));
  }
  ASSERT_FALSE(ports.empty()) << p.stdout_text();
  p.Signal(SIGHUP);
  auto status = p.Wait(30s);
  ASSERT_TRUE(status.has_value()) << "bmas up still running 30 s after SIGHUP";
  EXPECT_TRUE(status->Success()) << status->ToString() << "\n" << p.StderrText();
  for (uint16_t port : ports) EXPECT_TRUE(ConnectionRefused(port)) << "port " << port;
  std::ifstream log(state + "/logs/up.log");
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("terminal hung up"));
  EXPECT_THAT(text.str(), HasSubstr("bmas up: stopped."));
}

// `bmas up --status --json` for `state`, parsed (an object, empty when it printed none).
rapidjson::Document UpStatus(const std::string& state) {
  auto r = RunBmas({"--state-dir", state, "up", "--status", "--json"});
  rapidjson::Document d;
  d.Parse(r ? r->out.c_str() : "{}");
  if (d.HasParseError() || !d.IsObject()) d.Parse("{}");
  return d;
}

// The part `name` in an `up --status --json` object (an empty object when there is none).
const rapidjson::Value& Part(const rapidjson::Value& status, const std::string& name) {
  static const rapidjson::Value kNone(rapidjson::kObjectType);
  const auto parts = status.FindMember("parts");
  if (parts == status.MemberEnd() || !parts->value.IsArray()) return kNone;
  for (const rapidjson::Value& p : parts->value.GetArray()) {
    if (p.IsObject() && Str(At(p, "name")) == name) return p;
  }
  return kNone;
}

constexpr std::string_view kNoSlurmNoLxd = "[up]\nslurm = false\nlxd = false\n";

// `bmas up --engines 1` on the instant profile, without Slurm or LXD, in `dir`'s state dir;
// null (with a test failure) when it does not get to running.
std::unique_ptr<Process> UpWithOneEngine(TempDir& dir, const std::string& state) {
  const std::string config =
      dir.WriteFile("bmas.toml", std::string(kInstantConfig) + std::string(kNoSlurmNoLxd));
  auto up =
      Process::Start({"--config", config, "up", "--engines", "1"}, {{"BMAS_STATE_DIR", state}});
  EXPECT_TRUE(up) << up.error().message;
  if (!up) return nullptr;
  auto running = (*up)->WaitForLine("bmas up: running", 30s);
  EXPECT_TRUE(running) << running.error().message << (*up)->StderrText();
  return running ? std::move(*up) : nullptr;
}

// An engine or the gateway that dies is started again on its own port, with backoff; up goes
// on running, says so on stderr, and `bmas up --status` shows the restart and the exit (issue
// 15).
TEST(UpTest, APartThatDiesIsStartedAgainOnItsPortAndStatusSaysSo) {
  TempDir dir;
  const std::string state = dir.path() + "/state";
  std::unique_ptr<Process> up = UpWithOneEngine(dir, state);
  ASSERT_NE(up, nullptr);
  Process& p = *up;
  const std::vector<std::string> engine = EngineUrls(p.stdout_text());
  const std::vector<std::string> gateway = ComponentUrls(p.stdout_text(), "gateway");
  ASSERT_EQ(engine.size(), 1u);
  ASSERT_EQ(gateway.size(), 1u);

  rapidjson::Document status = UpStatus(state);
  ASSERT_TRUE(status.HasMember("running")) << "no status";
  EXPECT_TRUE(At(status, "running").GetBool());
  EXPECT_EQ(Int(At(status, "pid")), p.pid());
  for (const char* name : {"engine-0", "gateway"}) {
    SCOPED_TRACE(name);
    const pid_t before = static_cast<pid_t>(Int(At(Part(status, name), "pid")));
    ASSERT_GT(before, 0);
    ASSERT_EQ(kill(before, SIGKILL), 0);
    rapidjson::Document now;
    EXPECT_TRUE(Eventually(
        [&] {
          now = UpStatus(state);
          const rapidjson::Value& part = Part(now, name);
          return part.HasMember("restarts") && Int(At(part, "restarts")) == 1 &&
                 Str(At(part, "state")) == "running";
        },
        20s))
        << p.StderrText();
    const rapidjson::Value& part = Part(now, name);
    EXPECT_NE(Int(At(part, "pid")), before);
    EXPECT_THAT(Str(At(part, "last_exit")), HasSubstr("signal 9"));
    EXPECT_EQ(Str(At(part, "url")), std::string(name) == "gateway" ? gateway[0] : engine[0]);
  }
  EXPECT_THAT(p.StderrText(), HasSubstr("engine-0 ("));
  EXPECT_THAT(p.StderrText(), HasSubstr("exited unexpectedly (signal 9); starting it again in 1 s"));
  EXPECT_TRUE(p.running()) << "bmas up stopped when a part died";
  // The engine answers on the port it had; the text status shows the restart.
  HttpClient engine_client(PortOfUrl(engine[0]));
  auto version = engine_client.Get("/version");
  ASSERT_TRUE(version) << version.error().message;
  EXPECT_EQ(version->status, 200);
  auto text = RunBmas({"--state-dir", state, "up", "--status"});
  ASSERT_TRUE(text);
  EXPECT_TRUE(text->status.Success()) << text->err;
  EXPECT_THAT(text->out, ::testing::ContainsRegex("engine-0 +[0-9]+ +running +1 "));
  EXPECT_THAT(text->out, HasSubstr("signal 9 at "));

  p.Signal(SIGINT);
  auto stopped = p.Wait(20s);
  ASSERT_TRUE(stopped.has_value());
  EXPECT_TRUE(stopped->Success()) << stopped->ToString() << p.StderrText();
  auto after = RunBmas({"--state-dir", state, "up", "--status"});
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status.code, 1);
  EXPECT_THAT(after->out, HasSubstr("not running"));
}

// A part that dies leaves its ports held by up (common/listen_socket.h): between its death and
// its next start no other account can bind them and receive the keys, prompts or operator bearer
// sent there; a request sent meanwhile waits in the queue and the next start answers it.
TEST(UpTest, APartsPortsStayHeldByUpWhileItStartsAgain) {
  if (geteuid() != 0) GTEST_SKIP() << "binds as another account: needs root";
  const std::string student = EnsureUnixUser("bmas-test-student");
  TempDir dir;
  const std::string state = dir.path() + "/state";
  std::unique_ptr<Process> up = UpWithOneEngine(dir, state);
  ASSERT_NE(up, nullptr);
  Process& p = *up;
  struct Watched {
    std::string part, url, path;
    unsigned status;  // what `path` answers
  };
  std::vector<Watched> watched;
  for (Watched w : {Watched{"engine-0", "", "/version", 200}, Watched{"gateway", "", "/v1/models", 401},
                    Watched{"dashboard", "", "/login", 200}}) {
    const std::vector<std::string> urls = ComponentUrls(p.stdout_text(), w.part);
    if (w.part != "dashboard") {
      ASSERT_EQ(urls.size(), 1u) << w.part << p.stdout_text();
    }
    if (urls.empty()) continue;
    w.url = urls[0];
    watched.push_back(w);
  }
  std::smatch metrics;
  const std::string summary = p.stdout_text();
  ASSERT_TRUE(std::regex_search(summary, metrics,
                                std::regex(R"(operator metrics: http://127\.0\.0\.1:([0-9]+))")))
      << summary;
  const uint16_t metrics_port = static_cast<uint16_t>(std::stoi(metrics[1].str()));

  for (const Watched& w : watched) {
    SCOPED_TRACE(w.part);
    const uint16_t port = PortOfUrl(w.url);
    const pid_t before = static_cast<pid_t>(Int(At(Part(UpStatus(state), w.part), "pid")));
    ASSERT_GT(before, 0);
    ASSERT_EQ(kill(before, SIGKILL), 0);
    ASSERT_TRUE(Eventually([&] { return !ProcessRunning(before); }, 10s));
    // Dead, and not yet started again (up waits 1 s): the port is still up's.
    int taken = BindAndListenAs(student, port);
    EXPECT_EQ(taken, EADDRINUSE) << "as " << student << ": " << std::strerror(taken);
    if (w.part == "gateway") {
      taken = BindAndListenAs(student, metrics_port);
      EXPECT_EQ(taken, EADDRINUSE) << "the operator listener, as " << student << ": "
                                   << std::strerror(taken);
    }
    // Sent while the part is down: answered by its next start, on the same port.
    HttpClient client(port, 20s);
    auto answer = client.Get(w.path);
    ASSERT_TRUE(answer) << answer.error().message << p.StderrText();
    EXPECT_EQ(answer->status, w.status) << answer->body;
    const rapidjson::Document after = UpStatus(state);
    const rapidjson::Value& part = Part(after, w.part);
    EXPECT_NE(Int(At(part, "pid")), before);
    EXPECT_EQ(Str(At(part, "url")), w.url);
  }
  EXPECT_THAT(p.StderrText(), HasSubstr("started again"));
  p.Signal(SIGINT);
  auto stopped = p.Wait(20s);
  ASSERT_TRUE(stopped.has_value());
  EXPECT_TRUE(stopped->Success()) << stopped->ToString() << p.StderrText();
  // Up's end closes them: the ports are free again.
  for (const Watched& w : watched) {
    EXPECT_EQ(BindAndListenAs(student, PortOfUrl(w.url)), 0) << w.part;
  }
}

// A bmas up killed outright (SIGKILL: no clean-up) leaves its parts running; `up --status` says
// so, and the next `bmas up` stops them, says which, and starts its own set (issue 15).
TEST(UpTest, ANewUpStopsThePartsADeadUpLeftRunning) {
  TempDir dir;
  const std::string state = dir.path() + "/state";
  const std::string config =
      dir.WriteFile("bmas.toml", std::string(kInstantConfig) + std::string(kNoSlurmNoLxd));
  const EnvList env = {{"BMAS_STATE_DIR", state}};
  auto first = Process::Start({"--config", config, "up", "--engines", "1"}, env);
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_TRUE((*first)->WaitForLine("bmas up: running", 30s));
  rapidjson::Document status = UpStatus(state);
  const pid_t engine = static_cast<pid_t>(Int(At(Part(status, "engine-0"), "pid")));
  const pid_t gateway = static_cast<pid_t>(Int(At(Part(status, "gateway"), "pid")));
  ASSERT_GT(engine, 0);
  ASSERT_GT(gateway, 0);
  const pid_t dead = (*first)->pid();
  (*first)->Signal(SIGKILL);
  ASSERT_TRUE((*first)->Wait(10s).has_value());
  ASSERT_TRUE(ProcessRunning(engine) && ProcessRunning(gateway)) << "nothing was left running";

  auto stale = RunBmas({"--state-dir", state, "up", "--status"});
  ASSERT_TRUE(stale);
  EXPECT_EQ(stale->status.code, 1);
  EXPECT_THAT(stale->out, HasSubstr(fmt::format("the last one (pid {}) ended without stopping", dead)));
  EXPECT_THAT(stale->out, ::testing::ContainsRegex("engine-0 +pid [0-9]+ +still running: the next "
                                                   "`bmas up` stops it"));

  auto second = Process::Start({"--config", config, "up", "--engines", "1"}, env);
  ASSERT_TRUE(second) << second.error().message;
  auto running = (*second)->WaitForLine("bmas up: running", 30s);
  ASSERT_TRUE(running) << running.error().message << (*second)->StderrText();
  EXPECT_THAT((*second)->stdout_text(),
              HasSubstr(fmt::format("stopped engine-0 (pid {}), left running by the last bmas up "
                                    "(pid {})",
                                    engine, dead)));
  EXPECT_THAT((*second)->stdout_text(), HasSubstr(fmt::format("stopped gateway (pid {})", gateway)));
  EXPECT_FALSE(ProcessRunning(engine));
  EXPECT_FALSE(ProcessRunning(gateway));
  EXPECT_EQ(EngineUrls((*second)->stdout_text()).size(), 1u);
  (*second)->Signal(SIGINT);
  auto stopped = (*second)->Wait(20s);
  ASSERT_TRUE(stopped.has_value());
  EXPECT_TRUE(stopped->Success()) << stopped->ToString();
}

// As root with Slurm and LXD: a running `bmas up` owns the Slurm and the LXD it started, so
// `bmas slurm down` and `bmas lxd down` refuse, naming it; a new up after a dead one adopts
// them and stops them when it stops (issue 15).
TEST(UpTest, SlurmAndLxdDownRefuseWhatARunningUpOwnsAndTheNextUpAdoptsThem) {
  if (geteuid() != 0 || access("/usr/sbin/slurmctld", X_OK) != 0 ||
      (access("/usr/bin/lxd", X_OK) != 0 && access("/usr/sbin/lxd", X_OK) != 0)) {
    GTEST_SKIP() << "needs root, Slurm and LXD (bash scripts/install-deps.sh)";
  }
  // Under /tmp/bmas-lxd-test-* as the LXD tests are (their clean-up knows the name), open to
  // Slurm's and LXD's daemons.
  std::string root = "/tmp/bmas-lxd-test-XXXXXX";
  ASSERT_NE(mkdtemp(root.data()), nullptr);
  ASSERT_EQ(chmod(root.c_str(), 0755), 0);
  const std::string state = root + "/state";
  const std::string config = root + "/bmas.toml";
  // Plain engine processes: the inference deployment's path has tests of its own. No default
  // image: on a machine whose cache lacks it, up would build it (debootstrap, minutes), which
  // the image tests cover.
  std::ofstream(config) << kInstantConfig << "[up]\ninference = \"processes\"\nimage = false\n"
                        << fmt::format("[lxd]\ndir = \"{}/lxd\"\npool_size = \"2GiB\"\n", root);
  auto bmas = [&](const std::vector<std::string>& args, std::chrono::seconds timeout = 60s) {
    std::vector<std::string> argv = {"--config", config, "--state-dir", state};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunBmas(argv, {}, timeout);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CliRun{};
  };
  // Whatever happens, nothing is left running or mounted.
  struct CleanUp {
    std::function<void()> run;
    ~CleanUp() { run(); }
  } clean_up{[&] {
    bmas({"slurm", "down"}, 120s);
    bmas({"lxd", "down"}, 120s);
    const std::vector<std::string> left = MountsUnder(root);
    for (auto it = left.rbegin(); it != left.rend(); ++it) umount2(it->c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }};

  auto first = Process::Start({"--config", config, "--state-dir", state, "up", "--engines", "0"});
  ASSERT_TRUE(first) << first.error().message;
  auto running = (*first)->WaitForLine("bmas up: running", 180s);
  ASSERT_TRUE(running) << running.error().message << (*first)->StderrText();
  const std::string summary = (*first)->stdout_text();
  ASSERT_THAT(summary, ::testing::ContainsRegex("\n  slurm +http://")) << summary;
  ASSERT_THAT(summary, ::testing::ContainsRegex("\n  lxd +/")) << summary;
  const pid_t up_pid = (*first)->pid();

  for (const std::string part : {"slurm", "lxd"}) {
    SCOPED_TRACE(part);
    CliRun down = bmas({part, "down"});
    EXPECT_EQ(down.status.code, 1) << down.out << down.err;
    EXPECT_THAT(down.err, HasSubstr(fmt::format("bmas {} down: the local {} belongs to the bmas "
                                                "up running with state dir {} (pid {})",
                                                part, part == "slurm" ? "Slurm" : "LXD", state,
                                                up_pid)));
    EXPECT_THAT(down.err, HasSubstr(fmt::format("kill -INT {}", up_pid)));
  }
  EXPECT_TRUE(std::filesystem::exists(state + "/slurm/local.json")) << "Slurm was stopped";
  CliRun jobs = bmas({"jobs"});
  EXPECT_TRUE(jobs.status.Success()) << jobs.err;
  CliRun status = bmas({"up", "--status"});
  EXPECT_TRUE(status.status.Success()) << status.err;
  EXPECT_THAT(status.out, ::testing::ContainsRegex("\n  slurm +started by this bmas up"));
  EXPECT_THAT(status.out, ::testing::ContainsRegex("\n  lxd +started by this bmas up"));
  EXPECT_THAT(status.out, ::testing::ContainsRegex("\n  agent +[0-9]+ +running"));

  // Killed outright: the next up stops the parts it left and adopts its Slurm and LXD.
  (*first)->Signal(SIGKILL);
  ASSERT_TRUE((*first)->Wait(10s).has_value());
  auto second = Process::Start({"--config", config, "--state-dir", state, "up", "--engines", "0"});
  ASSERT_TRUE(second) << second.error().message;
  running = (*second)->WaitForLine("bmas up: running", 180s);
  ASSERT_TRUE(running) << running.error().message << (*second)->StderrText();
  EXPECT_THAT((*second)->stdout_text(), ::testing::ContainsRegex("stopped agent \\(pid [0-9]+\\)"));
  EXPECT_THAT((*second)->stdout_text(),
              HasSubstr(fmt::format("local Slurm started by the last bmas up (pid {}), which "
                                    "died; adopted",
                                    up_pid)));
  EXPECT_THAT(bmas({"slurm", "down"}).err, HasSubstr("belongs to the bmas up"));
  (*second)->Signal(SIGINT);
  auto stopped = (*second)->Wait(120s);
  ASSERT_TRUE(stopped.has_value()) << "bmas up still running 120 s after SIGINT";
  EXPECT_TRUE(stopped->Success()) << stopped->ToString() << (*second)->StderrText();
  // It stopped what it adopted.
  EXPECT_FALSE(std::filesystem::exists(state + "/slurm/local.json"));
  std::ifstream lxd_json(state + "/lxd.json");
  std::stringstream recorded;
  recorded << lxd_json.rdbuf();
  if (lxd_json.is_open()) {
    rapidjson::Document d = ParseJson(recorded.str());
    EXPECT_EQ(At(d, "started").Size(), 0u) << recorded.str();
  }
}

TEST(UpTest, SecondUpOnTheSameStateDirRefuses) {
  TempDir dir;
  const std::string state = dir.path() + "/state";
  const std::vector<std::pair<std::string, std::string>> env = {{"BMAS_STATE_DIR", state}};
  // Neither Slurm nor LXD: the lock on the state dir is what is tested, and a machine whose
  // image cache is empty would spend minutes building the workspace image before "running".
  const std::string config = dir.path() + "/bmas.toml";
  std::ofstream(config) << kNoSlurmNoLxd;
  auto first = Process::Start({"--config", config, "up", "--engines", "0"}, env);
  ASSERT_TRUE(first) << first.error().message;
  auto running = (*first)->WaitForLine("bmas up: running", 10s);
  ASSERT_TRUE(running) << running.error().message;

  auto second = Process::Start({"--config", config, "up", "--engines", "0"}, env);
  ASSERT_TRUE(second) << second.error().message;
  auto status = (*second)->Wait(10s);
  ASSERT_TRUE(status.has_value()) << "the second bmas up did not refuse";
  EXPECT_TRUE(status->exited && status->code != 0) << status->ToString();
  const std::string err = (*second)->StderrText();
  EXPECT_THAT(err, HasSubstr("another bmas up"));
  EXPECT_THAT(err, HasSubstr(fmt::format("pid {}", (*first)->pid())));
  EXPECT_THAT(err, HasSubstr(state));

  // The first is unaffected, and stops cleanly.
  EXPECT_TRUE((*first)->running());
  (*first)->Signal(SIGINT);
  auto first_status = (*first)->Wait(10s);
  ASSERT_TRUE(first_status.has_value());
  EXPECT_TRUE(first_status->Success()) << first_status->ToString();

  // With the first gone, the state dir is free again.
  auto third = Process::Start({"--config", config, "up", "--engines", "0"}, env);
  ASSERT_TRUE(third) << third.error().message;
  auto third_running = (*third)->WaitForLine("bmas up: running", 10s);
  EXPECT_TRUE(third_running) << third_running.error().message;
}

// A bad config file stops `bmas engine` and `bmas up` before they start anything, and the
// message names the file, the line and the key.
TEST(ConfigTest, BadConfigFilesFailWithFileLineAndKey) {
  struct Case {
    const char* name;
    const char* toml;
    const char* line;  // ":N" after the file name
    const char* key;
  };
  const Case kCases[] = {
      {"unknown key", "[engine]\nfoo = 1\n", ":2", "engine.foo"},
      {"wrong type", "[engine]\nprofile = \"instant\"\nport = \"x\"\n", ":3", "engine.port"},
      {"out of range", "[engine]\nport = 70000\n", ":2", "engine.port"},
      {"unknown table key", "[up]\nengine = 2\n", ":2", "up.engine"},
  };
  const std::vector<std::vector<std::string>> kCommands = {{"engine", "--port", "0"},
                                                           {"up", "--engines", "1"}};
  for (const Case& c : kCases) {
    for (const auto& command : kCommands) {
      SCOPED_TRACE(fmt::format("{}: bmas {}", c.name, command[0]));
      TempDir dir;
      const std::string config = dir.WriteFile("bmas.toml", c.toml);
      std::vector<std::string> args = {"--config", config};
      args.insert(args.end(), command.begin(), command.end());
      auto p = Process::Start(args, {{"BMAS_STATE_DIR", dir.path() + "/state"}});
      ASSERT_TRUE(p) << p.error().message;
      auto status = (*p)->Wait(10s);
      ASSERT_TRUE(status.has_value()) << "still running with a bad config";
      EXPECT_TRUE(status->exited && status->code != 0) << status->ToString();
      const std::string err = (*p)->StderrText();
      EXPECT_THAT(err, HasSubstr(config + c.line)) << err;
      EXPECT_THAT(err, HasSubstr(c.key)) << err;
      (*p)->DrainStdout(1s);
      EXPECT_THAT((*p)->stdout_text(), Not(HasSubstr("listening on")));
      EXPECT_THAT((*p)->stdout_text(), Not(HasSubstr("running")));
    }
  }
}

TEST(ConfigTest, EngineReadsItsSettingsFromTheConfigFile) {
  TempDir dir;
  const std::string config = dir.WriteFile(
      "bmas.toml",
      "[engine]\nprofile = \"instant\"\nmodel = \"from/config\"\nmax_model_len = 2048\n");
  auto p = Process::Start({"--config", config, "engine"});
  ASSERT_TRUE(p) << p.error().message;
  auto line = (*p)->WaitForLine("listening on", 10s);
  ASSERT_TRUE(line) << line.error().message;
  HttpClient client(PortOfUrl(line->substr(line->find("http://"))));
  auto models = client.Get("/v1/models");
  ASSERT_TRUE(models) << models.error().message;
  EXPECT_THAT(models->body, HasSubstr(R"("id":"from/config")"));
  EXPECT_THAT(models->body, HasSubstr(R"("max_model_len":2048)"));
  // A flag overrides the file.
  (*p)->Stop(5s);
  auto q = Process::Start({"--config", config, "engine", "--max-model-len", "1024"});
  ASSERT_TRUE(q) << q.error().message;
  line = (*q)->WaitForLine("listening on", 10s);
  ASSERT_TRUE(line) << line.error().message;
  HttpClient client2(PortOfUrl(line->substr(line->find("http://"))));
  models = client2.Get("/v1/models");
  ASSERT_TRUE(models) << models.error().message;
  EXPECT_THAT(models->body, HasSubstr(R"("max_model_len":1024)"));
}

}  // namespace
}  // namespace bmas::testing
