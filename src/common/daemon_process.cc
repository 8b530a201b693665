#include "common/daemon_process.h"

#include "common/json_read.h"
#include "common/process.h"

namespace bmas {

bool DaemonProcess::Runs() const { return ProcessRunning(pid, comm, start_ticks); }

Result<DaemonProcess> StartDaemonProcess(std::string name, std::string comm,
                                         std::vector<std::string> args,
                                         std::vector<std::string> env, std::string log) {
  DaemonProcess d{std::move(name), std::move(comm), -1, 0, std::move(log), std::move(args),
                  std::move(env)};
  if (auto started = RestartDaemonProcess(d); !started) return started.error();
  return d;
}

Result<void> RestartDaemonProcess(DaemonProcess& d) {
  auto child = SpawnDetached(d.args, d.env, d.log);
  if (!child) return child.error();
  d.pid = child->pid;
  d.start_ticks = child->start_ticks;
  return {};
}

bool StopDaemonProcess(const DaemonProcess& d, std::chrono::milliseconds grace) {
  return StopProcess(d.pid, d.comm, grace, d.start_ticks);
}

Result<DaemonProcess> ReadDaemonProcess(const rapidjson::Value& v) {
  if (!v.IsObject() || !v.HasMember("pid") || !v["pid"].IsInt()) {
    return Error{ErrorCode::kInvalidArgument, "a daemon's record has no integer pid"};
  }
  DaemonProcess d;
  d.pid = v["pid"].GetInt();
  if (const auto* t = JsonMember(v, "start_ticks"); t != nullptr && t->IsUint64()) {
    d.start_ticks = t->GetUint64();
  }
  d.name = JsonString(v, "name");
  d.comm = JsonString(v, "comm");
  d.log = JsonString(v, "log");
  d.args = JsonStringList(v, "args");
  d.env = JsonStringList(v, "env");
  return d;
}

}  // namespace bmas
