#pragma once

// Files that root (or a daemon's own account) creates and opens for itself: lock files, pid
// files, sockets' directories. They live in a directory that only its owner can write, and are
// opened without following links, so a local user can neither plant a file or a symlink there
// nor hold a lock that blocks root (../shared/SECURITY.md: "Rules for code that runs as root").

#include <sys/types.h>

#include <string>

#include "common/result.h"

namespace bmas {

// Root's own run directory on every node: host-wide locks of bmas's root commands.
inline constexpr const char* kRootRunDir = "/run/bmas";

// Opens directory `dir` (O_DIRECTORY | O_NOFOLLOW), creating it with `mode` when absent (its
// parent must exist). Refuses, naming the directory and the fix, one that is a symlink, is not
// owned by this process's effective uid, or that its group or others may write.
Result<int> OpenPrivateDir(const std::string& dir, mode_t mode = 0755);

// Opens `name` (one path component) in the directory `dir_fd` with `flags` | O_NOFOLLOW |
// O_CLOEXEC, creating it with `mode` when O_CREAT is in `flags`. A symlink there is refused.
Result<int> OpenInPrivateDir(int dir_fd, const std::string& dir, const std::string& name,
                             int flags, mode_t mode = 0600);

// A lock file `name` in the private directory `dir`, locked exclusively (flock); the lock is
// held until the returned descriptor is closed. With `wait` false, a lock that another process
// holds is kUnavailable at once.
Result<int> LockPrivateFile(const std::string& dir, const std::string& name, bool wait);

}  // namespace bmas
