#include "lxd/workspace_starts.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "lxd/device_fence.h"

namespace bmas::lxd {

Result<std::unique_ptr<WorkspaceStartWatch>> WorkspaceStartWatch::Open(const std::string& dir) {
  std::string watched = dir.empty() ? UnifiedCgroupDir("0::/\n") : dir;
  while (watched.size() > 1 && watched.back() == '/') watched.pop_back();
  if (watched.empty()) {
    return Error{ErrorCode::kUnavailable, "no cgroup v2 hierarchy to watch for workspace starts"};
  }
  const int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0 || inotify_add_watch(fd, watched.c_str(), IN_CREATE | IN_ONLYDIR) < 0) {
    const int e = errno;
    if (fd >= 0) close(fd);
    return Error{ErrorCode::kUnavailable,
                 fmt::format("cannot watch {} for workspace starts: {}", watched, std::strerror(e))};
  }
  return std::unique_ptr<WorkspaceStartWatch>(new WorkspaceStartWatch(fd, watched));
}

WorkspaceStartWatch::~WorkspaceStartWatch() { close(fd_); }

bool WorkspaceStartWatch::Wait(std::chrono::milliseconds timeout) {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
  alignas(inotify_event) char buf[4096];
  bool started = false;
  for (ssize_t n; (n = read(fd_, buf, sizeof buf)) > 0;) {
    for (char* at = buf; at < buf + n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(at);
      if (e->len > 0 && std::string_view(e->name).starts_with("lxc.payload.")) started = true;
      at += sizeof(inotify_event) + e->len;
    }
  }
  return started;
}

}  // namespace bmas::lxd
