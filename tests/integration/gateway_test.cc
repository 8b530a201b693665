// Integration tests of `bmas gateway`: real `bmas engine` backends and a real gateway on
// loopback ports, users and keys made with the real CLI in a fresh state dir, spoken to over
// HTTP as an OpenAI client would. Every process is stopped at the end of its test.
//
// Changes made with the CLI reach a running gateway through its once-a-second store refresh,
// and backends through its once-a-second health checks: tests poll for their effect (a few
// seconds at most) instead of sleeping.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "engine_process.h"
#include "http_client.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr std::string_view kModel = "meta-llama/Llama-3.1-8B-Instruct";
constexpr std::string_view kOtherModel = "acme/other-model";

const std::vector<std::string> kInstant = {"--profile", "instant"};
// Real-time steps of about 4.4 ms: 200 output tokens take about a second.
const std::vector<std::string> kLlama = {"--profile", "llama-3.1-8b-h100"};

// ---- Request bodies ---------------------------------------------------------------------

std::string CompletionBody(std::string_view prompt, int max_tokens, std::string_view extra = "",
                           std::string_view model = kModel) {
  return fmt::format(R"({{"model":{},"prompt":{},"max_tokens":{}{}{}}})", Quote(model),
                     Quote(prompt), max_tokens, extra.empty() ? "" : ",", extra);
}

std::string ChatBody(std::string_view content, int max_tokens, std::string_view extra = "") {
  return fmt::format(
      R"({{"model":{},"messages":[{{"role":"system","content":"be brief"}},{{"role":"user","content":{}}}],"max_tokens":{}{}{}}})",
      Quote(kModel), Quote(content), max_tokens, extra.empty() ? "" : ",", extra);
}

constexpr std::string_view kStream = R"("stream":true)";
constexpr std::string_view kStreamWithUsage =
    R"("stream":true,"stream_options":{"include_usage":true})";

HeaderList Bearer(const std::string& key) { return {{"Authorization", "Bearer " + key}}; }

// The model an engine started with `args` serves.
std::string ModelOf(const std::vector<std::string>& args) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--model") return args[i + 1];
  }
  return std::string(kModel);
}

// ---- Streams ----------------------------------------------------------------------------

// How a streamed response ended, read to its end on another thread.
struct StreamOutcome {
  int status = 0;
  bool clean_end = false;  // the response ended as HTTP says (no reset, no timeout)
  std::string last_event;  // "[DONE]", or the data of the last event
  int content_events = 0;  // events with a non-empty choices array
  std::string failure;     // what went wrong in transport, if anything
};

StreamOutcome ReadStream(uint16_t port, const std::string& target, const std::string& body,
                         const std::string& key) {
  StreamOutcome out;
  auto s = SseStream::Open(port, target, body, std::chrono::seconds(20), Bearer(key));
  if (!s) {
    out.failure = s.error().message;
    return out;
  }
  out.status = (*s)->status();
  if (out.status != 200) {
    auto body_read = (*s)->ReadBody();
    out.clean_end = body_read.has_value();
    out.last_event = body_read ? *body_read : body_read.error().message;
    return out;
  }
  while (true) {
    auto next = (*s)->Next();
    if (!next) {
      out.failure = next.error().message;
      return out;
    }
    if (!*next) break;
    out.last_event = **next;
    if (out.last_event != "[DONE]") {
      rapidjson::Document chunk;
      chunk.Parse(out.last_event.c_str());
      if (!chunk.HasParseError() && chunk.IsObject() && chunk.HasMember("choices") &&
          chunk["choices"].IsArray() && chunk["choices"].Size() > 0) {
        ++out.content_events;
      }
    }
  }
  out.clean_end = true;
  return out;
}

// True when `event` is {"error": {...}} with a message.
bool IsErrorEvent(const std::string& event) {
  rapidjson::Document doc;
  doc.Parse(event.c_str());
  if (doc.HasParseError()) return false;
  const auto& e = At(doc, "error");
  return At(e, "message").IsString() && At(e, "message").GetStringLength() > 0;
}

// ---- Fixture ----------------------------------------------------------------------------

struct ClusterOptions {
  std::vector<std::vector<std::string>> engines = {kInstant, kInstant};  // each engine's flags
  std::vector<std::string> gateway_args;
  // More users, with their `bmas user add` flags, made before the gateway starts (keys in
  // keys_): a user added while it runs has their limits from the next store refresh on.
  std::vector<std::pair<std::string, std::vector<std::string>>> users;
  int command_line_backends = -1;  // how many engines (the first ones) get --backend; -1: all
};

class GatewayTest : public ::testing::Test {
 protected:
  // Starts the engines, makes user "alice" with a key (key_) and o.users, starts the gateway on
  // a fresh state dir and waits until every backend given on its command line passed its
  // health check.
  void StartCluster(const ClusterOptions& o = {}) {
    for (const auto& args : o.engines) {
      auto engine = EngineProcess::Start(args);
      ASSERT_TRUE(engine) << engine.error().message;
      engines_.push_back(std::move(*engine));
    }
    // The CLI makes the store before the gateway opens it: concurrent first opens of a state
    // dir can fail (UserCliConcurrencyTest).
    ASSERT_NO_FATAL_FAILURE(key_ = AddUser("alice"));
    for (const auto& [name, flags] : o.users) {
      ASSERT_NO_FATAL_FAILURE(keys_[name] = AddUser(name, flags));
    }
    const size_t given = o.command_line_backends < 0 ? engines_.size()
                                                     : static_cast<size_t>(o.command_line_backends);
    std::vector<std::string> args;
    for (size_t i = 0; i < given; ++i) {
      args.push_back("--backend");
      args.push_back(engines_[i]->url());
    }
    args.insert(args.end(), o.gateway_args.begin(), o.gateway_args.end());
    auto gateway = GatewayProcess::Start(args, Env());
    ASSERT_TRUE(gateway) << gateway.error().message;
    gateway_ = std::move(*gateway);
    client_ = std::make_unique<HttpClient>(gateway_->port());
    client_->SetDefaultHeader("Authorization", "Bearer " + key_);

    std::set<std::string> models;
    for (size_t i = 0; i < given; ++i) models.insert(ModelOf(o.engines[i]));
    const bool ready = Eventually(
        [&] {
          std::set<std::string> listed = ListedModels();
          for (size_t i = 0; i < given; ++i) {
            if (BackendHealthy(engines_[i]->url()) != 1) return false;
          }
          return listed == models;
        },
        10s);
    ASSERT_TRUE(ready) << "the gateway never listed " << ::testing::PrintToString(models)
                       << " with every backend healthy; stderr:\n"
                       << gateway_->process().StderrText();
  }

  void TearDown() override {
    if (gateway_ != nullptr && gateway_->process().running()) {
      ExitStatus s = gateway_->process().Stop(10s);
      EXPECT_TRUE(s.Success()) << "gateway " << s.ToString() << "; stderr:\n"
                               << gateway_->process().StderrText();
    }
    for (auto& engine : engines_) {
      if (!engine->process().running()) continue;
      ExitStatus s = engine->process().Stop(10s);
      EXPECT_TRUE(s.Success()) << "engine " << s.ToString() << "; stderr:\n"
                               << engine->process().StderrText();
    }
  }

  EnvList Env() const { return {{"BMAS_STATE_DIR", dir_.path() + "/state"}}; }

  // `bmas ARGS...` on this test's state dir; fails the test unless it exits 0.
  CliRun Cli(const std::vector<std::string>& args) {
    auto r = RunBmas(args, Env());
    if (!r) {
      ADD_FAILURE() << r.error().message;
      return CliRun{};
    }
    EXPECT_TRUE(r->status.Success())
        << "bmas " << ::testing::PrintToString(args) << ": " << r->status.ToString() << "\n"
        << r->err;
    return *r;
  }

  // Adds user `name` with `limits` (CLI flags) and returns a new key of theirs.
  std::string AddUser(const std::string& name, std::vector<std::string> limits = {}) {
    std::vector<std::string> args = {"user", "add", name};
    args.insert(args.end(), limits.begin(), limits.end());
    Cli(args);
    return CreateKey(name);
  }

