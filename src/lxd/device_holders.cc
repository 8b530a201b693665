#include "lxd/device_holders.h"

#include <dirent.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "common/process.h"
#include "lxd/lxd_internal.h"

namespace bmas::lxd {
namespace {

using internal::ReadText;

std::vector<pid_t> AllPids() {
  std::vector<pid_t> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid > 0 && *end == '\0') pids.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  return pids;
}

// Calls `each` with what each open fd of `pid` is, then each file it maps, as stat(2) says,
// until `each` returns false. Mapped files are told apart by the "dev inode" pair maps shows;
// each pair is stat'ed once, through the first mapping of it met, and kept in `seen`.
void ForEachHeldFile(pid_t pid, std::map<std::string, std::optional<struct stat>>& seen,
                     const std::function<bool(const struct stat&)>& each) {
  const std::string dir = fmt::format("/proc/{}/fd", pid);
  if (DIR* fds = opendir(dir.c_str())) {
    bool more = true;
    while (dirent* e = more ? readdir(fds) : nullptr) {
      if (e->d_name[0] == '.') continue;
      struct stat st {};
      if (stat((dir + "/" + e->d_name).c_str(), &st) == 0) more = each(st);
    }
    closedir(fds);
    if (!more) return;
  }
  std::istringstream maps(ReadText(fmt::format("/proc/{}/maps", pid)));
  for (std::string line; std::getline(maps, line);) {
    std::istringstream words(line);
    std::string range, perms, offset, dev, inode;
    if (!(words >> range >> perms >> offset >> dev >> inode) || inode == "0") continue;
    const std::string key = dev + " " + inode;
    auto it = seen.find(key);
    if (it == seen.end()) {
      struct stat st {};
      std::optional<struct stat> found;
      if (stat(fmt::format("/proc/{}/map_files/{}", pid, range).c_str(), &st) == 0) found = st;
      it = seen.emplace(key, found).first;
    }
    if (it->second && !each(*it->second)) return;
  }
}

std::string Comm(pid_t pid) {
  std::string comm = ReadText(fmt::format("/proc/{}/comm", pid));
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

}  // namespace

FileMatch CharDevices(const std::vector<dev_t>& rdevs) {
  return [rdevs](const struct stat& st) {
    return S_ISCHR(st.st_mode) && std::find(rdevs.begin(), rdevs.end(), st.st_rdev) != rdevs.end();
  };
}

std::vector<FileHolder> FindHolders(const FileMatch& match) {
  std::vector<FileHolder> holders;
  std::map<std::string, std::optional<struct stat>> seen;
  const pid_t self = getpid();
  for (pid_t pid : AllPids()) {
    if (pid == self) continue;
    bool hit = false;
    ForEachHeldFile(pid, seen, [&](const struct stat& st) {
      hit = match(st);
      return !hit;
    });
    if (hit) holders.push_back({pid, Comm(pid)});
  }
  return holders;
}

std::vector<DeviceHold> FindDeviceHolds(const std::vector<dev_t>& rdevs) {
  std::vector<DeviceHold> holds;
  std::map<std::string, std::optional<struct stat>> seen;
  const pid_t self = getpid();
  for (pid_t pid : AllPids()) {
    if (pid == self) continue;
    std::set<dev_t> held;
    ForEachHeldFile(pid, seen, [&](const struct stat& st) {
      if (S_ISCHR(st.st_mode) && std::find(rdevs.begin(), rdevs.end(), st.st_rdev) != rdevs.end()) {
        held.insert(st.st_rdev);
      }
      return true;
    });
    for (dev_t d : held) holds.push_back({pid, Comm(pid), d});
  }
  return holds;
}

std::string DescribeHolders(const std::vector<FileHolder>& holders) {
  std::string out;
  for (const FileHolder& h : holders) {
    out += fmt::format("{}pid {} ({})", out.empty() ? "" : ", ", h.pid, h.command);
  }
  return out;
}

Result<int> KillHolders(const FileMatch& match, const std::vector<pid_t>& also,
                        std::chrono::milliseconds timeout, Env& env) {
  std::set<pid_t> killed;
  const TimePoint deadline = env.Now() + timeout;
  while (true) {
    std::vector<FileHolder> holders = FindHolders(match);
    for (pid_t p : also) {
      if (p > 1 && p != getpid() && ProcessRunning(p)) holders.push_back({p, Comm(p)});
    }
    if (holders.empty()) break;
    if (env.Now() > deadline) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("still held after SIGKILL by {}", DescribeHolders(holders))};
    }
    for (const FileHolder& h : holders) {
      if (h.pid > 1 && kill(h.pid, SIGKILL) == 0) killed.insert(h.pid);
    }
    env.SleepFor(std::chrono::milliseconds(20));
  }
  return static_cast<int>(killed.size());
}

}  // namespace bmas::lxd
