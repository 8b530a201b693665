#pragma once

// Test support shared by the integration tests: JSON access that never throws or crashes on
// an unexpected shape, OpenAI error checks, Prometheus text parsing, prompts of a known token
// count, and polling. Functions that check add GoogleTest failures to the current test.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <sys/types.h>

#include <string>
#include <vector>
#include <string_view>
#include <thread>

#include "common/process.h"

#include "http_client.h"

namespace bmas::testing {

// ---- JSON -------------------------------------------------------------------------------

// `s` as a JSON string literal, quotes included.
std::string Quote(std::string_view s);

// Parses `text`; a parse error fails the test and gives an empty object.
rapidjson::Document ParseJson(const std::string& text);

// The member `key` of `v`, or a static null when `v` is no object or lacks it.
const rapidjson::Value& At(const rapidjson::Value& v, const char* key);
// The element `index` of `v`, or a static null when `v` is no array or is shorter.
const rapidjson::Value& At(const rapidjson::Value& v, int index);

std::string Str(const rapidjson::Value& v);  // "<not a string>" for anything else
int64_t Int(const rapidjson::Value& v);      // -1 for anything else

// Checks an OpenAI error response: `status`, a JSON content type, and
// {"error": {"message": non-empty, "type": string, "param": `param` or null, "code": status}}.
void ExpectError(const HttpResponse& r, int status, std::optional<std::string> param);

// ---- Requests ---------------------------------------------------------------------------

// A prompt of exactly `n` tokens for bmas engine's tokenizer, which makes one token of a space
// followed by up to four letters or digits: " t0 t1 ... t999 t0 ...". Words start at `first`.
std::string PromptOfTokens(int n, int first = 0);

// ---- Metrics ----------------------------------------------------------------------------

// The value of one series in Prometheus text, e.g. `vllm:num_requests_running{model_name="m"}`;
// nullopt when it is absent.
std::optional<double> MetricValue(const std::string& text, std::string_view series);

// A TCP port on 127.0.0.1 that nothing listens on now.
int FreeTcpPort();

// The mount points below `root` (/proc/self/mounts), parents before children: unmount them in
// reverse.
std::vector<std::string> MountsUnder(const std::string& root);

// The pids of host processes whose command line starts with `needle` (so "sleep 3001" is the
// sleep itself, not the shell whose script mentions it).
std::vector<pid_t> HostProcesses(const std::string& needle);

// A Unix account `name` for tests that act as a student; made once per machine. Returns name.
std::string EnsureUnixUser(const std::string& name);

// ---- Operator data ------------------------------------------------------------------------

// The operator secret of `state_dir` (run/operator.secret, daemon/secret.h); "" when absent.
std::string OperatorSecretOf(const std::string& state_dir);
// "Bearer <secret>" for an operator listener: what HttpClient::SetDefaultHeader takes.
inline std::string OperatorBearerOf(const std::string& state_dir) {
  return "Bearer " + OperatorSecretOf(state_dir);
}

// GET http://127.0.0.1:`port``target` as Unix account `user` (curl under setpriv), with
// `authorization` as the Authorization header when not empty. status 0 when curl failed.
HttpResponse GetAsUser(const std::string& user, uint16_t port, const std::string& target,
                       const std::string& authorization = "");

// Whether Unix account `user` can read `path` (cat under setpriv).
bool UserCanRead(const std::string& user, const std::string& path);

// A copy of $BMAS_BINARY in `dir` that every user can run (the build tree may sit in a
// private directory, such as a fresh clone under mktemp's 0700 one); made once.
std::string SharedBinaryIn(const std::string& dir);

// `bmas --state-dir STATE ARGS...` run in `dir`, as `user` ("" = root, through
// $BMAS_BINARY; a user runs SharedBinaryIn(dir)).
Result<CommandOutput> RunBmasIn(const std::string& dir, const std::string& state,
                                const std::vector<std::string>& args, const std::string& user,
                                std::chrono::seconds timeout = std::chrono::seconds(60));

// ---- Polling ----------------------------------------------------------------------------

// Polls `done` every 10 ms until it returns true or `timeout` passes; returns its last result.
template <typename F>
bool Eventually(F done, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

}  // namespace bmas::testing