  std::string CreateKey(const std::string& name) {
    std::string out = Cli({"key", "create", name}).out;
    EXPECT_THAT(out, StartsWith("sk-bmas-"));
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  // `bmas usage --json`: one row per (user, model, backend).
  rapidjson::Document Usage() { return ParseJson(Cli({"usage", "--json"}).out); }

  // A transport failure fails the test and returns status 0.
  static HttpResponse Unwrap(Result<HttpResponse> r) {
    if (!r) {
      ADD_FAILURE() << r.error().message;
      return HttpResponse{};
    }
    return std::move(*r);
  }
  // As alice, over one kept-alive connection.
  HttpResponse Post(std::string_view target, std::string body) {
    return Unwrap(client_->Post(target, std::move(body)));
  }
  // With exactly `headers` (no Authorization unless given), on a new connection.
  HttpResponse PostWith(const HeaderList& headers, std::string_view target, std::string body) {
    HttpClient c(gateway_->port());
    RequestOptions options;
    options.headers = headers;
    return Unwrap(c.Request(http::verb::post, target, std::move(body), options));
  }
  HttpResponse PostAs(const std::string& key, std::string_view target, std::string body) {
    return PostWith(Bearer(key), target, std::move(body));
  }

  // Opens a stream as the holder of `key`; a failure fails the test and returns nullptr.
  std::unique_ptr<SseStream> OpenStream(const std::string& key, std::string_view target,
                                        std::string body) {
    auto s = SseStream::Open(gateway_->port(), target, std::move(body), 20s, Bearer(key));
    if (!s) {
      ADD_FAILURE() << s.error().message;
      return nullptr;
    }
    EXPECT_EQ((*s)->status(), 200);
    EXPECT_THAT((*s)->content_type(), StartsWith("text/event-stream"));
    return std::move(*s);
  }

  static std::string MetricsOf(uint16_t port) {
    HttpClient c(port);
    auto r = c.Get("/metrics");
    if (!r || r->status != 200) return "";
    return r->body;
  }
  // The value of `series` on engine `i`, or -1 when it is missing.
  double EngineMetric(size_t i, std::string_view name, std::string_view extra_labels = "",
                      std::string_view model = kModel) {
    std::string series = fmt::format("{}{{model_name={}{}{}}}", name, Quote(model),
                                     extra_labels.empty() ? "" : ",", extra_labels);
    return MetricValue(MetricsOf(engines_[i]->port()), series).value_or(-1);
  }
  // Completed requests on engine `i`, whatever their finish reason.
  double EngineRequests(size_t i, std::string_view model = kModel) {
    double sum = 0;
    for (const char* reason : {"length", "stop", "abort"}) {
      sum += std::max(0.0, EngineMetric(i, "vllm:request_success_total",
                                        fmt::format(R"(finished_reason="{}")", reason), model));
    }
    return sum;
  }
  struct Totals {
    int64_t requests = 0, prompt = 0, completion = 0;
    bool operator==(const Totals&) const = default;
  };
  // Engine `e`'s own counts of requests, prompt tokens and generated tokens.
  Totals EngineTotals(size_t e) {
    return Totals{static_cast<int64_t>(EngineRequests(e)),
                  static_cast<int64_t>(EngineMetric(e, "vllm:prompt_tokens_total")),
                  static_cast<int64_t>(EngineMetric(e, "vllm:generation_tokens_total"))};
  }
  // `bmas usage --json` summed by backend and by user (`raw`: its output); false when it
  // could not be read.
  bool UsageTotals(std::map<std::string, Totals>& by_backend,
                   std::map<std::string, Totals>& by_user, std::string& raw) {
    by_backend.clear();
    by_user.clear();
    auto r = RunBmas({"usage", "--json"}, Env());
    if (!r || !r->status.Success()) return false;
    raw = r->out;
    rapidjson::Document rows;
    rows.Parse(r->out.c_str());
    if (rows.HasParseError() || !rows.IsArray()) return false;
    for (const auto& row : rows.GetArray()) {
      for (auto* t : {&by_backend[Str(At(row, "backend"))], &by_user[Str(At(row, "user"))]}) {
        t->requests += Int(At(row, "requests"));
        t->prompt += Int(At(row, "prompt_tokens"));
        t->completion += Int(At(row, "completion_tokens"));
      }
    }
    return true;
  }
  // The gateway's bmas_gateway_backend_<name>{backend="url"}, or nullopt when not listed.
  std::optional<double> BackendGauge(std::string_view name, const std::string& url) {
    return MetricValue(gateway_->OperatorGet("/metrics"),
                       fmt::format("bmas_gateway_backend_{}{{backend={}}}", name, Quote(url)));
  }
  std::optional<double> BackendHealthy(const std::string& url) {
    return BackendGauge("healthy", url);
  }
  std::optional<double> GatewayMetric(std::string_view series) {
    return MetricValue(gateway_->OperatorGet("/metrics"), series);
  }

  std::set<std::string> ListedModels() {
    auto r = client_->Get("/v1/models");
    std::set<std::string> ids;
    if (!r || r->status != 200) return ids;
    rapidjson::Document doc;
    doc.Parse(r->body.c_str());
    const auto& data = At(doc, "data");
    for (int i = 0; data.IsArray() && i < static_cast<int>(data.Size()); ++i) {
      ids.insert(Str(At(At(data, i), "id")));
    }
    return ids;
  }

  // Kills engine `i` at once, as a crash would, and reaps it.
  void Kill(size_t i) {
    engines_[i]->process().Signal(SIGKILL);
    ASSERT_TRUE(engines_[i]->process().Wait(10s).has_value());
  }

  TempDir dir_;
  std::vector<std::unique_ptr<EngineProcess>> engines_;
  std::unique_ptr<GatewayProcess> gateway_;
  std::unique_ptr<HttpClient> client_;       // sends alice's key
  std::string key_;                          // alice's
  std::map<std::string, std::string> keys_;  // ClusterOptions::users' keys
};

class InstantGatewayTest : public GatewayTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(StartCluster()); }
};

// ---- Authentication -----------------------------------------------------------------------

TEST_F(InstantGatewayTest, MissingOrWrongKeyIs401) {
  const std::string body = CompletionBody("hello", 3);
  const std::vector<std::pair<std::string, HeaderList>> cases = {
      {"no header", {}},
      {"wrong key", Bearer("sk-bmas-000000000000-" + std::string(48, '0'))},
      {"a key id only", Bearer(key_.substr(0, 20))},
      {"not Bearer", {{"Authorization", "Basic " + key_}}},
      {"empty Bearer", {{"Authorization", "Bearer "}}},
  };
  for (const auto& [name, headers] : cases) {
    SCOPED_TRACE(name);
    HttpResponse r = PostWith(headers, "/v1/completions", body);
    ExpectError(r, 401, std::nullopt);
    EXPECT_EQ(Str(At(At(ParseJson(r.body), "error"), "type")), "AuthenticationError");
    HttpClient c(gateway_->port());
    RequestOptions options;
    options.headers = headers;
    ExpectError(Unwrap(c.Request(http::verb::get, "/v1/models", "", options)), 401, std::nullopt);
  }
  // The right key passes, so the 401s above are about the key.
  EXPECT_EQ(PostWith(Bearer(key_), "/v1/completions", body).status, 200);
}

TEST_F(InstantGatewayTest, KeyCreatedWhileRunningWorksAndRevokedKeyStopsWithinSeconds) {
  const std::string body = CompletionBody("hello", 3);
  ASSERT_EQ(PostAs(key_, "/v1/completions", body).status, 200);

  // A new key works on its first request: the gateway looks unknown keys up in the store.
  const std::string second = CreateKey("alice");
  ASSERT_NE(second, key_);
  EXPECT_EQ(PostAs(second, "/v1/completions", body).status, 200);

  rapidjson::Document keys = ParseJson(Cli({"key", "list", "alice", "--json"}).out);
  ASSERT_TRUE(keys.IsArray());
  ASSERT_EQ(keys.Size(), 2u);
  std::string first_id;
  for (const auto& k : keys.GetArray()) {
    if (key_.find(Str(At(k, "id"))) != std::string::npos) first_id = Str(At(k, "id"));
  }
  ASSERT_FALSE(first_id.empty()) << "no listed id is part of " << key_;
  Cli({"key", "revoke", first_id});

  int last = 0;
  EXPECT_TRUE(
      Eventually([&] { return (last = PostAs(key_, "/v1/completions", body).status) == 401; }, 3s))
      << "a revoked key still gets " << last;
  ExpectError(PostAs(key_, "/v1/completions", body), 401, std::nullopt);
  // The other key of the same user is untouched.
  EXPECT_EQ(PostAs(second, "/v1/completions", body).status, 200);
}

TEST_F(InstantGatewayTest, RemovedUsersKeyIsRejected) {
  const std::string bob = AddUser("bob");
  const std::string body = CompletionBody("hello", 3);
  ASSERT_EQ(PostAs(bob, "/v1/completions", body).status, 200);
  Cli({"user", "remove", "bob"});
  int last = 0;
  EXPECT_TRUE(
      Eventually([&] { return (last = PostAs(bob, "/v1/completions", body).status) == 401; }, 3s))
      << "a removed user's key still gets " << last;
  EXPECT_EQ(PostAs(key_, "/v1/completions", body).status, 200);
}

// ---- Errors ---------------------------------------------------------------------------------

