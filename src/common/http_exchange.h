#pragma once

// What the plain and the TLS client transports (http_transport.cc, https_transport.cc) share:
// one request written and its whole response read on a stream that is already connected (and
// handshaken). Internal to src/common.

#include <fmt/format.h>

#include <chrono>
#include <exception>
#include <optional>
#include <string>

#include "common/asio.h"
#include "common/http_transport.h"
#include "common/result.h"

namespace bmas::internal {

inline constexpr size_t kMaxResponseBytes = 256u << 20;  // a /jobs listing of a busy cluster

// The outcome of one exchange; default-constructible so that it can leave a coroutine.
struct Exchanged {
  beast::error_code ec;
  const char* step = "";
  long verify_result = 0;  // TLS: the server certificate check's outcome (X509_V_OK = 0)
  ClientResponse response;
};

// Writes `request` (Host: `authority`, Connection: close) and reads the response into
// `out`; on failure sets out.ec and out.step ("write", "read"). The stream's own deadline
// bounds both.
template <class Stream>
awaitable<void> WriteAndRead(Stream& stream, ClientRequest request, std::string authority,
                             Exchanged& out) {
  const http::verb verb = http::string_to_verb(request.method);
  http::request<http::string_body> req{verb, request.target, 11};
  req.set(http::field::host, authority);
  req.set(http::field::user_agent, "bmas");
  req.set(http::field::accept, "application/json");
  for (const auto& [name, value] : request.headers) req.set(name, value);
  if (!request.body.empty()) {
    // Without it slurmrestd reads the body as a URL query: "Unable to parse query."
    req.set(http::field::content_type, request.content_type);
    req.body() = std::move(request.body);
  }
  req.keep_alive(false);
  req.prepare_payload();
  co_await http::async_write(stream, req, net::redirect_error(use_awaitable, out.ec));
  if (out.ec) {
    out.step = "write";
    co_return;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxResponseBytes);
  co_await http::async_read(stream, buffer, parser, net::redirect_error(use_awaitable, out.ec));
  if (out.ec) {
    out.step = "read";
    co_return;
  }
  out.response.status = static_cast<int>(parser.get().result_int());
  if (auto etag = parser.get().find(http::field::etag); etag != parser.get().end()) {
    out.response.etag = std::string(etag->value());
  }
  out.response.body = std::move(parser.get().body());
}

// Runs one exchange to its end on `io`. An exception it threw is kUnavailable naming `peer`
// and `where` (the transport's URL); a write or read that failed is left in the outcome's ec.
inline Result<Exchanged> RunExchange(net::io_context& io, awaitable<Exchanged> exchange,
                                     const std::string& peer, const std::string& where) {
  std::optional<Exchanged> result;
  std::exception_ptr failure;
  net::co_spawn(io, std::move(exchange), [&result, &failure](std::exception_ptr e, Exchanged x) {
    failure = e;
    if (!e) result = std::move(x);
  });
  io.run();
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("request to {} at {} failed: {}", peer, where, e.what()),
                   {}};
    }
  }
  if (!result.has_value()) return Internal(peer + " exchange ended without a result");
  return std::move(*result);
}

// The error for an exchange whose write or read failed (`x.ec` set): the step, the peer, and
// the cause, a timeout as "no answer within N ms".
inline Error ExchangeFailure(const Exchanged& x, const std::string& peer, const std::string& where,
                             std::chrono::milliseconds timeout) {
  const bool timed_out = x.ec == beast::error::timeout;
  return Error{ErrorCode::kUnavailable,
               fmt::format("{} to {} at {} failed: {}", x.step, peer, where,
                           timed_out ? fmt::format("no answer within {} ms", timeout.count())
                                     : x.ec.message()),
               {}};
}

}  // namespace bmas::internal
