#pragma once

// A small HTTP/1.1 server on Boost.Beast and C++20 coroutines, shared by bmas's servers.
//
// Keep-alive, a body size limit answered with 413 (after a lingering close, as nginx does, so
// the client sees the 413 rather than a broken pipe), deadlines on every read and write,
// chunked streaming responses, and a graceful stop: no new connections, in-flight requests
// finish up to a deadline.
//
// Accepts on one io_context and runs each connection on one of its worker io_contexts (round
// robin), each run by one thread; a connection stays on its worker for its whole life. The
// handler is called on the connection's worker.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/asio.h"
#include "common/head_text.h"
#include "common/http_request_parser.h"
#include "common/result.h"

namespace bmas {

// Sends one response to the request being handled: whole, or as a chunked stream.
class ResponseWriter {
 public:
  ResponseWriter(TcpStream& stream, const HttpRequest& request,
                 std::chrono::steady_clock::duration write_timeout);

  using Headers = std::vector<std::pair<http::field, std::string>>;

  // A whole response. Returns false when the client is gone.
  awaitable<bool> Send(http::status status, std::string_view content_type, std::string body,
                       Headers headers = {});
  // Send in two steps, for a handler that sends a response per request and spares Send's
  // coroutine frame: SendAtOnce writes what the socket takes now, and returns true when
  // nothing is left to write (ok() says whether the client is gone); otherwise SendRest
  // writes the rest, and returns what Send would.
  //   if (!writer.SendAtOnce(status, type, std::move(body))) co_await writer.SendRest();
  bool SendAtOnce(http::status status, std::string_view content_type, std::string body,
                  const Headers& headers = {});
  awaitable<bool> SendRest();
  // An OpenAI-style error object: {"error": {"message", "type", "param", "code"}}.
  awaitable<bool> SendError(const Error& error);
  awaitable<bool> SendError(http::status status, std::string message, std::string param = {},
                            Headers headers = {});

  // A chunked response: the header, then chunks, then the end.
  awaitable<bool> StartStream(http::status status, std::string_view content_type);
  awaitable<bool> SendChunk(std::string_view data);
  awaitable<bool> EndStream();

  // Calls `on_gone` (once, on this thread) if the client closes its connection before
  // StopWatching(): lets a handler that waits a long time before it writes (a non-streaming
  // completion) abandon work nobody will read. Pipelined bytes from the client end the watch.
  void WatchForDisconnect(std::function<void()> on_gone);
  void StopWatching();

  // A header for the response this writer sends (Send, SendError, StartStream), named by its
  // text: for the fields Beast has no name for (Content-Security-Policy, Server-Timing, ...).
  void AddHeader(std::string_view name, std::string_view value) {
    extra_headers_.Field(name, value);
  }

  bool ok() const { return ok_; }
  bool keep_alive() const { return keep_alive_; }
  // The client's IP address as text; "" when the socket no longer knows it.
  std::string remote_address() const;
  bool sent() const { return sent_; }

 private:
  struct Watch {
    bool active = true;
    char byte = 0;  // the peek's buffer
    std::function<void()> on_gone;
  };

  TcpStream& stream_;
  std::shared_ptr<Watch> watch_;  // shared with the pending wait, which may outlive this
  unsigned version_;
  bool keep_alive_;
  std::chrono::steady_clock::duration write_timeout_;
  bool ok_ = true;
  bool sent_ = false;
  HeadText<128> extra_headers_;  // "Name: value\r\n" lines from AddHeader
  // What SendAtOnce left to SendRest: the response's bytes after the first `unsent_from_`.
  std::string unsent_head_, unsent_body_;
  size_t unsent_from_ = 0;
};

// Handles one request; must send exactly one response through the writer.
using HttpHandler = std::function<awaitable<void>(HttpRequest&, ResponseWriter&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  size_t max_body_bytes = 4 << 20;
  std::chrono::seconds idle_timeout{75};
  std::chrono::seconds read_timeout{60};
  std::chrono::seconds write_timeout{60};
  std::string server_name = "bmas";
  // The request header fields the handler reads (HttpRequestParser): others are checked and
  // dropped, not stored. Empty: every field.
  std::vector<http::field> request_fields;
};

class HttpServer {
 public:
  HttpServer(net::io_context& io, HttpServerOptions options, HttpHandler handler);
  // `workers` run the connections; the first accepts (it may be `io` of the other form).
  HttpServer(std::vector<net::io_context*> workers, HttpServerOptions options,
             HttpHandler handler);

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Listens on host:port (common/listen_socket.h): on the socket a parent passed down for that
  // address, or on one it binds and listens on at once; returns the port. Errors name the port
  // and the fix.
  Result<uint16_t> Listen();
  // Starts accepting. REQUIRES: Listen() succeeded.
  void Start();
  // Stops accepting and closes idle connections; waits until in-flight requests end or
  // `deadline` passes, then closes what remains.
  awaitable<void> Stop(std::chrono::steady_clock::duration deadline);

  size_t active_requests() const { return active_requests_.load(); }
  uint16_t port() const { return port_; }

 private:
  struct Connection {
    TcpStream* stream;
    bool idle;
  };
  awaitable<void> AcceptLoop();
  awaitable<void> Session(TcpStream::socket_type socket, size_t worker);
  awaitable<void> LingeringClose(TcpStream& stream);
  // On worker `worker`: closes idle connections until none is left or `until`, then the rest.
  awaitable<void> StopWorker(size_t worker, std::chrono::steady_clock::time_point until);

  std::vector<net::io_context*> workers_;
  net::io_context& io_;  // workers_[0]: accepts
  HttpServerOptions options_;
  HttpHandler handler_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  size_t next_worker_ = 0;
  // Accept failures (EMFILE, ENFILE) are logged at most once per interval. Accept loop only.
  static constexpr std::chrono::seconds kAcceptLogInterval{5};
  std::chrono::steady_clock::time_point last_accept_log_{};
  uint64_t accept_failures_suppressed_ = 0;
  std::atomic<bool> stopping_ = false;
  std::atomic<size_t> active_requests_ = 0;
  std::atomic<size_t> workers_stopped_ = 0;
  // Per worker, touched only on that worker's thread.
  std::vector<std::unordered_set<Connection*>> connections_;
};

// The HTTP status for an error code: the one place this mapping lives.
http::status HttpStatusFor(ErrorCode code);

// {"error": {"message": ..., "type": ..., "param": ..., "code": <status>}}
std::string ErrorJson(http::status status, std::string_view message, std::string_view param);

}  // namespace bmas
