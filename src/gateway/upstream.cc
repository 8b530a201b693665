#include "gateway/upstream.h"

#include <fmt/format.h>

#include <charconv>

namespace bmas::gateway {

Result<BackendUrl> ParseBackendUrl(std::string_view url) {
  std::string_view rest = url;
  constexpr std::string_view kScheme = "http://";
  if (rest.substr(0, kScheme.size()) != kScheme) {
    return InvalidArgument(fmt::format("backend '{}' must start with http://", url), "backend");
  }
  rest.remove_prefix(kScheme.size());
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  BackendUrl b;
  b.base_path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
  size_t colon = authority.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == authority.size()) {
    return InvalidArgument(fmt::format("backend '{}' needs host:port", url), "backend");
  }
  b.host = std::string(authority.substr(0, colon));
  b.port = std::string(authority.substr(colon + 1));
  for (char c : b.port) {
    if (c < '0' || c > '9') {
      return InvalidArgument(fmt::format("backend '{}': port '{}' is not a number", url, b.port),
                             "backend");
    }
  }
  b.url = fmt::format("http://{}{}", authority, b.base_path);
  return b;
}

ConnectionPool::ConnectionPool(net::io_context& io, BackendUrl url) : io_(io), url_(std::move(url)) {}

awaitable<Result<std::unique_ptr<TcpStream>>> ConnectionPool::Acquire(
    std::chrono::milliseconds timeout, bool& reused) {
  if (!idle_.empty()) {
    auto s = std::move(idle_.back());
    idle_.pop_back();
    reused = true;
    co_return std::move(s);
  }
  reused = false;
  tcp::resolver resolver(io_);
  beast::error_code ec;
  auto endpoints = co_await resolver.async_resolve(url_.host, url_.port,
                                                   net::redirect_error(use_awaitable, ec));
  if (ec) {
    co_return Error{ErrorCode::kUnavailable,
                    fmt::format("cannot resolve backend {}: {}", url_.url, ec.message())};
  }
  auto stream = std::make_unique<TcpStream>(io_);
  stream->expires_after(timeout);
  co_await stream->async_connect(endpoints, net::redirect_error(use_awaitable, ec));
  if (ec) {
    co_return Error{ErrorCode::kUnavailable,
                    fmt::format("cannot connect to backend {}: {}", url_.url, ec.message())};
  }
  stream->socket().set_option(tcp::no_delay(true), ec);
  co_return std::move(stream);
}

void ConnectionPool::Release(std::unique_ptr<TcpStream> stream) {
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(stream));
}

double MetricSum(std::string_view text, std::string_view name) {
  double sum = 0;
  size_t pos = 0;
  while ((pos = text.find(name, pos)) != std::string_view::npos) {
    const bool line_start = pos == 0 || text[pos - 1] == '\n';
    pos += name.size();
    if (!line_start || pos >= text.size() || (text[pos] != '{' && text[pos] != ' ')) continue;
    size_t eol = text.find('\n', pos);
    std::string_view line = text.substr(pos, eol == std::string_view::npos ? text.npos : eol - pos);
    size_t space = line.rfind(' ');
    if (space != std::string_view::npos) sum += std::strtod(std::string(line.substr(space + 1)).c_str(), nullptr);
  }
  return sum;
}

int64_t MetricLabelInt(std::string_view text, std::string_view name, std::string_view label) {
  size_t pos = 0;
  while ((pos = text.find(name, pos)) != std::string_view::npos) {
    const bool line_start = pos == 0 || text[pos - 1] == '\n';
    pos += name.size();
    if (!line_start || pos >= text.size() || text[pos] != '{') continue;
    const size_t close = text.find('}', pos);
    if (close == std::string_view::npos) return 0;
    const std::string_view labels = text.substr(pos + 1, close - pos - 1);
    // Label values here are digits, so a plain search for `label="` is enough.
    for (size_t at = labels.find(label); at != std::string_view::npos;
         at = labels.find(label, at + 1)) {
      const bool starts = at == 0 || labels[at - 1] == ',';
      const std::string_view rest = labels.substr(at + label.size());
      if (!starts || !rest.starts_with("=\"")) continue;
      const std::string_view value = rest.substr(2, rest.find('"', 2) - 2);
      int64_t v = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      return ec == std::errc() && end == value.data() + value.size() ? v : 0;
    }
    return 0;
  }
  return 0;
}

}  // namespace bmas::gateway