TEST_F(InstantGatewayTest, BadRequestsGetOpenAIErrors) {
  struct Case {
    std::string name;
    std::string target;
    std::string body;
    int status;
    std::optional<std::string> param;
  };
  const std::vector<Case> cases = {
      {"unknown model", "/v1/completions", CompletionBody("hi", 3, "", "no/such-model"), 404,
       "model"},
      {"unknown model, chat", "/v1/chat/completions",
       R"({"model":"no/such-model","messages":[{"role":"user","content":"hi"}]})", 404, "model"},
      {"invalid JSON", "/v1/completions", R"({"model": "m", "prompt": )", 400, std::nullopt},
      {"not an object", "/v1/completions", "[1, 2]", 400, std::nullopt},
      {"no model", "/v1/completions", R"({"prompt":"hi","max_tokens":3})", 400, "model"},
      {"stream not a boolean", "/v1/completions", CompletionBody("hi", 3, R"("stream":"yes")"), 400,
       "stream"},
      // The backend's own validation errors are relayed as they are.
      {"max_tokens 0, from the backend", "/v1/completions", CompletionBody("hi", 0), 400,
       "max_tokens"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    HttpResponse r = Post(c.target, c.body);
    ExpectError(r, c.status, c.param);
  }
  HttpResponse unknown = Post("/v1/completions", CompletionBody("hi", 3, "", "no/such-model"));
  EXPECT_THAT(Str(At(At(ParseJson(unknown.body), "error"), "message")), HasSubstr("no/such-model"));
  EXPECT_EQ(Str(At(At(ParseJson(unknown.body), "error"), "type")), "NotFoundError");
  // None of them reached an engine.
  EXPECT_EQ(EngineRequests(0) + EngineRequests(1), 0);
}

TEST_F(GatewayTest, BodyOverMaxBodyBytesGets413NotAReset) {
  constexpr size_t kLimit = 65536;
  ClusterOptions o;
  o.gateway_args = {"--max-body-bytes", std::to_string(kLimit)};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  // Far more than the socket buffers hold, so that the gateway must read what it refuses.
  const std::string big = CompletionBody(std::string(4 << 20, 'x'), 1);
  for (bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "chunked" : "Content-Length");
    HttpClient fresh(gateway_->port());
    RequestOptions options;
    options.chunked = chunked;
    options.headers = Bearer(key_);
    // A write failure (broken pipe, reset) fails here, as would a read failure.
    auto r = fresh.Request(http::verb::post, "/v1/completions", big, options);
    ASSERT_TRUE(r) << r.error().message;
    ExpectError(*r, 413, "body");
    EXPECT_FALSE(r->keep_alive);
  }
  // A body of exactly the limit passes.
  std::string body = CompletionBody("at the limit", 2);
  body.insert(body.size() - 1, kLimit - body.size(), ' ');
  ASSERT_EQ(body.size(), kLimit);
  EXPECT_EQ(Post("/v1/completions", body).status, 200);
}

// ---- Limits ---------------------------------------------------------------------------------

TEST_F(GatewayTest, RpmLimitIs429WithRetryAfter) {
  ClusterOptions o;
  o.users = {{"carol", {"--rpm", "2"}}};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  const std::string carol = keys_["carol"];
  const std::string body = CompletionBody("limited", 3);
  EXPECT_EQ(PostAs(carol, "/v1/completions", body).status, 200);
  EXPECT_EQ(PostAs(carol, "/v1/completions", body).status, 200);
  HttpResponse r = PostAs(carol, "/v1/completions", body);
  ExpectError(r, 429, "rpm");
  EXPECT_EQ(Str(At(At(ParseJson(r.body), "error"), "type")), "RateLimitError");
  EXPECT_THAT(Str(At(At(ParseJson(r.body), "error"), "message")), HasSubstr("rpm"));
  std::optional<std::string> retry_after = r.Header("Retry-After");
  ASSERT_TRUE(retry_after.has_value()) << "no Retry-After header";
  ASSERT_FALSE(retry_after->empty());
  ASSERT_TRUE(std::all_of(retry_after->begin(), retry_after->end(), [](char c) {
    return c >= '0' && c <= '9';
  })) << *retry_after;
  EXPECT_GT(std::stoi(*retry_after), 0);
  EXPECT_LE(std::stoi(*retry_after), 60);
  // A stream is refused the same way, before it starts.
  auto s = SseStream::Open(gateway_->port(), "/v1/completions",
                           CompletionBody("limited", 3, kStream), 10s, Bearer(carol));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ((*s)->status(), 429);
  // Limits are per user: alice is not limited.
  EXPECT_EQ(PostAs(key_, "/v1/completions", body).status, 200);
  // Two requests reached the engines, not four.
  EXPECT_TRUE(Eventually([&] { return EngineRequests(0) + EngineRequests(1) == 3; }, 2s));
}

TEST_F(GatewayTest, LimitChangesTakeEffectLive) {
  ClusterOptions o;
  o.users = {{"carol", {"--rpm", "1"}}};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  const std::string carol = keys_["carol"];
  const std::string body = CompletionBody("limited", 3);
  ASSERT_EQ(PostAs(carol, "/v1/completions", body).status, 200);
  ASSERT_EQ(PostAs(carol, "/v1/completions", body).status, 429);

  Cli({"user", "set", "carol", "--unset", "rpm"});
  int last = 0;
  EXPECT_TRUE(
      Eventually([&] { return (last = PostAs(carol, "/v1/completions", body).status) == 200; }, 3s))
      << "still " << last << " after the rpm limit was removed";

  Cli({"user", "set", "carol", "--rpm", "1"});
  EXPECT_TRUE(
      Eventually([&] { return (last = PostAs(carol, "/v1/completions", body).status) == 429; }, 3s))
      << "still " << last << " after an rpm limit of 1 was set again";
}

// A user made while the gateway runs gets their limits from their first request: their key is
// found in the store at once, so their limits must be too.
TEST_F(InstantGatewayTest, LimitsApplyFromTheFirstRequestOfAUserAddedWhileRunning) {
  const std::string erin = AddUser("erin", {"--max-concurrent", "0"});
  HttpResponse r = PostAs(erin, "/v1/completions", CompletionBody("limited", 2));
  ExpectError(r, 429, "max_concurrent");
}

TEST_F(GatewayTest, MaxConcurrentIs429WhileTheUsersSlotsAreTaken) {
  ClusterOptions o;
  o.engines = {kLlama, kLlama};
  o.users = {{"dave", {"--max-concurrent", "1"}}};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  const std::string dave = keys_["dave"];
  const std::string probe = CompletionBody("probe", 2);

  auto held = OpenStream(dave, "/v1/completions", CompletionBody("hold a slot", 2000, kStream));
  ASSERT_NE(held, nullptr);
  auto first = held->Next();
  ASSERT_TRUE(first && first->has_value()) << "no first event";

  HttpResponse r = PostAs(dave, "/v1/completions", probe);
  ExpectError(r, 429, "max_concurrent");
  EXPECT_THAT(Str(At(At(ParseJson(r.body), "error"), "message")), HasSubstr("max_concurrent"));
  std::optional<std::string> retry_after = r.Header("Retry-After");
  ASSERT_TRUE(retry_after.has_value());
  EXPECT_GT(std::atoi(retry_after->c_str()), 0) << *retry_after;
  // Another user is not held back.
  EXPECT_EQ(PostAs(key_, "/v1/completions", probe).status, 200);

  // Ending the stream frees the slot.
  held->Close();
  int last = 0;
  EXPECT_TRUE(
      Eventually([&] { return (last = PostAs(dave, "/v1/completions", probe).status) == 200; }, 5s))
      << "still " << last << " after the held stream was closed";
}

// ---- Streaming and usage ------------------------------------------------------------------

TEST_F(InstantGatewayTest, NonStreamingCompletionsHaveExactUsage) {
  HttpResponse r = Post("/v1/completions", CompletionBody(PromptOfTokens(10), 12));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.content_type, StartsWith("application/json"));
  auto doc = ParseJson(r.body);
  EXPECT_EQ(Str(At(doc, "object")), "text_completion");
  EXPECT_EQ(Str(At(doc, "model")), kModel);
  EXPECT_EQ(Str(At(At(At(doc, "choices"), 0), "finish_reason")), "length");
  const auto& usage = At(doc, "usage");
  EXPECT_EQ(Int(At(usage, "prompt_tokens")), 10);
  EXPECT_EQ(Int(At(usage, "completion_tokens")), 12);
  EXPECT_EQ(Int(At(usage, "total_tokens")), 22);

  HttpResponse chat = Post("/v1/chat/completions", ChatBody("hello there", 9));
  ASSERT_EQ(chat.status, 200) << chat.body;
  auto c = ParseJson(chat.body);
  EXPECT_EQ(Str(At(c, "object")), "chat.completion");
  EXPECT_EQ(Str(At(At(At(At(c, "choices"), 0), "message"), "role")), "assistant");
  EXPECT_GT(Int(At(At(c, "usage"), "prompt_tokens")), 0);
  EXPECT_EQ(Int(At(At(c, "usage"), "completion_tokens")), 9);
}

