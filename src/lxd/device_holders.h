#pragma once

// Who on the host still holds a file: through an open fd, or through a mapping whose fd is
// closed. Every process of the host is looked at, whatever pid, user or mount namespace it
// made for itself (/proc as root sees it). How a job's GPUs are taken back at release. Root
// only (/proc/PID/map_files needs CAP_SYS_ADMIN).

#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/result.h"

namespace bmas::lxd {

struct FileHolder {
  pid_t pid = 0;
  std::string command;  // /proc/PID/comm
};

// Whether a file (as stat(2) says) is one of those looked for.
using FileMatch = std::function<bool(const struct stat&)>;

// A match for the character devices `rdevs`.
FileMatch CharDevices(const std::vector<dev_t>& rdevs);

// Every process other than this one that has a file `match` takes: in /proc/PID/fd, or
// mapped (/proc/PID/maps, each file looked at once through /proc/PID/map_files). By pid.
std::vector<FileHolder> FindHolders(const FileMatch& match);

// One process's hold on one of the character devices looked for.
struct DeviceHold {
  pid_t pid = 0;
  std::string command;  // /proc/PID/comm
  dev_t rdev = 0;
};

// Every process other than this one that holds any of the character devices `rdevs` (as
// FindHolders looks): once per process and device.
std::vector<DeviceHold> FindDeviceHolds(const std::vector<dev_t>& rdevs);

// "pid 12 (python), pid 40 (hold)".
std::string DescribeHolders(const std::vector<FileHolder>& holders);

// SIGKILL to each of FindHolders(match) and to `also` (say, NVML's processes on the GPUs) until
// none is left. Returns how many were signalled; Unavailable, naming each one left, when some
// still hold it after `timeout` (a process stuck in the kernel). `env` gives the deadline's time
// and the sleeps between looks (a ManualEnv: no waiting).
Result<int> KillHolders(const FileMatch& match, const std::vector<pid_t>& also,
                        std::chrono::milliseconds timeout, Env& env = Env::Default());

}  // namespace bmas::lxd
