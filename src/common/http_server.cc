#include "common/http_server.h"

#include <unistd.h>

#include <charconv>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/coarse_deadline.h"
#include "common/json_object.h"
#include "common/listen_socket.h"
#include "common/read_buffer.h"
#include "common/read_head.h"
#include "common/write_now.h"

namespace bmas {

void LogIfFailed(const char* what, std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    spdlog::error("{} failed: {}", what, ex.what());
  } catch (...) {
    spdlog::error("{} failed with an unknown exception", what);
  }
}

http::status HttpStatusFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return http::status::bad_request;
    case ErrorCode::kNotFound: return http::status::not_found;
    case ErrorCode::kTooLarge: return http::status::payload_too_large;
    case ErrorCode::kUnavailable: return http::status::service_unavailable;
    case ErrorCode::kAlreadyExists: return http::status::conflict;
    case ErrorCode::kPermissionDenied: return http::status::forbidden;
    case ErrorCode::kInternal: return http::status::internal_server_error;
  }
  return http::status::internal_server_error;
}

namespace {

const char* ErrorType(http::status status) {
  switch (status) {
    case http::status::bad_request: return "BadRequestError";
    case http::status::unauthorized: return "AuthenticationError";
    case http::status::forbidden: return "PermissionDeniedError";
    case http::status::not_found: return "NotFoundError";
    case http::status::method_not_allowed: return "MethodNotAllowedError";
    case http::status::payload_too_large: return "RequestEntityTooLargeError";
    case http::status::too_many_requests: return "RateLimitError";
    case http::status::service_unavailable: return "ServiceUnavailableError";
    case http::status::gateway_timeout: return "TimeoutError";
    default: return "InternalServerError";
  }
}

}  // namespace

std::string ErrorJson(http::status status, std::string_view message, std::string_view param) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  w.Key("error");
  w.StartObject();
  w.Key("message");
  w.String(message.data(), static_cast<rapidjson::SizeType>(message.size()));
  Member(w, "type", ErrorType(status));
  w.Key("param");
  if (param.empty()) w.Null(); else w.String(param.data(), static_cast<rapidjson::SizeType>(param.size()));
  Member(w, "code", static_cast<int>(status));
  w.EndObject();
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

ResponseWriter::ResponseWriter(TcpStream& stream, const HttpRequest& request,
                               std::chrono::steady_clock::duration write_timeout)
    : stream_(stream),
      version_(request.version()),
      keep_alive_(request.keep_alive()),
      write_timeout_(write_timeout) {}