// A relayed answer says where its time went (W3C Server Timing): the gateway's own, the fair
// queue's and the backend's, whole or streamed.
TEST_F(InstantGatewayTest, RelayedAnswersSayTheGatewaysOwnTimeInServerTiming) {
  const std::regex timing(
      R"(gw;dur=(\d+\.\d{3}), queue;dur=(\d+\.\d{3}), upstream;dur=(\d+\.\d{3}))");
  HttpResponse r = Post("/v1/completions", CompletionBody(PromptOfTokens(10), 4));
  ASSERT_EQ(r.status, 200) << r.body;
  std::optional<std::string> whole = r.Header("Server-Timing");
  ASSERT_TRUE(whole.has_value()) << "no Server-Timing on a whole answer";
  std::smatch m;
  ASSERT_TRUE(std::regex_match(*whole, m, timing)) << *whole;
  EXPECT_GT(std::stod(m[3].str()), 0) << "the backend's time is not in upstream: " << *whole;

  auto s = OpenStream(key_, "/v1/completions", CompletionBody(PromptOfTokens(6), 3, kStream));
  ASSERT_NE(s, nullptr);
  std::optional<std::string> streamed = FindHeader(s->headers(), "Server-Timing");
  ASSERT_TRUE(streamed.has_value()) << "no Server-Timing on a stream";
  EXPECT_TRUE(std::regex_match(*streamed, timing)) << *streamed;
  ASSERT_TRUE(s->ReadAll());

  // Refused before any backend: no timing to give.
  HttpResponse refused = Post("/v1/completions", R"({"prompt":"no model"})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_FALSE(refused.Header("Server-Timing").has_value());
}

TEST_F(InstantGatewayTest, StreamsAreRelayedWithUsageOnlyWhenAskedFor) {
  struct Case {
    std::string name;
    std::string target;
    std::string extra;
    bool usage_expected;
  };
  const std::vector<Case> cases = {
      {"completion", "/v1/completions", std::string(kStream), false},
      {"completion, include_usage false", "/v1/completions",
       R"("stream":true,"stream_options":{"include_usage":false})", false},
      {"completion, include_usage", "/v1/completions", std::string(kStreamWithUsage), true},
      {"chat", "/v1/chat/completions", std::string(kStream), false},
      {"chat, include_usage", "/v1/chat/completions", std::string(kStreamWithUsage), true},
  };
  constexpr int kMaxTokens = 7;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const bool chat = c.target == "/v1/chat/completions";
    const std::string body = chat ? ChatBody("stream to me", kMaxTokens, c.extra)
                                  : CompletionBody(PromptOfTokens(6), kMaxTokens, c.extra);
    auto s = OpenStream(key_, c.target, body);
    ASSERT_NE(s, nullptr);
    auto events = s->ReadAll();
    ASSERT_TRUE(events) << events.error().message;
    ASSERT_GE(events->size(), 2u);
    EXPECT_EQ(events->back(), "[DONE]");
    int content = 0, usage_chunks = 0;
    std::string finish;
    for (size_t i = 0; i + 1 < events->size(); ++i) {
      auto chunk = ParseJson((*events)[i]);
      EXPECT_EQ(Str(At(chunk, "object")), chat ? "chat.completion.chunk" : "text_completion");
      const auto& usage = At(chunk, "usage");
      if (At(chunk, "choices").IsArray() && At(chunk, "choices").Size() == 0) {
        ++usage_chunks;
        EXPECT_EQ(i + 2, events->size()) << "the usage chunk is not the last before [DONE]";
        EXPECT_EQ(Int(At(usage, "completion_tokens")), kMaxTokens);
        if (!chat) {
          EXPECT_EQ(Int(At(usage, "prompt_tokens")), 6);
        }
        continue;
      }
      EXPECT_TRUE(usage.IsNull()) << "usage in a content chunk: " << (*events)[i];
      const auto& choice = At(At(chunk, "choices"), 0);
      const std::string text = chat ? (At(At(choice, "delta"), "content").IsString()
                                           ? Str(At(At(choice, "delta"), "content"))
                                           : "")
                                    : Str(At(choice, "text"));
      if (!text.empty()) ++content;
      if (At(choice, "finish_reason").IsString()) finish = Str(At(choice, "finish_reason"));
    }
    EXPECT_EQ(content, kMaxTokens);
    EXPECT_EQ(finish, "length");
    EXPECT_EQ(usage_chunks, c.usage_expected ? 1 : 0);
  }
}

// The Responses API goes through the gateway as chat does: relayed whole and streamed, and
// metered from the usage of the reply (a stream's, in its response.completed event).
TEST_F(InstantGatewayTest, ResponsesAreRelayedAndMeteredLikeChat) {
  HttpResponse r =
      Post("/v1/responses",
           fmt::format(R"({{"model":{},"instructions":"be brief","input":"hello there",)"
                       R"("max_output_tokens":9}})",
                       Quote(kModel)));
  ASSERT_EQ(r.status, 200) << r.body;
  auto doc = ParseJson(r.body);
  EXPECT_EQ(Str(At(doc, "object")), "response");
  EXPECT_EQ(Int(At(At(doc, "usage"), "output_tokens")), 9);
  // The instructions are the chat's system message: the same prompt.
  HttpResponse chat = Post("/v1/chat/completions", ChatBody("hello there", 9));
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(Int(At(At(doc, "usage"), "input_tokens")),
            Int(At(At(ParseJson(chat.body), "usage"), "prompt_tokens")));

  auto s = OpenStream(key_, "/v1/responses",
                      fmt::format(R"({{"model":{},"input":[{{"role":"user","content":"stream"}}],)"
                                  R"("stream":true}})",
                                  Quote(kModel)));
  ASSERT_NE(s, nullptr);
  auto events = s->ReadAll();
  ASSERT_TRUE(events) << events.error().message;
  ASSERT_GE(events->size(), 2u);
  EXPECT_EQ(Str(At(ParseJson(events->front()), "type")), "response.created");
  int deltas = 0;
  for (const std::string& e : *events) {
    deltas += Str(At(ParseJson(e), "type")) == "response.output_text.delta";
  }
  auto completed = ParseJson(events->back());
  EXPECT_EQ(Str(At(completed, "type")), "response.completed");
  const auto& usage = At(At(completed, "response"), "usage");
  EXPECT_EQ(Int(At(usage, "output_tokens")), deltas);
  EXPECT_EQ(deltas, 256);  // the engine's default length

  // The backend's 400 for a malformed request reaches the client, naming the field.
  ExpectError(Post("/v1/responses", fmt::format(R"({{"model":{}}})", Quote(kModel))), 400, "input");

  // Metered as the engines counted: three requests (the 400 never ran), the stream's usage too.
  auto engines = [&] {
    Totals sum;
    for (size_t e = 0; e < engines_.size(); ++e) {
      const Totals t = EngineTotals(e);
      sum.requests += t.requests;
      sum.prompt += t.prompt;
      sum.completion += t.completion;
    }
    return sum;
  };
  std::map<std::string, Totals> by_backend, by_user;
  std::string last_usage;
  const bool equal = Eventually(
      [&] {
        return UsageTotals(by_backend, by_user, last_usage) && by_user["alice"] == engines() &&
               by_user["alice"].requests == 3;
      },
      3s);
  EXPECT_TRUE(equal) << "usage: " << last_usage << "\nengines: " << engines().requests
                     << " requests, " << engines().prompt << " prompt, " << engines().completion
                     << " completion";
  EXPECT_EQ(by_user["alice"].completion, 9 + 9 + 256) << last_usage;
}

