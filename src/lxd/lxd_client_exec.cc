// LxdClient's commands in instances: run to their end with output recorded, or started with
// their stdio on websockets (a pty, or pipes) and their exit code waited for.

#include "lxd/lxd_client.h"

#include <fmt/format.h>

#include "common/json_object.h"
#include "common/json_read.h"
#include "lxd/lxd_client_internal.h"

namespace bmas::lxd {

using rapidjson::Value;
using internal::Int;
using internal::Parse;
using internal::Segment;
using internal::Strings;
using internal::Writer;
using internal::WriteMap;
using internal::WriteString;
using internal::WriteStrings;

namespace {

enum class ExecMode { kRecorded, kPiped, kInteractive };

// The body of POST /1.0/instances/NAME/exec: output recorded to logs, or stdio reached through
// websockets: pipes, or (kInteractive) a pty of `width` x `height`.
std::string ExecBody(const ExecSpec& spec, ExecMode mode, int width = 0, int height = 0) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("command");
  WriteStrings(w, spec.command);
  w.Key("environment");
  WriteMap(w, spec.environment);
  Member(w, "wait-for-websocket", mode != ExecMode::kRecorded);
  Member(w, "interactive", mode == ExecMode::kInteractive);
  Member(w, "record-output", mode == ExecMode::kRecorded);
  if (mode == ExecMode::kInteractive) {
    Member(w, "width", width);
    Member(w, "height", height);
  }
  Member(w, "user", spec.user);
  Member(w, "group", spec.group);
  if (!spec.cwd.empty()) {
    w.Key("cwd");
    WriteString(w, spec.cwd);
  }
  w.EndObject();
  return buf.GetString();
}

}  // namespace

Result<ExecResult> LxdClient::Exec(const std::string& name, const ExecSpec& spec) {
  const std::string what = fmt::format("run a command in {}", name);
  auto meta = CallAndWait(ClientRequest{"POST", "/1.0/instances/" + Segment(name) + "/exec", {},
                                     ExecBody(spec, ExecMode::kRecorded)},
                          what);
  if (!meta) return meta.error();
  auto doc = Parse(*meta, what);
  if (!doc) return doc.error();
  ExecResult result;
  result.exit_code = static_cast<int>(Int(*doc, "return", -1));
  const StringMap output = Strings(*doc, "output");
  for (const auto& [fd, path] : output) {
    auto log = Call(ClientRequest{"GET", path, {}, {}}, what + " (read its output)");
    if (!log) return log.error();
    (fd == "1" ? result.out : result.err) = std::move(log->body);
    // The recorded output would otherwise pile up in the instance's log directory.
    (void)Call(ClientRequest{"DELETE", path, {}, {}}, what + " (delete its output)");
  }
  return result;
}

Result<WebsocketExec> LxdClient::StartInteractiveExec(const std::string& name,
                                                      const ExecSpec& spec, int width,
                                                      int height) {
  return StartWebsocketExec(name, ExecBody(spec, ExecMode::kInteractive, width, height),
                            fmt::format("start an interactive command in {}", name),
                            {"0", "control"});
}

Result<WebsocketExec> LxdClient::StartPipedExec(const std::string& name, const ExecSpec& spec) {
  return StartWebsocketExec(name, ExecBody(spec, ExecMode::kPiped),
                            fmt::format("start a command in {}", name),
                            {"0", "1", "2", "control"});
}

Result<WebsocketExec> LxdClient::StartWebsocketExec(const std::string& name, std::string body,
                                                    const std::string& what,
                                                    const std::vector<std::string>& fds) {
  auto started = StartOperation(
      ClientRequest{"POST", "/1.0/instances/" + Segment(name) + "/exec", {}, std::move(body)}, what);
  if (!started) return started.error();
  WebsocketExec e;
  e.operation = std::move(started->first);
  e.secrets = Strings(started->second, "fds");
  for (const auto& fd : fds) {
    if (auto it = e.secrets.find(fd); it == e.secrets.end() || it->second.empty()) {
      return Internal(fmt::format("cannot {}: LXD's answer lacks websocket {}'s secret", what, fd));
    }
  }
  return e;
}

Result<int> LxdClient::ExecExitCode(const std::string& operation) {
  auto meta = WaitOperation(operation, "wait for a command to end");
  if (!meta) return meta.error();
  auto doc = Parse(*meta, "read a command's exit code");
  if (!doc) return doc.error();
  return static_cast<int>(Int(*doc, "return", -1));
}

}  // namespace bmas::lxd
