#include "daemon/secret.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

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

}  // namespace bmas
