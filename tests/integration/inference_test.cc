// Elastic inference replicas on a real local Slurm, as `bmas up` runs them: the simulated
// model deployed through `bmas inference` with its replica a Slurm job in the floor partition;
// a --min 0 deployment answering its first request; a deployment scaled up under load, its
// replicas above the floor preempted by a student's training job while streams run (every
// stream completes through resumption, with its text and usage checked), the floor never
// preempted, the requeued replicas coming back when the GPUs free up, and the deployment
// scaled down once the load is gone (the replicas above the floor asleep); an idle replica
// asleep on its GPU, woken when load rises, with no failed request; a node drained with
// `bmas node drain`, its replica moved to another node without a lost stream. Needs root and Slurm (scripts/install-deps.sh).

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/process.h"
#include "engine_process.h"
#include "http_client.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr std::string_view kDefaultModel = "meta-llama/Llama-3.1-8B-Instruct";

struct Replica {
  int64_t job_id = 0;
  std::string state, node, url;
  bool floor = false;
};

class InferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || access("/usr/sbin/slurmctld", X_OK) != 0) {
      GTEST_SKIP() << "needs root and Slurm (bash scripts/install-deps.sh)";
    }
    fs::permissions(dir_.path(), fs::perms::all | fs::perms::sticky_bit);
    state_ = dir_.path() + "/state";
    const std::string config = dir_.WriteFile(
        "bmas.toml",
        "[up]\nlxd = false\ndashboard = false\nengines = 1\nreplica_scale_down_idle_s = 10\n" +
            up_extra_ + "[engine]\nprofile = \"instant\"\n");
    auto up = Process::Start({"--config", config, "--state-dir", state_, "up"});
    ASSERT_TRUE(up) << up.error().message;
    up_ = std::move(*up);
    auto running = up_->WaitForLine("bmas up: running", std::chrono::seconds(120));
    ASSERT_TRUE(running) << running.error().message << up_->StderrText();
    const std::string& summary = up_->stdout_text();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(summary, m, std::regex(R"(\n  gateway +http://127\.0\.0\.1:([0-9]+))")))
        << summary;
    gateway_port_ = static_cast<uint16_t>(std::stoi(m[1]));
    EXPECT_THAT(summary, HasSubstr("controller (Slurm jobs)")) << summary;
    Bmas({"user", "add", "ada"});
    key_ = Key("ada");
  }

  void TearDown() override {
    if (up_) up_->Stop(std::chrono::seconds(30));
    if (!state_.empty()) RunBmas({"--state-dir", state_, "slurm", "down"});
  }

  CommandOutput Bmas(const std::vector<std::string>& args, const std::string& user = "") {
    auto r = RunBmasIn(dir_.path(), state_, args, user);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  std::string Key(const std::string& user) {
    CommandOutput out = Bmas({"key", "create", user});
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out.out, m, std::regex("sk-bmas-[A-Za-z0-9_-]+"))) << out.out;
    return m.empty() ? "" : m[0].str();
  }

  // `bmas inference list --json`, per model.
  std::map<std::string, std::vector<Replica>> Replicas() {
    CommandOutput out = Bmas({"inference", "list", "--json"});
    std::map<std::string, std::vector<Replica>> r;
    rapidjson::Document d;
    d.Parse(out.out.c_str());
    if (d.HasParseError() || !d.IsArray()) {
      ADD_FAILURE() << "not a JSON array: " << out.out << out.err;
      return r;
    }
    for (const auto& dep : d.GetArray()) {
      auto& list = r[dep["model"].GetString()];
      for (const auto& x : dep["replicas"].GetArray()) {
        list.push_back({x["job_id"].GetInt64(), x["state"].GetString(), x["node"].GetString(),
                        x["url"].GetString(), x["floor"].GetBool()});
      }
    }
    return r;
  }

  int Count(const std::string& model, const std::string& state) {
    int n = 0;
    const auto all = Replicas();
    auto it = all.find(model);
    if (it == all.end()) return 0;
    for (const Replica& x : it->second) n += x.state == state;
    return n;
  }

  // `scontrol show job -d ID` as root: its GPUs, with their indexes.
  std::string ShowJobDetail(int64_t id) {
    auto r = RunCommand({"scontrol", "show", "job", "-d", std::to_string(id)},
                        {"SLURM_CONF=" + state_ + "/slurm/etc/slurm.conf"}, std::chrono::seconds(10));
    return r ? r->out : r.error().message;
  }

  // `scontrol show job ID` as root, for its restarts and state.
  std::string ShowJob(int64_t id) {
    auto r = RunCommand({"scontrol", "show", "job", std::to_string(id)},
                        {"SLURM_CONF=" + state_ + "/slurm/etc/slurm.conf"}, std::chrono::seconds(10));
    return r ? r->out : r.error().message;
  }

  HttpResponse Complete(std::string_view model, int max_tokens) {
    HttpClient client(gateway_port_, std::chrono::seconds(60));
    client.SetDefaultHeader("Authorization", "Bearer " + key_);
    auto r = client.Post("/v1/completions",
                         fmt::format(R"({{"model":"{}","prompt":"hello there","max_tokens":{}}})",
                                     model, max_tokens));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : HttpResponse{};
  }

  TempDir dir_;
  std::string up_extra_;  // more of the config's [up] table, set before SetUp
  std::string state_;
  std::unique_ptr<Process> up_;
  uint16_t gateway_port_ = 0;
  std::string key_;
};

