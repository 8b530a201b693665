#pragma once

// The agent's socket, both sides: one SOCK_SEQPACKET message each way per step, JSON, with the
// caller's stdin, stdout and stderr passed along an exec request (SCM_RIGHTS). Every call
// has a deadline (SO_RCVTIMEO, SO_SNDTIMEO), so neither side hangs on the other.

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_object.h"
#include "common/result.h"

namespace bmas {

// Deadlines for each later send and receive on `fd`; zero: none.
void SetDeadlines(int fd, std::chrono::milliseconds send, std::chrono::milliseconds receive);

// One message (and `fds`, when given). False when it was not sent whole.
bool SendMessage(int fd, std::string_view text, const std::vector<int>& fds = {});

// One message of at most `limit` bytes, and the fds that came with it (closed when `fds` is
// null; the agent's are close-on-exec). Unavailable at end of file, on error or past the
// deadline; InvalidArgument when the message was larger than `limit`.
Result<std::string> ReceiveMessage(int fd, size_t limit, std::vector<int>* fds = nullptr);

// A connected socket to the agent at `path`, with `timeout` for the connect and as the
// deadline of later sends and receives; -1 when none answers.
int ConnectAgent(const std::string& path, std::chrono::milliseconds timeout);

}  // namespace bmas
