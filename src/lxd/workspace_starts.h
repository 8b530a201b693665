#pragma once

// When LXD starts a workspace, it makes the workspace's cgroup (lxc.payload.NAME) anew, with no
// device program, and plugs the devices in its config back in: a running job's GPU among them.
// This watch tells the agent at once (inotify on the cgroup v2 root), so that it puts the fence
// back (lxd/device_fence.h) within a fraction of a second rather than at its next periodic
// pass. Where LXD makes its cgroups elsewhere, the periodic pass still does it.

#include <chrono>
#include <memory>
#include <string>

#include "common/result.h"

namespace bmas::lxd {

class WorkspaceStartWatch {
 public:
  // Watches `dir`, the cgroup v2 hierarchy's root when "". Unavailable, with why, when inotify
  // cannot watch it.
  static Result<std::unique_ptr<WorkspaceStartWatch>> Open(const std::string& dir = "");
  ~WorkspaceStartWatch();
  WorkspaceStartWatch(const WorkspaceStartWatch&) = delete;
  WorkspaceStartWatch& operator=(const WorkspaceStartWatch&) = delete;

  // Waits up to `timeout`; true when a workspace's cgroup was made meanwhile.
  bool Wait(std::chrono::milliseconds timeout);

  const std::string& dir() const { return dir_; }

 private:
  WorkspaceStartWatch(int fd, std::string dir) : fd_(fd), dir_(std::move(dir)) {}
  int fd_;
  std::string dir_;
};

}  // namespace bmas::lxd