// What the gateway meters equals what the engines counted, per backend, whatever the kind of
// request (streams without include_usage are metered from the usage chunk the gateway asks the
// engine for).
TEST_F(GatewayTest, MeteredUsageEqualsTheEnginesTokenCounters) {
  ClusterOptions o;
  o.gateway_args = {"--routing", "round_robin"};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  const std::string bob = AddUser("bob");

  std::map<std::string, int> sent;  // user -> requests
  for (int i = 0; i < 15; ++i) {
    const std::string& key = i % 3 == 2 ? bob : key_;
    const std::string user = i % 3 == 2 ? "bob" : "alice";
    const std::string prompt = PromptOfTokens(5 + i, 100 * i);
    const int max_tokens = 3 + i % 4;
    switch (i % 5) {
      case 0: {
        EXPECT_EQ(PostAs(key, "/v1/completions", CompletionBody(prompt, max_tokens)).status, 200);
        break;
      }
      case 1: {
        EXPECT_EQ(PostAs(key, "/v1/chat/completions", ChatBody(prompt, max_tokens)).status, 200);
        break;
      }
      default: {
        const bool chat = i % 5 == 4;
        const std::string extra(i % 5 == 3 ? kStreamWithUsage : kStream);
        auto s = OpenStream(
            key, chat ? "/v1/chat/completions" : "/v1/completions",
            chat ? ChatBody(prompt, max_tokens, extra) : CompletionBody(prompt, max_tokens, extra));
        ASSERT_NE(s, nullptr);
        auto events = s->ReadAll();
        ASSERT_TRUE(events) << events.error().message;
        EXPECT_EQ(events->back(), "[DONE]");
      }
    }
    ++sent[user];
  }

  auto engine_totals = [&](size_t e) { return EngineTotals(e); };
  std::map<std::string, Totals> by_backend, by_user;
  std::string last_usage;
  const bool equal = Eventually(
      [&] {
        if (!UsageTotals(by_backend, by_user, last_usage)) return false;
        return by_backend.size() == 2 && by_backend[engines_[0]->url()] == engine_totals(0) &&
               by_backend[engines_[1]->url()] == engine_totals(1);
      },
      3s);
  ASSERT_TRUE(equal) << "usage: " << last_usage << "\nengine 0 (" << engines_[0]->url()
                     << "): " << engine_totals(0).requests << " requests, "
                     << engine_totals(0).prompt << " prompt, " << engine_totals(0).completion
                     << " completion\nengine 1 (" << engines_[1]->url()
                     << "): " << engine_totals(1).requests << " requests, "
                     << engine_totals(1).prompt << " prompt, " << engine_totals(1).completion;
  // Round robin used both backends; each user's requests were all metered.
  EXPECT_GT(engine_totals(0).requests, 0);
  EXPECT_GT(engine_totals(1).requests, 0);
  EXPECT_EQ(by_user["alice"].requests, sent["alice"]);
  EXPECT_EQ(by_user["bob"].requests, sent["bob"]);

  // One row per (user, model, backend).
  rapidjson::Document rows = Usage();
  ASSERT_TRUE(rows.IsArray());
  std::set<std::tuple<std::string, std::string, std::string>> keys;
  for (const auto& row : rows.GetArray()) {
    EXPECT_EQ(Str(At(row, "model")), kModel);
    EXPECT_THAT(Str(At(row, "backend")), ::testing::AnyOf(engines_[0]->url(), engines_[1]->url()));
    EXPECT_TRUE(
        keys.emplace(Str(At(row, "user")), Str(At(row, "model")), Str(At(row, "backend"))).second)
        << "two rows for one (user, model, backend): " << last_usage;
  }
  EXPECT_EQ(keys.size(), 4u) << last_usage;  // two users on two backends
}

// Several worker threads share the queues, limits and meters: under concurrent load from many
// connections (spread over the workers, and queued, since the engines take four requests each)
// every request is answered, and metering still equals the engines' own counters.
TEST_F(GatewayTest, ThreadedGatewayMetersConcurrentLoadExactly) {
  ClusterOptions o;
  const std::vector<std::string> engine = {"--profile", "llama-3.1-8b-h100", "--max-num-seqs", "4"};
  o.engines = {engine, engine};
  o.gateway_args = {"--threads", "3", "--routing", "least_load"};
  o.users = {{"bob", {}}, {"carol", {"--weight", "2"}}};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  const std::vector<std::pair<std::string, std::string>> users = {
      {"alice", key_}, {"bob", keys_["bob"]}, {"carol", keys_["carol"]}};

  constexpr int kClients = 12, kEach = 8;
  std::mutex mu;
  std::map<std::string, int> sent;
  std::vector<std::string> failures;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      const auto& [user, key] = users[c % users.size()];
      HttpClient http(gateway_->port());  // one kept-alive connection per client
      http.SetDefaultHeader("Authorization", "Bearer " + key);
      for (int i = 0; i < kEach; ++i) {
        const std::string prompt = PromptOfTokens(8 + (c * kEach + i) % 40, 1000 * c + i);
        std::string failure;
        if (i % 2 == 0) {
          auto r = http.Post("/v1/completions", CompletionBody(prompt, 4 + i % 5));
          if (!r || r->status != 200) {
            failure = r ? fmt::format("status {}: {}", r->status, r->body) : r.error().message;
          }
        } else {
          const std::string extra(i % 4 == 1 ? kStream : kStreamWithUsage);
          StreamOutcome s = ReadStream(gateway_->port(), "/v1/chat/completions",
                                       ChatBody(prompt, 4 + i % 5, extra), key);
          if (s.status != 200 || !s.clean_end || s.last_event != "[DONE]") {
            failure = fmt::format("stream: status {}, last event {}, {}", s.status, s.last_event,
                                  s.failure);
          }
        }
        std::lock_guard lock(mu);
        if (failure.empty()) {
          ++sent[user];
        } else {
          failures.push_back(fmt::format("{} request {}: {}", user, i, failure));
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  ASSERT_TRUE(failures.empty()) << ::testing::PrintToString(failures);

  auto engine_totals = [&](size_t e) { return EngineTotals(e); };
  std::map<std::string, Totals> by_backend, by_user;
  std::string last_usage;
  const bool equal = Eventually(
      [&] {
        if (!UsageTotals(by_backend, by_user, last_usage)) return false;
        return by_backend[engines_[0]->url()] == engine_totals(0) &&
               by_backend[engines_[1]->url()] == engine_totals(1);
      },
      3s);
  ASSERT_TRUE(equal) << "usage: " << last_usage;
  for (const auto& [user, key] : users) {
    EXPECT_EQ(by_user[user].requests, kClients / 3 * kEach) << user;
    EXPECT_EQ(sent[user], kClients / 3 * kEach) << user;
  }
  EXPECT_EQ(GatewayMetric(R"(bmas_gateway_requests_total{status="200"})"),
            kClients * kEach);
  EXPECT_EQ(GatewayMetric("bmas_gateway_queue_depth"), 0);
  EXPECT_EQ(BackendGauge("in_flight", engines_[0]->url()), 0);
  EXPECT_EQ(BackendGauge("in_flight", engines_[1]->url()), 0);
}

// ---- Models and routing -------------------------------------------------------------------

TEST_F(GatewayTest, ModelsAreTheUnionOfTheBackendsAndRequestsGoWhereTheirModelIs) {
  ClusterOptions o;
  o.engines = {kInstant, {"--profile", "instant", "--model", std::string(kOtherModel)}};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));

  HttpResponse models = Unwrap(client_->Get("/v1/models"));
  ASSERT_EQ(models.status, 200) << models.body;
  auto doc = ParseJson(models.body);
  EXPECT_EQ(Str(At(doc, "object")), "list");
  std::vector<std::string> ids;
  for (int i = 0; At(At(doc, "data"), i).IsObject(); ++i)
    ids.push_back(Str(At(At(At(doc, "data"), i), "id")));
  EXPECT_THAT(ids, ::testing::UnorderedElementsAre(std::string(kModel), std::string(kOtherModel)));

  for (int i = 0; i < 4; ++i) {
    for (std::string_view model : {kModel, kOtherModel}) {
      HttpResponse r =
          Post("/v1/completions", CompletionBody(PromptOfTokens(4, 10 * i), 2, "", model));
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(Str(At(ParseJson(r.body), "model")), model);
    }
  }
  EXPECT_EQ(EngineRequests(0, kModel), 4);
  EXPECT_EQ(EngineRequests(1, kOtherModel), 4);
}

