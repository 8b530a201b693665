// The client side of the agent's socket: `bmas agent exec`, `bmas workspace exec|shell`, and
// the Slurm hooks' calls. Every step has a time limit, so a hung agent gives an error.

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "agent/agent.h"
#include "agent/agent_protocol.h"
#include "agent/agent_wire.h"
#include "agent/terminal_relay.h"

extern char** environ;

namespace bmas {
namespace {

// The agent checks a caller with LXD and Slurm before it answers; give it that long.
constexpr std::chrono::seconds kAnswerTimeout{90};
constexpr std::chrono::seconds kConnectTimeout{10};
constexpr size_t kMaxReply = 64 * 1024;

// One reply as a JSON object; an error when none came in time or it is not one.
Result<rapidjson::Document> Receive(int fd, const std::string& socket,
                                    std::vector<int>* fds = nullptr) {
  auto text = ReceiveMessage(fd, kMaxReply, fds);
  if (!text) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("the agent at {} did not answer ({})", socket, text.error().message)};
  }
  rapidjson::Document d;
  d.Parse<rapidjson::kParseIterativeFlag>(text->c_str(), text->size());
  if (d.HasParseError() || !d.IsObject()) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("the agent at {} answered: {}", socket, *text)};
  }
  return d;
}

int RunThroughAgent(const std::string& socket, const std::vector<std::string>& argv, bool for_job,
                    bool login = false) {
  auto exec_here = [&] {
    std::vector<char*> a;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    fmt::print(stderr, "bmas agent exec: cannot run {}: {}\n", argv[0], std::strerror(errno));
    return 127;
  };
  const char* job = for_job ? std::getenv("SLURM_JOB_ID") : "0";
  int fd = job != nullptr ? ConnectAgent(socket, kConnectTimeout) : -1;
  if (fd < 0 && !for_job) {
    fmt::print(stderr,
               "bmas workspace: no agent answers at {} (bmas up starts one; root can use "
               "`bmas agent`; on a login node without one, `ssh NODE` reaches your workspace on "
               "that node)\n",
               socket);
    return 1;
  }
  if (fd < 0) return exec_here();  // no agent here: a plain Slurm job
  AgentRequest request;
  request.op = for_job ? "exec" : "enter";
  request.job = std::strtoll(job, nullptr, 10);
  char cwd[4096];
  request.cwd = getcwd(cwd, sizeof cwd) != nullptr ? cwd : "";
  request.argv = argv;
  request.login = login;
  // A login shell on a terminal gets a terminal of the workspace's own.
  const std::optional<TerminalSize> size = login ? SizeOf(STDIN_FILENO) : std::nullopt;
  if (size) {
    request.rows = size->rows;
    request.cols = size->cols;
  }
  for (char** e = environ; *e != nullptr; ++e) request.env.emplace_back(*e);
  const bool sent = SendMessage(fd, RenderAgentRequest(request), {0, 1, 2});
  const char* who = for_job ? "agent exec" : "workspace";
  // First "started" (or a refusal) within the time limit; then the exit code, whenever the
  // command ends. An agent that turns a connection away answers before it closes it.
  std::vector<int> master;
  auto started = Receive(fd, socket, &master);
  if (!sent && !started) {
    close(fd);
    if (for_job) return exec_here();
    fmt::print(stderr, "bmas workspace: cannot send to the agent at {}\n", socket);
    return 126;
  }
  if (started && started->HasMember("started")) {
    const int stopped_by = master.empty() ? 0 : RelayTerminal(master[0], fd);
    for (int m : master) close(m);
    if (stopped_by != 0) {
      close(fd);  // the agent ends the session when its caller goes
      return 128 + stopped_by;
    }
    SetDeadlines(fd, kConnectTimeout, std::chrono::milliseconds(0));
    started = Receive(fd, socket);
  }
  close(fd);
  if (!started) {
    fmt::print(stderr, "bmas {}: {}\n", who, started.error().message);
    return 126;
  }
  const rapidjson::Document& d = *started;
  if (d.HasMember("exit") && d["exit"].IsInt()) return d["exit"].GetInt();
  if (d.HasMember("plain") && for_job) return exec_here();
  fmt::print(stderr, "bmas {}: {}\n", who,
             d.HasMember("error") && d["error"].IsString() ? d["error"].GetString()
                                                           : "the agent's answer has no exit code");
  return 126;
}

// One request from root's hooks and its answer, each within `timeout`.
Result<rapidjson::Document> Ask(const std::string& socket, const AgentRequest& request,
                                std::chrono::milliseconds timeout) {
  const int fd = ConnectAgent(socket, timeout);
  if (fd < 0) return Error{ErrorCode::kNotFound, "no agent answers at " + socket};
  if (!SendMessage(fd, RenderAgentRequest(request))) {
    close(fd);
    return Error{ErrorCode::kUnavailable, "cannot send to the agent at " + socket};
  }
  auto reply = Receive(fd, socket);
  close(fd);
  return reply;
}

// A question about the caller's own records (usage, keys): the agent's JSON answer, or its
// refusal as PermissionDenied.
Result<std::string> AskForOwn(const std::string& socket, const AgentRequest& request) {
  auto d = Ask(socket, request, std::chrono::seconds(30));
  if (!d) return d.error();
  if (d->HasMember("error") && (*d)["error"].IsString()) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("the agent refused: {}", (*d)["error"].GetString())};
  }
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  d->Accept(w);
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace

int RunAgentExec(const std::string& socket, const std::vector<std::string>& argv) {
  return RunThroughAgent(socket, argv, /*for_job=*/true);
}

int RunAgentEnter(const std::string& socket, const std::vector<std::string>& argv) {
  return RunThroughAgent(socket, argv, /*for_job=*/false);
}

int RunAgentShell(const std::string& socket) {
  return RunThroughAgent(socket, {}, /*for_job=*/false, /*login=*/true);
}

Result<int> AgentKillJob(const std::string& socket, int64_t job) {
  AgentRequest request;
  request.op = "kill";
  request.job = job;
  auto d = Ask(socket, request, std::chrono::seconds(30));
  if (!d) return d.error();
  if (!d->HasMember("killed") || !(*d)["killed"].IsInt()) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("the agent at {} did not kill job {}", socket, job)};
  }
  return (*d)["killed"].GetInt();
}

Result<std::string> AgentUsage(const std::string& socket, int64_t since) {
  AgentRequest request;
  request.op = "usage";
  request.since = since;
  return AskForOwn(socket, request);
}

Result<std::string> AgentIdle(const std::string& socket, int64_t since) {
  AgentRequest request;
  request.op = "idle";
  request.since = since;
  return AskForOwn(socket, request);
}

Result<std::string> AgentOwnKeys(const std::string& socket, const std::string& action,
                                 const std::string& key_id) {
  AgentRequest request;
  request.op = "keys";
  request.action = action;
  request.key_id = key_id;
  return AskForOwn(socket, request);
}

void AgentObserve(const std::string& socket, const std::string& op, double seconds) {
  AgentRequest request;
  request.op = op;
  request.seconds = seconds;
  [[maybe_unused]] auto ignored = Ask(socket, request, std::chrono::seconds(5));
}

}  // namespace bmas
