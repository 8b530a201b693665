#include "cluster/node_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/private_files.h"

namespace bmas::cluster {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxNodeFileBytes = 1 << 20;

std::string Why(const std::string& path, const char* what) {
  return fmt::format("cannot {} {}: {}", what, path, std::strerror(errno));
}

// The directory, opened without following a symlink anywhere on its path; refused when someone
// other than root, or `also` (the account the file is for: munge owns /etc/munge), may write it.
// Files in it are opened with O_NOFOLLOW | O_EXCL, so `also` cannot redirect root's writes.
Result<int> OpenRootDir(const std::string& dir, uid_t also) {
  auto fd = OpenDirNoSymlinks(dir);
  if (!fd) return fd.error();
  struct stat st {};
  if (fstat(*fd, &st) != 0 || (st.st_uid != geteuid() && st.st_uid != also) ||
      (st.st_mode & 022) != 0) {
    close(*fd);
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("{} is not a directory that only root (or the file's owner) may "
                             "write: fix its owner and "
                             "mode (chown root {} && chmod go-w {})",
                             dir, dir, dir),
                 {}};
  }
  return *fd;
}

Result<void> WriteAll(int fd, const std::string& text, const std::string& path) {
  size_t at = 0;
  while (at < text.size()) {
    const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Internal(Why(path, "write"));
    at += static_cast<size_t>(n);
  }
  return {};
}

}  // namespace

Result<std::optional<NodeFile>> ReadNodeFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<NodeFile>();
    return Internal(Why(path, "open"));
  }
  struct stat st {};
  NodeFile f;
  f.path = path;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  char buf[8192];
  ssize_t n = 0;
  while (ok && (n = ::read(fd, buf, sizeof buf)) > 0 && f.contents.size() < kMaxNodeFileBytes) {
    f.contents.append(buf, static_cast<size_t>(n));
  }
  ok = ok && n >= 0;
  close(fd);
  if (!ok) return Internal(fmt::format("{} is not a regular file that can be read", path));
  f.mode = st.st_mode & 07777;
  f.uid = st.st_uid;
  f.gid = st.st_gid;
  return std::optional<NodeFile>(std::move(f));
}

Result<bool> FileInstall::Put(const NodeFile& file) {
  const fs::path path(file.path);
  const std::string dir = path.parent_path().string();
  const std::string name = path.filename().string();
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    // Each missing level, root's and 0755, recorded so that Undo removes it.
    std::vector<fs::path> missing;
    for (fs::path p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
      missing.push_back(p);
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) {
        return Internal(Why(it->string(), "create the directory"));
      }
      made_dirs_.push_back(it->string());
    }
  }
  auto before = ReadNodeFile(file.path);
  if (!before) return before.error();
  if (*before && (*before)->contents == file.contents && (*before)->mode == file.mode &&
      (*before)->uid == file.uid && (*before)->gid == file.gid) {
    return false;
  }
  auto dir_fd = OpenRootDir(dir, file.uid);
  if (!dir_fd) return dir_fd.error();
  const std::string temporary = fmt::format(".{}.bmas-join.{}", name, getpid());
  const int fd = openat(*dir_fd, temporary.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const std::string why = Why(file.path, "create a temporary file beside");
    close(*dir_fd);
    return Internal(why);
  }
  Result<void> written = WriteAll(fd, file.contents, file.path);
  if (written &&
      (fchown(fd, file.uid, file.gid) != 0 || fchmod(fd, file.mode) != 0 || fsync(fd) != 0)) {
    written = Internal(Why(file.path, "set the owner and mode of"));
  }
  close(fd);
  if (written && renameat(*dir_fd, temporary.c_str(), *dir_fd, name.c_str()) != 0) {
    written = Internal(Why(file.path, "rename into place"));
  }
  if (!written) unlinkat(*dir_fd, temporary.c_str(), 0);
  close(*dir_fd);
  if (!written) return written.error();
  done_.push_back({file.path, std::move(*before)});
  return true;
}

void FileInstall::Undo() {
  for (auto it = done_.rbegin(); it != done_.rend(); ++it) {
    if (it->before) {
      FileInstall restore;
      (void)restore.Put(*it->before);
    } else {
      ::unlink(it->path.c_str());
    }
  }
  done_.clear();
  for (auto it = made_dirs_.rbegin(); it != made_dirs_.rend(); ++it) ::rmdir(it->c_str());
  made_dirs_.clear();
}

Result<bool> CreateIfAbsent(const NodeFile& file) {
  const fs::path path(file.path);
  auto dir_fd = OpenRootDir(path.parent_path().string(), file.uid);
  if (!dir_fd) return dir_fd.error();
  const std::string name = path.filename().string();
  const int fd =
      openat(*dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int e = errno;
    close(*dir_fd);
    if (e == EEXIST) return false;
    errno = e;
    return Internal(Why(file.path, "create"));
  }
  Result<void> written = WriteAll(fd, file.contents, file.path);
  if (written &&
      (fchown(fd, file.uid, file.gid) != 0 || fchmod(fd, file.mode) != 0 || fsync(fd) != 0)) {
    written = Internal(Why(file.path, "set the owner and mode of"));
  }
  close(fd);
  if (!written) unlinkat(*dir_fd, name.c_str(), 0);
  close(*dir_fd);
  if (!written) return written.error();
  return true;
}

}  // namespace bmas::cluster