// cache_aware (the default): a request goes to the engine that holds its prompt's prefix, so
// every repeat of a system prompt hits that engine's prefix cache, whichever order they come in.
TEST_F(GatewayTest, CacheAwareRoutingSendsSharedPromptsWhereTheyAreCached) {
  ClusterOptions o;
  o.engines = {kInstant, kInstant, kInstant};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  constexpr int kPrompts = 5;  // not a multiple of 3: round-robin would move each prompt
  for (int round = 0; round < 4; ++round) {
    for (int p = 0; p < kPrompts; ++p) {
      const std::string system = fmt::format("assistant {}:", p) + PromptOfTokens(400, 100 * p);
      const std::string body = fmt::format(
          R"({{"model":{},"messages":[{{"role":"system","content":{}}},{{"role":"user","content":{}}}],"max_tokens":2}})",
          Quote(kModel), Quote(system), Quote(fmt::format("question {} of round {}", p, round)));
      HttpResponse r = Post("/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body;
      const int64_t cached =
          Int(At(At(At(ParseJson(r.body), "usage"), "prompt_tokens_details"), "cached_tokens"));
      if (round == 0) {
        EXPECT_EQ(cached, 0) << "prompt " << p;
      } else {
        EXPECT_GE(cached, 400) << "prompt " << p << " round " << round;  // the system prompt
      }
    }
  }
}

// ---- Backends failing, added and removed --------------------------------------------------

TEST_F(GatewayTest, RequestsFailOverWhenABackendDies) {
  ClusterOptions o;
  o.gateway_args = {"--routing", "round_robin"};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));

  struct Outcome {
    bool stream;
    int status;
    bool ok;  // 200 and (for a stream) [DONE] after a clean end
    bool error_event_then_clean_end;
    std::string detail;
  };
  std::mutex mu;
  std::vector<Outcome> outcomes;
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  // A steady stream of requests, one at a time, alternating whole and streamed responses.
  std::thread sender([&] {
    HttpClient c(gateway_->port());
    c.SetDefaultHeader("Authorization", "Bearer " + key_);
    for (int i = 0; !stop; ++i) {
      started = i + 1;
      Outcome out{i % 2 == 1, 0, false, false, ""};
      const std::string prompt = PromptOfTokens(8, 7 * i);
      if (!out.stream) {
        auto r = c.Post("/v1/completions", CompletionBody(prompt, 4));
        out.status = r ? r->status : 0;
        out.ok = out.status == 200;
        out.detail = r ? r->body : r.error().message;
      } else {
        StreamOutcome s = ReadStream(gateway_->port(), "/v1/completions",
                                     CompletionBody(prompt, 4, kStream), key_);
        out.status = s.status;
        out.ok = s.status == 200 && s.clean_end && s.last_event == "[DONE]";
        out.error_event_then_clean_end = s.clean_end && IsErrorEvent(s.last_event);
        out.detail = s.failure.empty() ? s.last_event : s.failure;
      }
      std::lock_guard<std::mutex> lock(mu);
      outcomes.push_back(std::move(out));
    }
  });
  auto done = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return outcomes.size();
  };

  EXPECT_TRUE(Eventually([&] { return done() >= 20; }, 10s));
  ASSERT_NO_FATAL_FAILURE(Kill(0));
  const size_t after_kill = static_cast<size_t>(started.load());  // requests from here on
  const double survivor_before = EngineRequests(1);
  const bool marked_down = Eventually([&] { return BackendHealthy(engines_[0]->url()) == 0; }, 5s);
  EXPECT_TRUE(Eventually([&] { return done() >= after_kill + 40; }, 10s));
  stop = true;
  sender.join();

  EXPECT_TRUE(marked_down) << "bmas_gateway_backend_healthy of the killed backend is not 0";
  EXPECT_EQ(BackendHealthy(engines_[1]->url()), 1);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_GE(outcomes.size(), after_kill + 40);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& out = outcomes[i];
    SCOPED_TRACE(fmt::format("request {} ({}), {} the kill", i, out.stream ? "stream" : "whole",
                             i < after_kill ? "around" : "after"));
    if (i >= after_kill || !out.stream) {
      // Nothing had reached the client when its backend failed: retried on the other one.
      EXPECT_TRUE(out.ok) << out.status << " " << out.detail;
    } else {
      // A stream cut by the kill ends with an error event and a clean close.
      EXPECT_TRUE(out.ok || out.error_event_then_clean_end) << out.status << " " << out.detail;
    }
  }
  EXPECT_GE(EngineRequests(1), survivor_before + 40);
}

// A stream read to its end: every event's data, the text its chunks carried, their ids.
struct ReadBack {
  std::vector<std::string> events;
  std::string text;
  std::set<std::string> ids;
  int tokens = 0;  // chunks that carried text
};

ReadBack ReadToEnd(SseStream& s, ReadBack so_far = {}) {
  while (true) {
    auto e = s.Next();
    EXPECT_TRUE(e) << "the stream did not end cleanly: " << e.error().message;
    if (!e || !e->has_value()) break;
    so_far.events.push_back(**e);
    if (**e == "[DONE]") continue;
    rapidjson::Document d;
    d.Parse((*e)->c_str());
    if (d.HasParseError() || !d.IsObject() || !d.HasMember("choices")) continue;
    if (d.HasMember("id") && d["id"].IsString()) so_far.ids.insert(d["id"].GetString());
    const auto& choices = d["choices"];
    if (!choices.IsArray() || choices.Empty()) continue;
    const auto& c = choices[0];
    const rapidjson::Value* text = nullptr;
    if (c.HasMember("text")) text = &c["text"];
    if (c.HasMember("delta") && c["delta"].HasMember("content")) text = &c["delta"]["content"];
    if (text != nullptr && text->IsString() && text->GetStringLength() > 0) {
      so_far.text += text->GetString();
      ++so_far.tokens;
    }
  }
  return so_far;
}

class ResumeTest : public GatewayTest {
 protected:
  // Streams `body` on `target`, stops the engine serving it after `before` tokens with
  // `signal`, and reads the rest.
  ReadBack CutAndRead(std::string_view target, const std::string& body, int before, int signal) {
    auto s = OpenStream(key_, target, body);
    if (s == nullptr) return {};
    ReadBack got;
    while (got.tokens < before) {
      auto e = s->Next();
      if (!e || !e->has_value()) {
        ADD_FAILURE() << "the stream ended before the cut";
        return got;
      }
      rapidjson::Document d;
      d.Parse((*e)->c_str());
      got.events.push_back(**e);
      if (d.HasParseError() || !d.IsObject() || !d.HasMember("choices") ||
          !d["choices"].IsArray() || d["choices"].Empty()) {
        continue;
      }
      if (d.HasMember("id")) got.ids.insert(d["id"].GetString());
      const auto& c = d["choices"][0];
      const rapidjson::Value* text = c.HasMember("text") ? &c["text"]
                                     : c.HasMember("delta") && c["delta"].HasMember("content")
                                         ? &c["delta"]["content"]
                                         : nullptr;
      if (text != nullptr && text->IsString() && text->GetStringLength() > 0) {
        got.text += text->GetString();
        ++got.tokens;
      }
    }
    std::optional<size_t> serving;
    for (size_t i = 0; i < engines_.size(); ++i) {
      if (EngineMetric(i, "vllm:num_requests_running") == 1) serving = i;
    }
    EXPECT_TRUE(serving.has_value()) << "no engine runs the stream";
    if (!serving) return got;
    engines_[*serving]->process().Signal(signal);
    EXPECT_TRUE(engines_[*serving]->process().Wait(10s).has_value());
    return ReadToEnd(*s, std::move(got));
  }

  // The usage chunk's (prompt, completion) tokens.
  static std::pair<int64_t, int64_t> Usage(const ReadBack& r) {
    for (const std::string& e : r.events) {
      rapidjson::Document d;
      d.Parse(e.c_str());
      if (!d.HasParseError() && d.IsObject() && d.HasMember("usage") && d["usage"].IsObject()) {
        return {d["usage"]["prompt_tokens"].GetInt64(), d["usage"]["completion_tokens"].GetInt64()};
      }
    }
    ADD_FAILURE() << "no usage chunk";
    return {-1, -1};
  }
};

TEST_F(ResumeTest, AStreamWhoseBackendIsKilledIsResumedOnAnotherAsOneStream) {
  ClusterOptions o;
  o.engines = {kLlama, kLlama};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  constexpr std::string_view kOptions = R"("stream":true,"stream_options":{"include_usage":true})";
  const std::string body = CompletionBody(PromptOfTokens(8), 60, kOptions);
  const ReadBack whole = ReadToEnd(*OpenStream(key_, "/v1/completions", body));
  ASSERT_EQ(whole.tokens, 60);
  const auto [whole_prompt, whole_completion] = Usage(whole);

  const ReadBack got = CutAndRead("/v1/completions", body, 5, SIGKILL);
  ASSERT_FALSE(got.events.empty());
  EXPECT_EQ(got.events.back(), "[DONE]");
  for (const std::string& e : got.events) EXPECT_FALSE(IsErrorEvent(e)) << e;
  EXPECT_EQ(got.tokens, 60) << "the resumed stream carries every token asked for";
  EXPECT_EQ(got.ids.size(), 1u) << "one stream id: " << ::testing::PrintToString(got.ids);
  const auto [prompt, completion] = Usage(got);
  EXPECT_EQ(completion, got.tokens) << "usage counts the tokens the client received";
  EXPECT_NEAR(prompt, whole_prompt, 2) << "and the prompt the client sent";
  EXPECT_EQ(MetricValue(gateway_->OperatorGet("/metrics"), "bmas_gateway_resumed_streams_total"), 1);
  // The other backend serves what comes next.
  EXPECT_EQ(Post("/v1/completions", CompletionBody("after the crash", 3)).status, 200);
}

TEST_F(ResumeTest, AChatStreamWhoseReplicaIsToldToGoIsContinuedWithContinueFinalMessage) {
  ClusterOptions o;
  // As a replica runs: SIGTERM stops it at once (Slurm's preemption).
  const std::vector<std::string> replica = {"--profile", "llama-3.1-8b-h100", "--shutdown-timeout", "0"};
  o.engines = {replica, replica};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  constexpr std::string_view kOptions = R"("stream":true,"stream_options":{"include_usage":true})";
  const ReadBack got = CutAndRead("/v1/chat/completions", ChatBody("tell me a story", 40, kOptions),
                                  7, SIGTERM);
  ASSERT_FALSE(got.events.empty());
  EXPECT_EQ(got.events.back(), "[DONE]");
  for (const std::string& e : got.events) EXPECT_FALSE(IsErrorEvent(e)) << e;
  EXPECT_EQ(got.tokens, 40);
  EXPECT_EQ(got.ids.size(), 1u);
  int roles = 0;
  for (const std::string& e : got.events) roles += e.find(R"("role":"assistant")") != std::string::npos;
  EXPECT_EQ(roles, 1) << "one opening chunk naming the role";
  EXPECT_EQ(Usage(got).second, 40);
}