TEST_F(InferenceTest, UpRunsTheSimulatedModelAsAFloorReplicaJobAndServesIt) {
  ASSERT_TRUE(Eventually([&] { return Count(std::string(kDefaultModel), "ready") == 1; }, 60s))
      << Bmas({"inference", "list"}).out << up_->StderrText();
  const Replica r = Replicas()[std::string(kDefaultModel)][0];
  EXPECT_TRUE(r.floor);
  EXPECT_THAT(r.url, ::testing::StartsWith("http://127.0.0.1:"));
  EXPECT_THAT(ShowJob(r.job_id), HasSubstr("Partition=inference_floor"));
  EXPECT_THAT(ShowJob(r.job_id), HasSubstr("UserId=bmas("));
  EXPECT_EQ(Complete(kDefaultModel, 4).status, 200);
  // A student reads the deployments; only root changes them.
  const std::string student = EnsureUnixUser("bmas-test-student");
  CommandOutput refused = Bmas({"inference", "deploy", "x/y"}, student);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("needs root"));
}

TEST_F(InferenceTest, AMinZeroDeploymentStartsAReplicaForItsFirstRequestAndAnswersIt) {
  Bmas({"inference", "deploy", "acme/cold", "--min", "0", "--max", "1", "--profile", "instant"});
  EXPECT_EQ(Count("acme/cold", "ready") + Count("acme/cold", "pending"), 0);
  // Listed by the gateway (within its once-a-second store refresh) before any replica runs.
  HttpClient client(gateway_port_);
  client.SetDefaultHeader("Authorization", "Bearer " + key_);
  EXPECT_TRUE(Eventually(
      [&] {
        auto models = client.Get("/v1/models");
        return models && models->body.find("acme/cold") != std::string::npos;
      },
      10s));
  HttpResponse first = Complete("acme/cold", 3);
  EXPECT_EQ(first.status, 200) << first.body;
  EXPECT_THAT(first.body, HasSubstr("\"completion_tokens\":3"));
  EXPECT_TRUE(Eventually([&] { return Count("acme/cold", "ready") == 1; }, 10s));
}


