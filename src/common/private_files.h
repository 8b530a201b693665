#pragma once

// Files that root (or a daemon's own account) creates and opens for itself: lock files, pid
// files, sockets' directories. They live in a directory that only its owner can write, and are
// opened without following links, so a local user can neither plant a file or a symlink there
// nor hold a lock that blocks root (../shared/SECURITY.md: "Rules for code that runs as root").

#include <sys/types.h>

#include <optional>
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

// Opens the directory `path` (absolute, or relative to the working directory) without following
// a symlink in any of its components (openat2 with RESOLVE_NO_SYMLINKS). A path with a symlink
// in it is refused, naming it and the fix (give its real path).
Result<int> OpenDirNoSymlinks(const std::string& path);

// Opens `relative` (one or more components, none of them "..") below the directory `dir_fd`
// without following a symlink anywhere in it (openat2, RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH),
// with `flags` | O_CLOEXEC. `dir` names the directory in messages.
Result<int> OpenBeneathNoSymlinks(int dir_fd, const std::string& dir, const std::string& relative,
                                  int flags, mode_t mode = 0);

// What root may do to a file in a directory that a less-privileged account can write.
struct HandOver {
  std::optional<uid_t> uid;    // new owner; nullopt keeps it
  std::optional<gid_t> gid;    // new group; nullopt keeps it
  std::optional<mode_t> mode;  // new mode; nullopt keeps it
  // Act only when the file belongs to this uid (nothing done otherwise); nullopt: any owner.
  std::optional<uid_t> only_if_owner;
};

// Changes the owner, group or mode of the regular file `name` (one component) in the directory
// `dir_fd` through a descriptor opened with O_NOFOLLOW, so that a symlink planted there never
// sends root's chown or chmod to another file. Refuses (kPermissionDenied, naming the file and
// the fix) a symlink, anything but a regular file, and a file with more than one hard link.
// An absent file is no error: nothing to do.
Result<void> HandOverInDir(int dir_fd, const std::string& dir, const std::string& name,
                           const HandOver& what);

// Gives the directory `path` to `uid`:`gid` through a descriptor opened with no symlink on its
// path (OpenDirNoSymlinks), so a link put in its place never hands root's chown elsewhere.
Result<void> HandDirTo(const std::string& path, uid_t uid, gid_t gid);

}  // namespace bmas