TEST_F(ResumeTest, AStreamWithNoOtherBackendEndsWithAnErrorEventThatSaysWhy) {
  ClusterOptions o;
  o.engines = {kLlama};
  o.gateway_args = {"--queue-timeout", "2"};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  const ReadBack got = CutAndRead(
      "/v1/completions", CompletionBody(PromptOfTokens(8), 2000, kStream), 3, SIGKILL);
  ASSERT_FALSE(got.events.empty());
  EXPECT_NE(got.events.back(), "[DONE]");
  EXPECT_TRUE(IsErrorEvent(got.events.back())) << got.events.back();
  EXPECT_THAT(got.events.back(), HasSubstr("no other backend serves"));
}

TEST_F(GatewayTest, BackendsAddedAndRemovedWhileRunning) {
  ClusterOptions o;
  o.command_line_backends = 1;
  o.gateway_args = {"--routing", "round_robin"};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  const std::string added = engines_[1]->url();
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(Post("/v1/completions", CompletionBody(PromptOfTokens(4, i), 2)).status, 200);
  }
  EXPECT_EQ(EngineRequests(1), 0);

  EXPECT_THAT(Cli({"gateway", "backend", "add", added}).out, HasSubstr(added));
  EXPECT_THAT(Cli({"gateway", "backend", "list"}).out, HasSubstr(added));
  int i = 0;
  EXPECT_TRUE(Eventually(
      [&] {
        EXPECT_EQ(Post("/v1/completions", CompletionBody(PromptOfTokens(4, ++i), 2)).status, 200);
        return EngineRequests(1) > 0;
      },
      5s))
      << "no request reached the added backend";
  EXPECT_EQ(BackendHealthy(added), 1);

  Cli({"gateway", "backend", "remove", added});
  // Once drained, the gateway forgets the backend, and the list with it.
  EXPECT_TRUE(Eventually([&] { return !BackendHealthy(added).has_value(); }, 3s))
      << "the removed backend is still in the gateway's metrics";
  EXPECT_THAT(Cli({"gateway", "backend", "list"}).out, ::testing::Not(HasSubstr(added)));
  const double removed_count = EngineRequests(1);
  const double kept_count = EngineRequests(0);
  for (int j = 0; j < 10; ++j) {
    EXPECT_EQ(Post("/v1/completions", CompletionBody(PromptOfTokens(4, 50 + j), 2)).status, 200);
  }
  EXPECT_EQ(EngineRequests(1), removed_count) << "requests still reach a removed backend";
  EXPECT_EQ(EngineRequests(0), kept_count + 10);
}

// `bmas gateway backend list` (issue 15) shows every backend the gateway uses, where it comes
// from and the health the gateway sees; with no gateway running, each backend's own /health.
TEST_F(GatewayTest, BackendListShowsEveryBackendWithItsOriginAndHealth) {
  ClusterOptions o;
  o.command_line_backends = 1;
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  const std::string given = engines_[0]->url();
  const std::string added = engines_[1]->url();
  const std::string unused = "http://127.0.0.1:9";  // in the config only; nothing listens there
  const std::string config =
      dir_.WriteFile("bmas.toml", fmt::format("[gateway]\nbackends = [\"{}/\"]\n", unused));
  Cli({"gateway", "backend", "add", added});

  struct Row {
    std::string origins, health;
  };
  std::string err;
  auto list = [&] {
    CliRun r = Cli({"--config", config, "gateway", "backend", "list", "--json"});
    err = r.err;
    std::map<std::string, Row> rows;
    rapidjson::Document doc = ParseJson(r.out);
    for (int i = 0; doc.IsArray() && i < static_cast<int>(doc.Size()); ++i) {
      const auto& origins = At(At(doc, i), "origins");
      Row& row = rows[Str(At(At(doc, i), "url"))];
      for (int j = 0; origins.IsArray() && j < static_cast<int>(origins.Size()); ++j) {
        row.origins += (j > 0 ? "," : "") + Str(At(origins, j));
      }
      row.health = Str(At(At(doc, i), "health"));
    }
    return rows;
  };
  std::map<std::string, Row> rows;
  EXPECT_TRUE(Eventually([&] { return (rows = list())[added].health == "healthy"; }, 5s))
      << rows[added].health;
  EXPECT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[given].origins, "command line");
  EXPECT_EQ(rows[given].health, "healthy");
  EXPECT_EQ(rows[added].origins, "added");
  EXPECT_EQ(rows[unused].origins, "config");
  EXPECT_THAT(rows[unused].health, StartsWith("not used by the running gateway"));
  EXPECT_EQ(err, "");
  const std::string table = Cli({"--config", config, "gateway", "backend", "list"}).out;
  EXPECT_THAT(table, StartsWith("URL"));
  EXPECT_THAT(table, ::testing::ContainsRegex(added + " +added +healthy\n"));

  // No gateway: each backend's own /health, and a line on stderr that says so.
  ExitStatus stopped = gateway_->process().Stop(10s);
  EXPECT_TRUE(stopped.Success()) << stopped.ToString();
  rows = list();
  EXPECT_EQ(rows.size(), 2u) << "the gateway's command line is gone with it";
  EXPECT_EQ(rows[added].health, "up (its /health answers)");
  EXPECT_THAT(rows[unused].health, StartsWith("down: connect to the backend at " + unused));
  EXPECT_THAT(err, HasSubstr("no gateway runs on the state dir"));
}

TEST_F(InstantGatewayTest, NoHealthyBackendIs503) {
  ASSERT_EQ(Post("/v1/completions", CompletionBody("before", 2)).status, 200);
  ASSERT_NO_FATAL_FAILURE(Kill(0));
  ASSERT_NO_FATAL_FAILURE(Kill(1));
  HttpResponse last;
  EXPECT_TRUE(Eventually(
      [&] {
        last = Post("/v1/completions", CompletionBody("after", 2));
        return last.status == 503;
      },
      5s))
      << last.status << " " << last.body;
  ExpectError(last, 503, std::nullopt);
  // It stays so, for whole and streamed requests, and the gateway says so on /health.
  ExpectError(Post("/v1/completions", CompletionBody("again", 2)), 503, std::nullopt);
  auto s = SseStream::Open(gateway_->port(), "/v1/completions", CompletionBody("again", 2, kStream),
                           10s, Bearer(key_));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ((*s)->status(), 503);
  EXPECT_TRUE(Eventually([&] { return Unwrap(client_->Get("/health")).status == 503; }, 5s));
}

// ---- Cancellation and shutdown ------------------------------------------------------------

TEST_F(GatewayTest, ClientDisconnectMidStreamAbortsTheUpstreamRequest) {
  ClusterOptions o;
  o.engines = {kLlama, kLlama};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  auto aborted = [&] {
    return EngineMetric(0, "vllm:request_success_total", R"(finished_reason="abort")") +
           EngineMetric(1, "vllm:request_success_total", R"(finished_reason="abort")");
  };
  auto running = [&] {
    return EngineMetric(0, "vllm:num_requests_running") +
           EngineMetric(1, "vllm:num_requests_running");
  };
  ASSERT_EQ(aborted(), 0);

  auto s = OpenStream(key_, "/v1/completions", CompletionBody(PromptOfTokens(8), 2000, kStream));
  ASSERT_NE(s, nullptr);
  for (int i = 0; i < 3; ++i) {
    auto e = s->Next();
    ASSERT_TRUE(e && e->has_value()) << "event " << i;
  }
  EXPECT_EQ(running(), 1);
  s->Close();

  EXPECT_TRUE(Eventually([&] { return aborted() == 1 && running() == 0; }, 5s))
      << "aborted " << aborted() << ", running " << running();
  EXPECT_TRUE(Eventually(
      [&] {
        return BackendGauge("in_flight", engines_[0]->url()) == 0 &&
               BackendGauge("in_flight", engines_[1]->url()) == 0;
      },
      5s));
}

