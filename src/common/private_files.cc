#include "common/private_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace bmas {

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

}  // namespace bmas
