#include "lxd/lxd_internal.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace bmas::lxd::internal {

void SetSocketTimeouts(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

Error TransportError(std::string_view step, const std::string& where, const beast::error_code& ec,
                     std::chrono::milliseconds timeout) {
  const bool timed_out =
      ec == net::error::would_block || ec == net::error::try_again || ec == net::error::timed_out;
  return Error{ErrorCode::kUnavailable,
               fmt::format("{} to LXD at {} failed: {}", step, where,
                           timed_out ? fmt::format("no answer within {} ms", timeout.count())
                                     : ec.message()),
               {}};
}

http::request<http::string_body> BuildRequest(const ClientRequest& request, std::string_view host) {
  http::request<http::string_body> req{http::string_to_verb(request.method), request.target, 11};
  req.set(http::field::host, host);
  req.set(http::field::user_agent, "bmas");
  for (const auto& [name, value] : request.headers) req.set(name, value);
  if (!request.body.empty()) {
    req.set(http::field::content_type, request.content_type);
    req.body() = request.body;
  }
  req.keep_alive(false);
  req.prepare_payload();
  return req;
}

ClientResponse TakeResponse(http::response<http::string_body>& response) {
  ClientResponse out;
  out.status = static_cast<int>(response.result_int());
  if (auto it = response.find(http::field::etag); it != response.end()) {
    out.etag = std::string(it->value());
  }
  out.body = std::move(response.body());
  return out;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Result<void> WriteAtomically(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = fmt::format("{}.bmas-tmp{}", path, getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Internal(fmt::format("cannot write {}: {}", tmp, std::strerror(errno)));
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = fchmod(fd, mode) == 0 && ok;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    unlink(tmp.c_str());
    return Internal(fmt::format("cannot write {}: {}", path, why));
  }
  return {};
}

}  // namespace bmas::lxd::internal
