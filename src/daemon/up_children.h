#pragma once

// The processes `bmas up` starts and keeps running: engines, the gateway, the Slurm monitor and
// the agent. Each is `bmas ...` (as the service account where it faces the network), which
// prints "listening on URL" when ready; up restarts one that dies (common/restart_backoff.h).

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/listen_socket.h"
#include "common/restart_backoff.h"
#include "common/process.h"
#include "common/result.h"

namespace bmas {

struct Child {
  std::string name;               // "engine-0", "gateway", "slurm-mon", "agent"
  std::vector<std::string> args;  // its command line, to start it again
  std::vector<std::string> env;   // NAME=value over up's environment (secrets: never in args)
  std::string port_flag;          // the flag that sets its port: pinned after the first start
  // The sockets up holds for it (HoldListener) and passes to every start, so that its ports
  // stay taken between a crash and the next start.
  std::vector<HeldListener> listeners;
  std::string log;                // its stderr
  pid_t pid = -1;
  unsigned long long start_ticks = 0;  // /proc/PID/stat's starttime: who `pid` is
  std::string url;
  std::string metrics_url;  // a gateway's operator /metrics; "" when none
  bool exited = true;       // not running (never started, stopped, or dead)

  // Supervision, while `bmas up` runs.
  std::chrono::steady_clock::time_point started;
  RestartCount deaths;
  int restarts = 0;
  std::optional<std::chrono::steady_clock::time_point> restart_at;  // waiting to start again
  std::string last_exit;  // how it last ended, e.g. "signal 9 at 12:01:02"; "" when never
};

// Starts `c` from c.args and waits up to `timeout` for its "listening on URL" line (or, for a
// part with no listener, a line with "running, no listener"; its url stays ""). Sets pid,
// url, start time and pins its port (so a restart keeps the URL others were given). One that
// does not get ready is stopped, and the error carries the end of its log.
Result<void> StartChild(Child& c, std::chrono::seconds timeout);

// Binds host:port (0: a free port) for `c` and keeps the socket for up's life; returns the port.
// Each start of `c` gets it at descriptor 3 + its index, named in BMAS_LISTEN_FDS, and `c`'s
// HttpServer serves it instead of binding the port again (common/listen_socket.h).
Result<uint16_t> HoldListener(Child& c, const std::string& host, uint16_t port);

// Closes the sockets held for `c`, a part up gives up on (it did not start, and is not
// supervised): its ports are free again.
void ReleaseListeners(Child& c);

// Reaps `c` if it has exited; returns how it ended ("status 1", "signal 9"), or nullopt while it
// runs.
std::optional<std::string> ReapChild(Child& c);

// SIGTERM to all that run, up to `grace` for them to end, then SIGKILL.
void StopAll(std::vector<Child>& children, std::chrono::seconds grace);

// The last lines of a log, indented, for a message.
std::string LogTail(const std::string& path);

}  // namespace bmas
