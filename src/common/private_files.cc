#include "common/private_files.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace bmas {
namespace {

// openat2(2) with RESOLVE_NO_SYMLINKS | `resolve` (Linux 5.6+): glibc 2.36 has no wrapper.
int OpenAt2NoSymlinks(int dir_fd, const std::string& path, int flags, mode_t mode,
                      unsigned long long resolve) {
  open_how how{};
  how.flags = static_cast<unsigned long long>(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) != 0 ? mode : 0;
  how.resolve = RESOLVE_NO_SYMLINKS | resolve;
  return static_cast<int>(syscall(SYS_openat2, dir_fd, path.c_str(), &how, sizeof how));
}

Error NoSymlinksError(const std::string& path, int e) {
  return Error{ErrorCode::kPermissionDenied,
               fmt::format("cannot open {}: {}{}", path, std::strerror(e),
                           e == ELOOP || e == EXDEV
                               ? " (a symlink on the way, or a path leading out: bmas, as root, "
                                 "follows no link there; give the real path, or remove the link "
                                 "and find out who made it)"
                               : e == ENOSYS ? " (bmas needs Linux 5.6 or later: openat2)" : ""),
               {}};
}

}  // namespace

Result<int> OpenPrivateDir(const std::string& dir, mode_t mode) {
  if (mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
    return Internal(fmt::format("cannot create {}: {}", dir, std::strerror(errno)));
  }
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("cannot open {} as a directory: {}{}", dir, std::strerror(e),
                             e == ELOOP || e == ENOTDIR
                                 ? " (it is a symlink or a file: remove it, and find out who "
                                   "made it)"
                                 : ""),
                 {}};
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return Internal(fmt::format("cannot stat {}: {}", dir, std::strerror(errno)));
  }
  std::string wrong;
  if (st.st_uid != geteuid()) {
    wrong = fmt::format("it belongs to uid {}, not to uid {} who uses it", st.st_uid, geteuid());
  } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    wrong = fmt::format("its group or others may write it (mode {:o})", st.st_mode & 07777);
  }
  if (!wrong.empty()) {
    close(fd);
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("refusing to keep private files in {}: {}; remove it (bmas makes it "
                             "again, mode {:o}) or fix its owner and mode",
                             dir, wrong, mode),
                 {}};
  }
  return fd;
}

Result<int> OpenInPrivateDir(int dir_fd, const std::string& dir, const std::string& name,
                             int flags, mode_t mode) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return InvalidArgument(fmt::format("\"{}\" is not a file name", name), "name");
  }
  const int fd = openat(dir_fd, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("cannot open {}/{}: {}", dir, name, std::strerror(errno)), {}};
  }
  return fd;
}

Result<int> LockPrivateFile(const std::string& dir, const std::string& name, bool wait) {
  auto dir_fd = OpenPrivateDir(dir);
  if (!dir_fd) return dir_fd.error();
  auto fd = OpenInPrivateDir(*dir_fd, dir, name, O_RDWR | O_CREAT);
  close(*dir_fd);
  if (!fd) return fd.error();
  int r;
  do {
    r = flock(*fd, LOCK_EX | (wait ? 0 : LOCK_NB));
  } while (r != 0 && errno == EINTR);
  if (r != 0) {
    const int e = errno;
    close(*fd);
    return Error{e == EWOULDBLOCK ? ErrorCode::kUnavailable : ErrorCode::kInternal,
                 fmt::format("cannot lock {}/{}: {}", dir, name, std::strerror(e)), {}};
  }
  return *fd;
}

Result<int> OpenDirNoSymlinks(const std::string& path) {
  const int fd = OpenAt2NoSymlinks(AT_FDCWD, path, O_RDONLY | O_DIRECTORY, 0, 0);
  if (fd < 0) return NoSymlinksError(path, errno);
  return fd;
}

Result<int> OpenBeneathNoSymlinks(int dir_fd, const std::string& dir, const std::string& relative,
                                  int flags, mode_t mode) {
  const int fd = OpenAt2NoSymlinks(dir_fd, relative, flags, mode, RESOLVE_BENEATH);
  if (fd < 0) return NoSymlinksError(dir + "/" + relative, errno);
  return fd;
}

Result<void> HandOverInDir(int dir_fd, const std::string& dir, const std::string& name,
                           const HandOver& what) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return InvalidArgument(fmt::format("\"{}\" is not a file name", name), "name");
  }
  const std::string path = dir + "/" + name;
  // O_PATH: nothing is opened for reading, so a FIFO or device planted there is never opened,
  // and closing the descriptor keeps this process's POSIX locks on the file (closing any other
  // descriptor of a file drops them all: SQLite's locks on the store's -shm, say, which another
  // process then takes for a dead store's and resets under this one's mapping). With
  // O_NOFOLLOW, a symlink is opened as itself and refused below.
  const int fd = openat(dir_fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return {};
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("refusing to touch {}: {}{}", path, std::strerror(e),
                             e == ELOOP ? " (it is a symlink, which only someone with write access "
                                          "to that directory could have put there: remove it, "
                                          "and find out who made it)"
                                        : ""),
                 {}};
  }
  struct stat st;
  std::string wrong;
  if (fstat(fd, &st) != 0) {
    wrong = std::strerror(errno);
  } else if (S_ISLNK(st.st_mode)) {
    wrong = "it is a symlink, which only someone with write access to that directory could have "
            "put there: remove it, and find out who made it";
  } else if (!S_ISREG(st.st_mode)) {
    wrong = "it is not a regular file";
  } else if (st.st_nlink != 1) {
    wrong = fmt::format("it has {} hard links (another name for another file): remove it, and "
                        "find out who made it",
                        st.st_nlink);
  }
  if (!wrong.empty()) {
    close(fd);
    return Error{ErrorCode::kPermissionDenied, fmt::format("refusing to touch {}: {}", path, wrong),
                 {}};
  }
  if (what.only_if_owner && st.st_uid != *what.only_if_owner) {
    close(fd);
    return {};
  }
  bool ok = true;
  if (what.uid || what.gid) {
    ok = fchownat(fd, "", what.uid.value_or(static_cast<uid_t>(-1)),
                  what.gid.value_or(static_cast<gid_t>(-1)), AT_EMPTY_PATH) == 0;
  }
  // fchmod does not take an O_PATH descriptor; its /proc link names exactly this file.
  if (ok && what.mode) {
    ok = chmod(fmt::format("/proc/self/fd/{}", fd).c_str(), *what.mode) == 0;
  }
  const int e = errno;
  close(fd);
  if (!ok) {
    return Internal(fmt::format("cannot set the owner or mode of {}: {}", path, std::strerror(e)));
  }
  return {};
}

Result<void> HandDirTo(const std::string& path, uid_t uid, gid_t gid) {
  auto fd = OpenDirNoSymlinks(path);
  if (!fd) return fd.error();
  const bool ok = fchown(*fd, uid, gid) == 0;
  const int e = errno;
  close(*fd);
  if (!ok) {
    return Internal(fmt::format("cannot give {} to uid {}: {}", path, uid, std::strerror(e)));
  }
  return {};
}

}  // namespace bmas