// A request waiting in the queue whose client goes away gives its place up (a 499), and is
// never sent to the engine once the seat comes free.
TEST_F(GatewayTest, ClientLeavingWhileQueuedGivesItsPlaceUp) {
  ClusterOptions o;
  o.engines = {{"--profile", "llama-3.1-8b-h100", "--max-num-seqs", "1"}};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  auto held = OpenStream(key_, "/v1/completions", CompletionBody("hold the seat", 200, kStream));
  ASSERT_NE(held, nullptr);
  auto first = held->Next();
  ASSERT_TRUE(first && first->has_value()) << "no first event";

  net::io_context io;
  tcp::socket queued(io);
  queued.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), gateway_->port()));
  const std::string body = CompletionBody("wait for the seat", 5);
  const std::string request = fmt::format(
      "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n"
      "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
      key_, body.size(), body);
  net::write(queued, net::buffer(request));
  ASSERT_TRUE(Eventually([&] { return GatewayMetric("bmas_gateway_queue_depth") == 1; }, 5s));
  queued.close();

  EXPECT_TRUE(Eventually(
      [&] { return GatewayMetric(R"(bmas_gateway_requests_total{status="499"})") == 1; }, 5s));
  auto rest = held->ReadAll();
  ASSERT_TRUE(rest) << rest.error().message;
  EXPECT_EQ(rest->back(), "[DONE]");
  EXPECT_TRUE(Eventually([&] { return BackendGauge("in_flight", engines_[0]->url()) == 0; }, 5s));
  EXPECT_EQ(GatewayMetric("bmas_gateway_queue_depth"), 0);
  EXPECT_EQ(EngineMetric(0, "vllm:request_success_total", R"(finished_reason="length")"), 1)
      << "the engine ran the request whose client had left";
}

TEST_F(GatewayTest, SigtermLetsTheStreamFinishThenFlushesItsUsage) {
  ClusterOptions o;
  o.engines = {kLlama, kLlama};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  constexpr int kPromptTokens = 16;
  constexpr int kMaxTokens = 200;  // about a second
  auto s = OpenStream(key_, "/v1/completions",
                      CompletionBody(PromptOfTokens(kPromptTokens), kMaxTokens, kStream));
  ASSERT_NE(s, nullptr);
  auto first = s->Next();
  ASSERT_TRUE(first && first->has_value());

  gateway_->process().Signal(SIGTERM);
  auto rest = s->ReadAll();
  ASSERT_TRUE(rest) << rest.error().message;
  ASSERT_FALSE(rest->empty());
  EXPECT_EQ(rest->back(), "[DONE]");
  EXPECT_EQ(rest->size(), static_cast<size_t>(kMaxTokens))  // the first was read before
      << "the stream did not run to its end";

  std::optional<ExitStatus> status = gateway_->process().Wait(10s);
  ASSERT_TRUE(status.has_value()) << "the gateway still runs 10 s after SIGTERM";
  EXPECT_TRUE(status->Success()) << status->ToString() << "\n" << gateway_->process().StderrText();
  EXPECT_TRUE(ConnectionRefused(gateway_->port()));

  rapidjson::Document rows = Usage();
  ASSERT_TRUE(rows.IsArray());
  ASSERT_EQ(rows.Size(), 1u) << "the stream's usage was not flushed on stop";
  EXPECT_EQ(Str(At(rows[0], "user")), "alice");
  EXPECT_EQ(Int(At(rows[0], "requests")), 1);
  EXPECT_EQ(Int(At(rows[0], "prompt_tokens")), kPromptTokens);
  EXPECT_EQ(Int(At(rows[0], "completion_tokens")), kMaxTokens);
}

// A gateway killed with SIGKILL (the OOM killer, a crash) between two flushes: the usage it had
// metered is in its usage journal, and the gateway that replaces it on the same port puts it in
// the store. The first one flushes once an hour, so without the journal all of it would be lost.
TEST_F(GatewayTest, AGatewayKilledBetweenFlushesLosesNoUsage) {
  const int port = FreeTcpPort();
  ASSERT_NE(port, 0);
  ClusterOptions o;
  o.engines = {kLlama};
  o.gateway_args = {"--port", std::to_string(port), "--usage-flush-interval", "3600"};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  const std::string bob = AddUser("bob");
  for (int i = 0; i < 12; ++i) {
    const std::string& key = i % 3 == 2 ? bob : key_;
    if (i % 4 == 3) {
      auto s = OpenStream(key, "/v1/chat/completions",
                          ChatBody(PromptOfTokens(6 + i), 5, kStreamWithUsage));
      ASSERT_NE(s, nullptr);
      auto events = s->ReadAll();
      ASSERT_TRUE(events) << events.error().message;
      EXPECT_EQ(events->back(), "[DONE]");
    } else {
      EXPECT_EQ(PostAs(key, "/v1/completions", CompletionBody(PromptOfTokens(4 + i), 3 + i)).status,
                200);
    }
  }
  const Totals engine = EngineTotals(0);
  ASSERT_EQ(engine.requests, 12);
  rapidjson::Document before = Usage();
  ASSERT_TRUE(before.IsArray());
  ASSERT_EQ(before.Size(), 0u) << "the gateway flushed before it was killed: nothing is shown";

  gateway_->process().Signal(SIGKILL);
  ASSERT_TRUE(gateway_->process().Wait(10s).has_value());
  const std::string journal =
      dir_.path() + "/state/store/gateway-usage-" + std::to_string(port) + ".journal";
  struct stat st {};
  ASSERT_EQ(stat(journal.c_str(), &st), 0) << journal;
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto again = GatewayProcess::Start({"--port", std::to_string(port), "--backend", engines_[0]->url()},
                                     Env());
  ASSERT_TRUE(again) << again.error().message;
  gateway_ = std::move(*again);
  std::map<std::string, Totals> by_backend, by_user;
  std::string last_usage;
  const bool equal = Eventually(
      [&] {
        return UsageTotals(by_backend, by_user, last_usage) &&
               by_backend[engines_[0]->url()] == engine;
      },
      5s);
  EXPECT_TRUE(equal) << "usage after the restart: " << last_usage << "\nthe engine's: "
                     << engine.requests << " requests, " << engine.prompt << " prompt, "
                     << engine.completion << " completion\n"
                     << gateway_->process().StderrText();
  EXPECT_EQ(by_user["alice"].requests, 8);
  EXPECT_EQ(by_user["bob"].requests, 4);
  EXPECT_THAT(gateway_->process().StderrText(),
              HasSubstr("12 requests' usage that an earlier gateway had not flushed"));
  // Flushed once: a third gateway finds nothing left to add.
  ExitStatus stopped = gateway_->process().Stop(10s);
  EXPECT_TRUE(stopped.Success()) << stopped.ToString();
  auto third = GatewayProcess::Start({"--port", std::to_string(port), "--backend", engines_[0]->url()},
                                     Env());
  ASSERT_TRUE(third) << third.error().message;
  gateway_ = std::move(*third);
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(UsageTotals(by_backend, by_user, last_usage));
  EXPECT_EQ(by_backend[engines_[0]->url()], engine) << last_usage;
}

// ---- Fairness -------------------------------------------------------------------------------

// Functional, not timing: with every engine seat taken by one user and more of that user's
// requests queued, another user's request is served before that backlog, not after it.
TEST_F(GatewayTest, LightUserIsNotQueuedBehindAHeavyUsersBacklog) {
  ClusterOptions o;
  o.engines = {{"--profile", "llama-3.1-8b-h100", "--max-num-seqs", "2"},
               {"--profile", "llama-3.1-8b-h100", "--max-num-seqs", "2"}};
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  const std::string heavy = AddUser("heavy");
  const std::string light = AddUser("light");
  constexpr int kHeavyStreams = 8;  // four run (two seats on each engine), four wait

  std::atomic<int> heavy_done{0};
  std::vector<StreamOutcome> heavy_outcomes(kHeavyStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kHeavyStreams; ++i) {
    threads.emplace_back([&, i] {
      heavy_outcomes[i] =
          ReadStream(gateway_->port(), "/v1/completions",
                     CompletionBody(PromptOfTokens(8, 10 * i), 300, kStream), heavy);
      ++heavy_done;
    });
  }
  const bool backlog = Eventually(
      [&] {
        return GatewayMetric("bmas_gateway_queue_depth") == 4 &&
               BackendGauge("in_flight", engines_[0]->url()) == 2 &&
               BackendGauge("in_flight", engines_[1]->url()) == 2;
      },
      5s);
  EXPECT_TRUE(backlog) << "heavy's streams are not four running and four queued";

  HttpResponse r = PostAs(light, "/v1/completions", CompletionBody("short", 5));
  const int heavy_done_when_light_finished = heavy_done;
  for (auto& t : threads) t.join();

  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Int(At(At(ParseJson(r.body), "usage"), "completion_tokens")), 5);
  // Served when the first seat came free: heavy's queued half had not even started.
  EXPECT_LE(heavy_done_when_light_finished, kHeavyStreams / 2)
      << "light's request waited behind heavy's queued streams";
  for (int i = 0; i < kHeavyStreams; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(heavy_outcomes[i].status, 200) << heavy_outcomes[i].failure;
    EXPECT_EQ(heavy_outcomes[i].last_event, "[DONE]") << heavy_outcomes[i].failure;
    EXPECT_EQ(heavy_outcomes[i].content_events, 300);
  }
}

}  // namespace
}  // namespace bmas::testing
