#pragma once

// A daemon bmas starts detached and finds again later from a record on disk: `bmas slurm up`'s
// munged, slurmctld, slurmd and slurmrestd, and `bmas lxd up`'s lxcfs and lxd. One launcher
// for them: started with its command line kept, recognised by pid, name and start time (never
// a later process that took its pid), started again alone, stopped, and written to and read
// from the JSON records (local.json, lxd.json) in one shape.

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "common/json_object.h"
#include "common/result.h"

namespace bmas {

struct DaemonProcess {
  std::string name;  // "munged", "slurmd oss01", "lxd", ...
  std::string comm;  // its /proc/PID/comm, to recognise it later
  pid_t pid = -1;
  // /proc's start time of `pid` (ProcessStartTicks): with it, a process that took the pid and
  // the name later (after a reboot) is not taken for the daemon. 0 in a record of an older bmas.
  unsigned long long start_ticks = 0;
  std::string log;  // its stdout and stderr, appended
  // How it was started, so that it can be started again alone if it died.
  std::vector<std::string> args, env;

  // Whether the process recorded still runs (ProcessRunning with its name and start time).
  bool Runs() const;
};

// Spawns `args` detached, with `env` added and its output appended to `log`.
Result<DaemonProcess> StartDaemonProcess(std::string name, std::string comm,
                                         std::vector<std::string> args,
                                         std::vector<std::string> env, std::string log);

// Starts `d` again from its recorded command line; sets its pid and start time.
Result<void> RestartDaemonProcess(DaemonProcess& d);

// SIGTERM, up to `grace`, then SIGKILL, to the process `d` records (nothing to any other);
// false if it still runs.
bool StopDaemonProcess(const DaemonProcess& d, std::chrono::milliseconds grace);

// The record's JSON object: {"name", "comm", "pid", "start_ticks", "log", "args", "env"}.
template <typename W>
void WriteDaemonProcess(W& w, const DaemonProcess& d) {
  w.StartObject();
  Member(w, "name", d.name);
  Member(w, "comm", d.comm);
  Member(w, "pid", d.pid);
  Member(w, "start_ticks", d.start_ticks);
  Member(w, "log", d.log);
  StringsMember(w, "args", d.args);
  StringsMember(w, "env", d.env);
  w.EndObject();
}

// A record written by WriteDaemonProcess (or an older bmas's, without start_ticks, args or
// env); an error when it is not an object with an integer pid.
Result<DaemonProcess> ReadDaemonProcess(const rapidjson::Value& v);

}  // namespace bmas