// A timetable floor in force now (every day, all day, so whatever the machine's zone): the
// controller keeps its replicas, as floor replicas, though no request asks for them.
TEST_F(InferenceTest, ATimetableFloorInForceKeepsItsReplicasOnTheFloor) {
  Bmas({"inference", "deploy", "acme/lab", "--min", "0", "--max", "2", "--profile", "instant",
        "--timetable", "Mon-Sun 00:00-24:00 min=2"});
  ASSERT_TRUE(Eventually([&] { return Count("acme/lab", "ready") == 2; }, 60s))
      << Bmas({"inference", "list"}).out;
  for (const Replica& r : Replicas()["acme/lab"]) EXPECT_TRUE(r.floor) << r.job_id;
  std::ifstream log(state_ + "/logs/controller.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("acme/lab: timetable floor of 2 replica(s) in force"));
}

// What one client saw of its streams.
struct ClientLog {
  int streams = 0;           // ended with [DONE]
  int failures = 0;          // did not
  std::string last_failure;
  int wrong_tokens = 0;      // [DONE] without every token asked for, or usage disagreeing
  int refused = 0;           // 503 before the stream began, tried again (as OpenAI's SDKs do)
};

// Streams completions of `model` (max_tokens `tokens`) until `stop`, checking each. A 503
// before anything streamed is tried again after a second, as OpenAI's clients retry it by
// default; it is counted, not lost. A stream that began and did not end with [DONE] is lost.
void StreamUntil(uint16_t port, const std::string& key, const std::string& model, int tokens,
                 const std::atomic<bool>& stop, ClientLog& log) {
  int i = 0;
  while (!stop) {
    const std::string body = fmt::format(
        R"({{"model":"{}","prompt":"story {} of the cluster","max_tokens":{},"stream":true,)"
        R"("stream_options":{{"include_usage":true}}}})",
        model, i++, tokens);
    auto s = SseStream::Open(port, "/v1/completions", body, std::chrono::seconds(60),
                             {{"Authorization", "Bearer " + key}});
    if (s && (*s)->status() == 503) {
      ++log.refused;
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    if (!s || (*s)->status() != 200) {
      ++log.failures;
      log.last_failure = s ? fmt::format("HTTP {}", (*s)->status()) : s.error().message;
      continue;
    }
    auto events = (*s)->ReadAll();
    if (!events || events->empty() || events->back() != "[DONE]") {
      ++log.failures;
      log.last_failure = !events ? events.error().message
                         : events->empty() ? "no events" : events->back();
      continue;
    }
    int got = 0;
    int64_t usage = -1;
    for (const std::string& e : *events) {
      rapidjson::Document d;
      d.Parse(e.c_str());
      if (d.HasParseError() || !d.IsObject()) continue;
      if (d.HasMember("usage") && d["usage"].IsObject()) usage = d["usage"]["completion_tokens"].GetInt64();
      if (d.HasMember("choices") && d["choices"].IsArray() && !d["choices"].Empty() &&
          d["choices"][0]["text"].GetStringLength() > 0) {
        ++got;
      }
    }
    ++log.streams;
    if (got != tokens || usage != got) {
      ++log.wrong_tokens;
      log.last_failure = fmt::format("{} tokens, usage {}", got, usage);
    }
  }
}

// `bmas node drain` on the node of the only (floor) replica: the controller starts its
// replacement on another node and drains the old one only once the new one serves, so a client
// streaming all along loses nothing; a student can list nodes but neither drain nor resume one.
TEST_F(InferenceTest, DrainingANodeMovesItsReplicaElsewhereWithoutLosingAStream) {
  const std::string model(kDefaultModel);
  ASSERT_TRUE(Eventually([&] { return Count(model, "ready") == 1; }, 60s))
      << Bmas({"inference", "list"}).out << up_->StderrText();
  const Replica before = Replicas()[model][0];
  ASSERT_FALSE(before.node.empty());
  const std::string student = EnsureUnixUser("bmas-test-student");
  CommandOutput refused = Bmas({"node", "drain", before.node}, student);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("only root drains nodes"));
  CommandOutput unknown = Bmas({"node", "drain", "oss99"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_THAT(unknown.err, HasSubstr("Slurm has no node 'oss99'"));

  std::atomic<bool> stop{false};
  ClientLog log;
  std::thread client([&] { StreamUntil(gateway_port_, key_, model, 8, stop, log); });
  CommandOutput drained = Bmas({"node", "drain", before.node, "--reason", "disk swap"});
  EXPECT_EQ(drained.exit_code, 0) << drained.err;
  EXPECT_THAT(drained.out, HasSubstr("1 inference replica(s) there move"));
  // Anyone can see why the node is out.
  CommandOutput listed = Bmas({"node", "list", "--json"}, student);
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  rapidjson::Document nodes;
  nodes.Parse(listed.out.c_str());
  ASSERT_TRUE(nodes.IsArray()) << listed.out;
  bool seen = false;
  for (const auto& n : nodes.GetArray()) {
    if (before.node != n["name"].GetString()) continue;
    seen = true;
    EXPECT_TRUE(n["drained"].GetBool());
    EXPECT_THAT(n["reason"].GetString(), HasSubstr("disk swap"));
  }
  EXPECT_TRUE(seen) << listed.out;
  // The replica moves: one ready replica, on another node, and the old job gone.
  EXPECT_TRUE(Eventually(
      [&] {
        const auto all = Replicas()[model];
        return all.size() == 1 && all[0].state == "ready" && all[0].node != before.node;
      },
      90s))
      << Bmas({"inference", "list"}).out;
  std::this_thread::sleep_for(2s);  // streams through the new replica
  stop = true;
  client.join();
  EXPECT_EQ(log.failures, 0) << log.last_failure;
  EXPECT_EQ(log.wrong_tokens, 0) << log.last_failure;
  EXPECT_GT(log.streams, 0);
  std::ifstream controller(state_ + "/logs/controller.log");
  const std::string text((std::istreambuf_iterator<char>(controller)),
                         std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr(fmt::format("its node {} is drained in Slurm", before.node)));

  EXPECT_NE(Bmas({"node", "resume", before.node}, student).exit_code, 0);
  CommandOutput resumed = Bmas({"node", "resume", before.node});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(Bmas({"node", "list"}).out, ::testing::Not(HasSubstr("disk swap")));
}

TEST_F(InferenceTest, ReplicasFollowLoadYieldToTrainingWithoutLosingAStreamAndComeBack) {
  const std::string model = "acme/elastic";
  // One request at a time per replica (--max-num-seqs 1), so that four clients are a load.
  Bmas({"inference", "deploy", model, "--min", "1", "--max", "3", "--profile",
        "llama-3.1-8b-h100", "--command",
        "{bmas} engine --host {host} --port {port} --model {model} --profile {profile} "
        "--max-num-seqs 1 --shutdown-timeout 0"});
  ASSERT_TRUE(Eventually([&] { return Count(model, "ready") == 1; }, 60s))
      << Bmas({"inference", "list"}).out;

  std::atomic<bool> stop = false;
  std::vector<ClientLog> logs(4);
  std::vector<std::thread> clients;
  for (ClientLog& log : logs) {
    clients.emplace_back([&, p = gateway_port_, k = key_] { StreamUntil(p, k, model, 200, stop, log); });
  }
  struct Join {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Join() {
      stop = true;
      for (auto& t : threads) t.join();
    }
  } join{stop, clients};

  // Scale-up under load: up to the ceiling.
  ASSERT_TRUE(Eventually([&] { return Count(model, "ready") == 3; }, 120s))
      << Bmas({"inference", "list"}).out;
  const std::vector<Replica> replicas = Replicas()[model];
  const std::vector<Replica> others = Replicas()[std::string(kDefaultModel)];
  std::map<std::string, int> floor_gpus;  // per node
  std::set<std::string> burst_nodes;
  std::vector<int64_t> floors, bursts;
  for (const auto* list : {&replicas, &others}) {
    for (const Replica& r : *list) {
      if (r.floor) {
        ++floor_gpus[r.node];
        floors.push_back(r.job_id);
      } else {
        burst_nodes.insert(r.node);
        bursts.push_back(r.job_id);
      }
    }
  }
  ASSERT_EQ(bursts.size(), 2u);

  // A student's training job wants every GPU of the nodes the burst replicas hold, but the
  // floor's: Slurm must preempt the bursts, and may not touch the floor.
  const std::string student = EnsureUnixUser("bmas-test-student");
  const std::vector<std::string> env = {"SLURM_CONF=" + state_ + "/slurm/etc/slurm.conf"};
  std::vector<std::string> training;
  for (const std::string& node : burst_nodes) {
    auto r = RunCommand({"runuser", "-u", student, "--", "sbatch", "--parsable", "-p", "training",
                         "-N1", "-w", node, fmt::format("--gpus-per-node={}", 4 - floor_gpus[node]),
                         "-D", "/tmp", "-o", "/dev/null", "--wrap", "sleep 8"},
                        env, std::chrono::seconds(30));
    ASSERT_TRUE(r && r->exit_code == 0) << (r ? r->err : r.error().message);
    training.push_back(r->out.substr(0, r->out.find('\n')));
  }
  for (const std::string& id : training) {
    EXPECT_TRUE(Eventually([&] { return ShowJob(std::stoll(id)).find("JobState=RUNNING") != std::string::npos; }, 60s))
        << ShowJob(std::stoll(id));
  }
  // The bursts were requeued; they come back once training ends.
  for (int64_t id : bursts) {
    EXPECT_TRUE(Eventually([&] { return ShowJob(id).find("Restarts=1") != std::string::npos; }, 30s))
        << ShowJob(id);
  }
  EXPECT_TRUE(Eventually([&] { return Count(model, "ready") == 3; }, 120s))
      << Bmas({"inference", "list"}).out;
  for (int64_t id : floors) {
    EXPECT_THAT(ShowJob(id), HasSubstr("Restarts=0"));
    EXPECT_THAT(ShowJob(id), HasSubstr("JobState=RUNNING"));
  }

  // Then the load ends, and the deployment goes back down to its floor.
  stop = true;
  for (auto& t : clients) t.join();
  clients.clear();
  // With no training waiting, the replicas above the floor are put to sleep, not cancelled
  // (issue 27; InferenceSleepTest).
  // (A burst whose job was still pending or starting when it was chosen is cancelled instead.)
  EXPECT_TRUE(Eventually([&] {
    return Count(model, "ready") == 1 &&
           Count(model, "sleeping") + 1 == static_cast<int>(Replicas()[model].size());
  }, 120s))
      << Bmas({"inference", "list"}).out;
  const std::vector<Replica> rested = Replicas()[model];
  for (const Replica& r : rested) EXPECT_EQ(r.floor, r.state == "ready") << r.job_id;

  int streams = 0, refused = 0;
  for (const ClientLog& log : logs) {
    streams += log.streams;
    refused += log.refused;
    EXPECT_EQ(log.failures, 0) << log.last_failure;
    EXPECT_EQ(log.wrong_tokens, 0) << log.last_failure;
  }
  EXPECT_GT(streams, 20);
  // While training takes the bursts' GPUs, a request may be refused before it starts (a loaded
  // CI machine saw one); a client tries it again. More than one per client is a fault.
  EXPECT_LE(refused, static_cast<int>(logs.size())) << refused << " requests refused";
  const std::string metrics_url = [&] {
    std::smatch m;
    std::regex_search(up_->stdout_text(), m, std::regex(R"(operator metrics: http://127\.0\.0\.1:([0-9]+))"));
    return m.empty() ? std::string() : m[1].str();
  }();
  ASSERT_FALSE(metrics_url.empty());
  HttpClient metrics(static_cast<uint16_t>(std::stoi(metrics_url)));
  metrics.SetDefaultHeader("Authorization", OperatorBearerOf(state_));
  auto text = metrics.Get("/metrics");
  ASSERT_TRUE(text);
  EXPECT_GE(MetricValue(text->body, "bmas_gateway_resumed_streams_total").value_or(0), 1)
      << "no stream was cut by the preemption: the test proves nothing";
}

// Issue 27: sleep mode in the controller. A replica above the floor that load no longer needs,
// while no other job waits for GPUs, is drained in the gateway and put to sleep: its Slurm job
// keeps running, the gateway sends it nothing. When load rises it is woken (no new job), and
// serves; no client request fails on the way. The log of the controller tells how long
// breach-to-serving took by a cold start (the first scale-up) and by a wake (the second).
class InferenceSleepTest : public InferenceTest {
 protected:
  void SetUp() override {
    // A short load average, so that the test need not wait a minute for the load to fall.
    up_extra_ = "replica_load_window_s = 5\nreplica_breach_settle_s = 5\n";
    InferenceTest::SetUp();
  }

  std::vector<Replica> In(const std::string& model, const std::string& state) {
    std::vector<Replica> out;
    const auto all = Replicas();  // kept: a range-for over a temporary's member dangles
    auto it = all.find(model);
    if (it == all.end()) return out;
    for (const Replica& r : it->second) {
      if (r.state == state) out.push_back(r);
    }
    return out;
  }
};

TEST_F(InferenceSleepTest, AnIdleReplicaSleepsOnItsGpuAndWakesForLoadWithoutAFailedRequest) {
  const std::string model = "acme/sleepy";
  // One request at a time per replica; a cold start of 5 s (a real vLLM takes 15-60 s).
  Bmas({"inference", "deploy", model, "--min", "1", "--max", "2", "--profile", "llama-3.1-8b-h100",
        "--command",
        "{bmas} engine --host {host} --port {port} --model {model} --profile {profile} "
        "--max-num-seqs 1 --startup-s 5 --shutdown-timeout 0"});
  ASSERT_TRUE(Eventually([&] { return Count(model, "ready") == 1; }, 60s))
      << Bmas({"inference", "list"}).out;

  std::vector<ClientLog> logs;
  auto load = [&](int clients) {
    std::atomic<bool> stop = false;
    std::vector<ClientLog> phase(clients);
    std::vector<std::thread> threads;
    for (ClientLog& log : phase) {
      threads.emplace_back(
          [&, p = gateway_port_, k = key_] { StreamUntil(p, k, model, 40, stop, log); });
    }
    const auto start = std::chrono::steady_clock::now();
    const bool scaled = Eventually([&] { return Count(model, "ready") == 2; }, 120s);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Some load on both replicas before it ends.
    std::this_thread::sleep_for(3s);
    stop = true;
    for (auto& t : threads) t.join();
    logs.insert(logs.end(), phase.begin(), phase.end());
    EXPECT_TRUE(scaled) << Bmas({"inference", "list"}).out;
    return took;
  };

  // Load rises: a second replica, by a cold start (no replica sleeps yet).
  const double cold_s = load(2);
  const std::vector<Replica> burst = In(model, "ready");
  int64_t burst_job = 0;
  for (const Replica& r : burst) {
    if (!r.floor) burst_job = r.job_id;
  }
  ASSERT_NE(burst_job, 0) << Bmas({"inference", "list"}).out;

  // Load falls: the burst replica goes to sleep, its job still running; the floor stays awake.
  ASSERT_TRUE(Eventually([&] { return Count(model, "sleeping") == 1; }, 120s))
      << Bmas({"inference", "list"}).out;
  const std::vector<Replica> asleep = In(model, "sleeping");
  EXPECT_EQ(asleep[0].job_id, burst_job);
  EXPECT_FALSE(asleep[0].floor);
  EXPECT_EQ(Count(model, "ready"), 1);
  EXPECT_THAT(ShowJob(burst_job), HasSubstr("JobState=RUNNING"));
  EXPECT_THAT(Bmas({"inference", "list"}).out, HasSubstr("asleep"));
  // Not routed to: the gateway does not list it, and requests are answered (an engine asleep
  // would refuse them with 503).
  std::smatch port;
  ASSERT_TRUE(std::regex_search(up_->stdout_text(), port,
                                std::regex(R"(operator metrics: http://127\.0\.0\.1:([0-9]+))")));
  HttpClient ops(static_cast<uint16_t>(std::stoi(port[1])));
  ops.SetDefaultHeader("Authorization", OperatorBearerOf(state_));
  auto view = ops.Get("/load");
  ASSERT_TRUE(view) << view.error().message;
  EXPECT_THAT(view->body, ::testing::Not(HasSubstr(asleep[0].url))) << view->body;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Complete(model, 2).status, 200);

  // Load rises again: the sleeping replica is woken, and no job is submitted.
  const double wake_s = load(2);
  const std::vector<Replica> after = Replicas()[model];
  EXPECT_EQ(after.size(), 2u) << Bmas({"inference", "list"}).out;
  bool woken = false;
  for (const Replica& r : after) woken |= r.job_id == burst_job && r.state == "ready";
  EXPECT_TRUE(woken) << Bmas({"inference", "list"}).out;
  EXPECT_THAT(ShowJob(burst_job), HasSubstr("Restarts=0"));

  int streams = 0;
  for (const ClientLog& log : logs) {
    streams += log.streams;
    EXPECT_EQ(log.failures, 0) << log.last_failure;
    EXPECT_EQ(log.wrong_tokens, 0) << log.last_failure;
    EXPECT_EQ(log.refused, 0);
  }
  EXPECT_GT(streams, 4);
  // The measure (no assertion on time): load rising to two replicas ready, cold and by wake,
  // and the controller's own breach-to-serving lines.
  std::string lines;
  std::ifstream controller_log(state_ + "/logs/controller.log");
  for (std::string line; std::getline(controller_log, line);) {
    if (line.find("serves") != std::string::npos && line.find(model) != std::string::npos) {
      lines += line + "\n";
    }
  }
  fmt::print("sleep mode: load rising to 2 replicas ready: cold start {:.1f} s, wake {:.1f} s\n{}",
             cold_s, wake_s, lines);
  RecordProperty("cold_start_s", fmt::format("{:.1f}", cold_s));
  RecordProperty("wake_s", fmt::format("{:.1f}", wake_s));
}

// Issue 26: a deployment on MIG slices (`--gpus-per-replica 3g.40gb`), with `bmas up` on the
// local cluster with MIG layouts ([up] cluster = examples/cluster-local-mig.toml). The
// controller's replica job asks Slurm for a 3g.40gb slice and gets one; the engine in it runs
// its profile scaled to the slice; the gateway routes to it.
class InferenceMigTest : public InferenceTest {
 protected:
  void SetUp() override {
    up_extra_ = fmt::format("cluster = \"{}/examples/cluster-local-mig.toml\"\n", BMAS_SOURCE_DIR);
    InferenceTest::SetUp();
  }
};

TEST_F(InferenceMigTest, AReplicaRunsOnASliceWithItsEngineScaledToIt) {
  CommandOutput deployed = Bmas({"inference", "deploy", "acme/slice", "--min", "1", "--max", "1",
                                 "--gpus-per-replica", "3g.40gb", "--profile", "instant"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.err;
  EXPECT_THAT(deployed.out, HasSubstr("1 MIG slice 3g.40gb"));
  ASSERT_TRUE(Eventually([&] { return Count("acme/slice", "ready") == 1; }, 90s))
      << Bmas({"inference", "list"}).out << up_->StderrText();
  const Replica replica = Replicas()["acme/slice"].front();
  EXPECT_THAT(ShowJobDetail(replica.job_id), HasSubstr("gpu:3g.40gb:1(IDX:"));
  std::smatch port;
  ASSERT_TRUE(std::regex_search(replica.url, port, std::regex(":([0-9]+)$"))) << replica.url;
  HttpClient engine(static_cast<uint16_t>(std::stoi(port[1])));
  auto metrics = engine.Get("/metrics");
  ASSERT_TRUE(metrics) << metrics.error().message;
  EXPECT_THAT(metrics->body, HasSubstr("profile=\"instant@3g.40gb\""));
  HttpResponse answer = Complete("acme/slice", 2);
  EXPECT_EQ(answer.status, 200) << answer.body;
  EXPECT_THAT(answer.body, HasSubstr("\"completion_tokens\":2"));
}

}  // namespace
}  // namespace bmas::testing