namespace {

// A response's status line, Server, and Connection where keep-alive is not the version's
// default: what http::response::prepare_payload() and keep_alive() would write, less Beast's
// order of fields.
template <size_t N>
void PutHead(HeadText<N>& out, unsigned version, http::status status, bool keep_alive) {
  if (version == 11 && keep_alive && status == http::status::ok) {  // the common case, whole
    out << "HTTP/1.1 200 OK\r\nServer: bmas\r\n";
    return;
  }
  out << (version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ") << static_cast<uint64_t>(status) << " "
      << std::string_view(http::obsolete_reason(status)) << "\r\n";
  if (version == 10 && keep_alive) out << "Connection: keep-alive\r\n";
  if (version != 10 && !keep_alive) out << "Connection: close\r\n";
  out.Field("Server", "bmas");
}

}  // namespace

awaitable<bool> ResponseWriter::Send(http::status status, std::string_view content_type,
                                     std::string body, Headers headers) {
  if (SendAtOnce(status, content_type, std::move(body), headers)) co_return ok_;
  co_return co_await SendRest();
}

bool ResponseWriter::SendAtOnce(http::status status, std::string_view content_type,
                                std::string body, const Headers& headers) {
  sent_ = true;
  // The head put together by hand (Beast's serializer costs several times more CPU than the
  // syscall for the small responses of an API), then head and body in one write.
  HeadText<512> head;
  PutHead(head, version_, status, keep_alive_);
  head << extra_headers_.view();
  for (const auto& [field, value] : headers) head.Field(http::to_string(field), value);
  head.Field("Content-Type", content_type);
  const unsigned code = static_cast<unsigned>(status);
  const bool has_body = code >= 200 && code != 204 && code != 304;
  if (has_body) head << "Content-Length: " << static_cast<uint64_t>(body.size()) << "\r\n";
  head << "\r\n";
  const std::array<net::const_buffer, 2> bytes{
      head.buffer(), has_body ? net::buffer(body) : net::const_buffer()};
  beast::error_code ec;
  size_t sent = 0;
  if (WriteAtOnce(stream_.socket(), bytes, sent, ec)) {
    if (ec) ok_ = false;
    return true;
  }
  // The socket's send buffer is full (a large body, a slow client): the rest waits for room.
  unsent_head_.assign(head.view());
  if (has_body) unsent_body_ = std::move(body);
  unsent_from_ = sent;
  return false;
}

awaitable<bool> ResponseWriter::SendRest() {
  const std::array<net::const_buffer, 2> bytes{net::buffer(unsent_head_),
                                               net::buffer(unsent_body_)};
  if (co_await WriteRest(stream_, bytes, unsent_from_, write_timeout_)) ok_ = false;
  unsent_head_.clear();
  unsent_body_.clear();
  co_return ok_;
}

awaitable<bool> ResponseWriter::SendError(const Error& error) {
  co_return co_await SendError(HttpStatusFor(error.code), error.message, error.param);
}

std::string ResponseWriter::remote_address() const {
  beast::error_code ec;
  const auto endpoint = stream_.socket().remote_endpoint(ec);
  return ec ? std::string() : endpoint.address().to_string();
}

awaitable<bool> ResponseWriter::SendError(http::status status, std::string message,
                                          std::string param, Headers headers) {
  std::string body = ErrorJson(status, message, param);
  co_return co_await Send(status, "application/json", std::move(body), std::move(headers));
}

awaitable<bool> ResponseWriter::StartStream(http::status status, std::string_view content_type) {
  sent_ = true;
  HeadText<512> head;  // by hand, as Send's
  PutHead(head, version_, status, keep_alive_);
  head << extra_headers_.view();
  head.Field("Content-Type", content_type);
  head << "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";
  const net::const_buffer bytes = head.buffer();
  beast::error_code ec;
  size_t sent = 0;
  if (!WriteAtOnce(stream_.socket(), bytes, sent, ec)) {
    ec = co_await WriteRest(stream_, bytes, sent, write_timeout_);
  }
  if (ec) ok_ = false;
  co_return ok_;
}

awaitable<bool> ResponseWriter::SendChunk(std::string_view data) {
  if (!ok_) co_return false;
  if (data.empty()) co_return true;  // an empty chunk would end the stream
  // A local, not a temporary in the co_await: GCC 12 destroys those twice.
  const auto chunk = http::make_chunk(net::buffer(data.data(), data.size()));
  beast::error_code ec;
  size_t sent = 0;
  if (!WriteAtOnce(stream_.socket(), chunk, sent, ec)) {
    ec = co_await WriteRest(stream_, chunk, sent, write_timeout_);
  }
  if (ec) ok_ = false;
  co_return ok_;
}

void ResponseWriter::WatchForDisconnect(std::function<void()> on_gone) {
  StopWatching();
  watch_ = std::make_shared<Watch>();
  watch_->on_gone = std::move(on_gone);
  // A peek of one byte: it ends with EOF or an error when the client goes, with the byte (left
  // in the socket) when it pipelines. Asio tries it at once, so unlike async_wait(wait_read)
  // starting it costs no epoll_ctl.
  stream_.socket().async_receive(
      net::buffer(&watch_->byte, 1), tcp::socket::message_peek,
      [watch = watch_](beast::error_code ec, size_t n) {
        // Stopped or cancelled: the socket may be gone, do not touch it.
        if (!watch->active || ec == net::error::operation_aborted) return;
        if (!ec && n > 0) return;  // pipelined bytes end the watch
        watch->active = false;
        watch->on_gone();
      });
}

void ResponseWriter::StopWatching() {
  if (watch_ == nullptr) return;
  if (watch_->active) {
    watch_->active = false;
    beast::error_code ec;
    stream_.socket().cancel(ec);  // only the wait is pending while a handler is not writing
  }
  watch_.reset();
}

awaitable<bool> ResponseWriter::EndStream() {
  if (!ok_) co_return false;
  const auto last = http::make_chunk_last();
  if (co_await WriteAll(stream_, last, write_timeout_)) ok_ = false;
  co_return ok_;
}

HttpServer::HttpServer(net::io_context& io, HttpServerOptions options, HttpHandler handler)
    : HttpServer(std::vector<net::io_context*>{&io}, std::move(options), std::move(handler)) {}

HttpServer::HttpServer(std::vector<net::io_context*> workers, HttpServerOptions options,
                       HttpHandler handler)
    : workers_(std::move(workers)),
      io_(*workers_.at(0)),
      options_(std::move(options)),
      handler_(std::move(handler)),
      acceptor_(io_),
      connections_(workers_.size()) {}

Result<uint16_t> HttpServer::Listen() {
  // A socket its parent holds for this address (bmas up), or a new one.
  Result<int> fd = options_.port != 0 ? TakeInheritedListener(options_.host, options_.port)
                                      : Result<int>(-1);
  if (!fd) return fd.error();
  if (*fd < 0) {
    fd = ListenTcp(options_.host, options_.port);
    if (!fd) return fd.error();
  }
  auto port = BoundPort(*fd);
  if (!port) {
    close(*fd);
    return port.error();
  }
  beast::error_code ec;
  const bool v6 = options_.host.find(':') != std::string::npos;
  acceptor_.assign(v6 ? tcp::v6() : tcp::v4(), *fd, ec);
  if (ec) {
    close(*fd);
    return Internal(fmt::format("listening on {}:{}: {}", options_.host, *port, ec.message()));
  }
  port_ = *port;
  return port_;
}

void HttpServer::Start() { net::co_spawn(io_, AcceptLoop(), LogFailure("http accept loop")); }

awaitable<void> HttpServer::AcceptLoop() {
  while (!stopping_) {
    beast::error_code ec;
    const size_t worker = next_worker_++ % workers_.size();
    const net::io_context::executor_type on = workers_[worker]->get_executor();
    TcpStream::socket_type socket =
        co_await acceptor_.async_accept(on, net::redirect_error(use_awaitable, ec));
    if (ec) {
      if (stopping_ || ec == net::error::operation_aborted) break;
      // Out of file descriptors and the like: back off instead of spinning, and log once per
      // interval, not once per attempt.
      const auto now = std::chrono::steady_clock::now();
      if (now - last_accept_log_ >= kAcceptLogInterval) {
        if (accept_failures_suppressed_ > 0) {
          spdlog::warn("accept failed: {} ({} more failures in the last {} s not logged)",
                       ec.message(), accept_failures_suppressed_,
                       std::chrono::duration_cast<std::chrono::seconds>(now - last_accept_log_)
                           .count());
        } else {
          spdlog::warn("accept failed: {}", ec.message());
        }
        last_accept_log_ = now;
        accept_failures_suppressed_ = 0;
      } else {
        ++accept_failures_suppressed_;
      }
      net::steady_timer t(io_, std::chrono::milliseconds(50));
      co_await t.async_wait(net::redirect_error(use_awaitable, ec));
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    net::co_spawn(on, Session(std::move(socket), worker), LogFailure("http session"));
  }
}

awaitable<void> HttpServer::LingeringClose(TcpStream& stream) {
  // Stop sending, then read and drop what the client still sends, so that it reads our
  // response before it sees the connection close.
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  std::array<char, 16384> scratch;
  size_t drained = 0;
  stream.expires_after(std::chrono::seconds(5));
  while (drained < (size_t{256} << 20)) {
    size_t n = co_await stream.async_read_some(net::buffer(scratch),
                                               net::redirect_error(use_awaitable, ec));
    if (ec) break;
    drained += n;
  }
}

awaitable<void> HttpServer::Session(TcpStream::socket_type socket, size_t worker) {
  TcpStream stream(std::move(socket));
  ReadBuffer buffer;  // a request's head: no read that finds nothing on a kept-alive connection
  // The reads' deadlines (idle, then the body's): no timer armed and cancelled per read.
  CoarseDeadline deadline(stream.socket());
  Connection conn{&stream, true};
  connections_[worker].insert(&conn);
  while (!stopping_) {
    conn.idle = true;
    HttpRequestParser parser(options_.request_fields);
    parser.header_limit(64 * 1024);
    parser.body_limit(options_.max_body_bytes);
    beast::error_code ec;
    deadline.Arm(options_.idle_timeout);
    HeadRead read(buffer, parser);  // ReadHead, in this coroutine's frame
    while (!read.Parse(ec)) {
      const size_t n = co_await stream.socket().async_read_some(
          read.buffers(), net::redirect_error(use_awaitable, ec));
      if (read.Read(n, ec)) break;
    }
    deadline.Disarm(ec);
    conn.idle = false;
    // Beast checks a declared Content-Length against the limit as soon as the header is in.
    const bool body_too_large = ec == http::error::body_limit;
    if (ec && !body_too_large) {
      if (ec == http::error::header_limit || ec.category() == http::make_error_code(http::error::bad_version).category()) {
        HttpRequest dummy;
        ResponseWriter w(stream, dummy, options_.write_timeout);
        co_await w.SendError(http::status::bad_request, "malformed HTTP request: " + ec.message());
      }
      break;
    }
    const auto& header = parser.get();
    auto too_large = [&]() -> awaitable<void> {
      HttpRequest head;
      head.version(header.version());
      head.keep_alive(false);
      ResponseWriter w(stream, head, options_.write_timeout);
      co_await w.SendError(http::status::payload_too_large,
                           "request body is over the limit of " +
                               std::to_string(options_.max_body_bytes) + " bytes",
                           "body");
      co_await LingeringClose(stream);
    };
    if (body_too_large ||
        (parser.content_length() && *parser.content_length() > options_.max_body_bytes)) {
      co_await too_large();
      break;
    }
    // The body often came with the header: parse what is buffered first, and read only when
    // more is needed.
    parser.eager(true);
    while (!parser.is_done() && buffer.size() > 0) {
      const size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == http::error::need_more) ec = {};
      if (ec || used == 0) break;
    }
    if (!ec && !parser.is_done()) {
      deadline.Arm(options_.read_timeout);
      co_await http::async_read(stream, buffer.plain(), parser,
                                net::redirect_error(use_awaitable, ec));
      deadline.Disarm(ec);
    }
    if (ec == http::error::body_limit) {
      co_await too_large();
      break;
    }
    if (ec) {
      if (ec.category() == http::make_error_code(http::error::bad_version).category()) {
        HttpRequest dummy;
        ResponseWriter w(stream, dummy, options_.write_timeout);
        co_await w.SendError(http::status::bad_request, "malformed HTTP request: " + ec.message());
      }
      break;
    }
    HttpRequest request = parser.release();
    ResponseWriter writer(stream, request, options_.write_timeout);
    ++active_requests_;
    std::string failure;
    try {
      co_await handler_(request, writer);
    } catch (const std::exception& e) {
      failure = e.what();
      spdlog::error("handler for {} failed: {}", std::string(request.target()), failure);
    }
    writer.StopWatching();
    if (!failure.empty() && !writer.sent()) {
      co_await writer.SendError(http::status::internal_server_error, "internal error: " + failure);
    }
    --active_requests_;
    if (!writer.ok() || !writer.keep_alive()) break;
  }
  connections_[worker].erase(&conn);
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream.socket().close(ec);
}

awaitable<void> HttpServer::Stop(std::chrono::steady_clock::duration deadline) {
  stopping_ = true;
  beast::error_code ec;
  acceptor_.close(ec);
  const auto until = std::chrono::steady_clock::now() + deadline;
  workers_stopped_ = 0;
  for (size_t i = 0; i < workers_.size(); ++i) {
    net::co_spawn(*workers_[i], StopWorker(i, until), LogFailure("http stop"));
  }
  // Each worker bounds its own wait by `until`.
  net::steady_timer t(io_);
  while (workers_stopped_.load() < workers_.size()) {
    t.expires_after(std::chrono::milliseconds(10));
    co_await t.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

awaitable<void> HttpServer::StopWorker(size_t worker,
                                       std::chrono::steady_clock::time_point until) {
  std::unordered_set<Connection*>& connections = connections_[worker];
  auto close = [&](bool all) {
    for (Connection* c : connections) {
      if (all || c->idle) {
        beast::error_code ignored;
        c->stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
        c->stream->socket().close(ignored);
      }
    }
  };
  beast::error_code ec;
  net::steady_timer t(*workers_[worker]);
  while (!connections.empty() && std::chrono::steady_clock::now() < until) {
    close(false);
    t.expires_after(std::chrono::milliseconds(10));
    co_await t.async_wait(net::redirect_error(use_awaitable, ec));
  }
  if (!connections.empty()) {
    spdlog::warn("stop deadline passed with {} connection(s) busy; closing them",
                 connections.size());
    close(true);
  }
  ++workers_stopped_;
}

}  // namespace bmas
