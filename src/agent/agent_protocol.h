#pragma once

// The agent's wire format, without sockets: one JSON object per SOCK_SEQPACKET message. A
// request is parsed by a pure function with a bound on its size, its nesting and its lists, so
// that bytes from any local user cannot exhaust the agent's stack or memory.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bmas {

// The largest request the agent reads, and the deepest nesting it accepts (a request is an
// object whose values are scalars or arrays of strings: depth 2).
constexpr size_t kMaxAgentMessage = 256 * 1024;
constexpr int kMaxAgentDepth = 2;
constexpr size_t kMaxAgentListItems = 4096;

struct AgentRequest {
  std::string op;  // exec, enter, kill, bound, released, usage, idle, keys
  int64_t job = 0;
  std::string cwd;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // NAME=VALUE, as the client had them
  double seconds = 0;            // bound, released
  int64_t since = 0;             // usage, idle: from this unix time (0: all)
  // enter: a login shell (the user's, with a login environment) instead of argv.
  bool login = false;
  // enter: the caller's terminal size; both above 0 ask for a terminal of the workspace's own,
  // whose master comes back with "started".
  int rows = 0, cols = 0;
  // keys: list, create or revoke (key_id) the caller's own API keys.
  std::string action;
  std::string key_id;
};

// The largest terminal the agent makes (rows and columns each).
constexpr int kMaxTerminalSide = 10000;

// InvalidArgument for anything but one well-formed request: too large, too deep, not an object,
// a repeated key, a missing or mistyped op or job, a non-string list item, too many items.
Result<AgentRequest> ParseAgentRequest(std::string_view text);

// The JSON a client sends for `r`.
std::string RenderAgentRequest(const AgentRequest& r);

// `env` without what may change how a program is loaded or how glibc behaves (the variables
// glibc drops for a set-id program, LD_* among them), and without malformed entries.
std::vector<std::string> FilterUserEnvironment(const std::vector<std::string>& env);

}  // namespace bmas
