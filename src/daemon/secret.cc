#include "daemon/secret.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/private_files.h"

namespace bmas {

Result<std::string> ReadSecret(const std::string& file, const char* env_var) {
  const char* value = std::getenv(env_var);
  if (value != nullptr && *value != '\0') return std::string(value);
  if (file.empty()) return std::string();
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return InvalidArgument(fmt::format("cannot open {}: {}", file, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return InvalidArgument(fmt::format("{} is not a regular file", file));
  }
  if ((st.st_mode & 077) != 0) {
    close(fd);
    return InvalidArgument(
        fmt::format("{} holds a secret but others may read it (mode {:o}): chmod 600 it", file,
                    st.st_mode & 0777));
  }
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 && text.size() < 65536) text.append(buf, n);
  close(fd);
  if (n < 0) return InvalidArgument(fmt::format("cannot read {}: {}", file, std::strerror(errno)));
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return InvalidArgument(fmt::format("{} is empty", file));
  text = text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
  return text;
}

namespace {

constexpr const char* kOperatorSecretName = "operator.secret";

}  // namespace

std::string NewSecretHex(size_t bytes) {
  std::string buf(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(buf.data() + got, bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char b : buf) hex += fmt::format("{:02x}", b);
  return hex;
}

std::string OperatorSecretPath(const std::string& state_dir) {
  return (std::filesystem::path(state_dir) / "run" / kOperatorSecretName).string();
}

Result<std::string> EnsureOperatorSecret(const std::string& state_dir) {
  const std::string path = OperatorSecretPath(state_dir);
  struct stat st {};
  const char* from_env = std::getenv(kOperatorSecretEnv);
  if ((from_env != nullptr && *from_env != '\0') || lstat(path.c_str(), &st) == 0 ||
      errno != ENOENT) {
    return ReadSecret(path, kOperatorSecretEnv);
  }
  const std::string run = std::filesystem::path(path).parent_path().string();
  std::error_code ec;
  std::filesystem::create_directories(run, ec);
  auto dir = OpenPrivateDir(run, 0755);
  if (!dir) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("no operator secret {} and cannot make one: {} (run `bmas up` as "
                             "root first, or run this as the account that owns {})",
                             path, dir.error().message, run)};
  }
  const std::string temporary = fmt::format("{}.{}", kOperatorSecretName, getpid());
  auto fd = OpenInPrivateDir(*dir, run, temporary, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (!fd) {
    close(*dir);
    return fd.error();
  }
  const std::string text = NewSecretHex(32) + "\n";
  const bool written = write(*fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(*fd);
  // link() fails with EEXIST when another daemon made it first: then that one is the secret.
  const bool linked = written && linkat(*dir, temporary.c_str(), *dir, kOperatorSecretName, 0) == 0;
  const int link_errno = errno;
  unlinkat(*dir, temporary.c_str(), 0);
  close(*dir);
  if (!written || (!linked && link_errno != EEXIST)) {
    return Error{ErrorCode::kInternal, fmt::format("cannot write the operator secret {}: {}", path,
                                                   std::strerror(written ? link_errno : errno))};
  }
  return ReadSecret(path, kOperatorSecretEnv);
}

Result<void> HandOperatorSecretTo(const std::string& state_dir, uid_t uid, gid_t gid) {
  const std::string path = OperatorSecretPath(state_dir);
  const std::string run = std::filesystem::path(path).parent_path().string();
  auto dir = OpenPrivateDir(run, 0755);
  if (!dir) return dir.error();
  const int r = fchownat(*dir, kOperatorSecretName, uid, gid, AT_SYMLINK_NOFOLLOW);
  const int saved = errno;
  close(*dir);
  if (r != 0) {
    return Error{ErrorCode::kInternal, fmt::format("cannot hand the operator secret {} to uid {}: "
                                                   "{}", path, uid, std::strerror(saved))};
  }
  return {};
}

}  // namespace bmas
