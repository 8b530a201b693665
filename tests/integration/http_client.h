#pragma once

// Test support: a blocking HTTP/1.1 client on Boost.Beast for servers on 127.0.0.1.
//
// HttpClient sends whole requests over one keep-alive connection (reconnecting when the
// server closed it). SseStream sends one request and reads its Server-Sent Events response
// incrementally, event by event, so that a test can act mid-stream or close the connection
// early. Every operation has a deadline. Not thread-safe.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/asio.h"
#include "common/result.h"

namespace bmas::testing {

// Header fields as (name, value), in the order sent or received.
using HeaderList = std::vector<std::pair<std::string, std::string>>;

// The value of the first field named `name` (case-insensitive), or nullopt.
std::optional<std::string> FindHeader(const HeaderList& headers, std::string_view name);

struct HttpResponse {
  int status = 0;
  std::string body;
  std::string content_type;
  bool keep_alive = false;
  HeaderList headers;  // every field of the response header

  std::optional<std::string> Header(std::string_view name) const {
    return FindHeader(headers, name);
  }
};

struct RequestOptions {
  std::string content_type = "application/json";
  bool chunked = false;  // send the body with chunked transfer encoding, no Content-Length
  HeaderList headers;    // more fields; one named like a field the client sets replaces it
};

class Connection;

class HttpClient {
 public:
  explicit HttpClient(uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  Result<HttpResponse> Get(std::string_view target);
  Result<HttpResponse> Post(std::string_view target, std::string body);
  // Any method. Errors say which step failed: "connect", "write" or "read".
  Result<HttpResponse> Request(http::verb method, std::string_view target, std::string body,
                               const RequestOptions& options = {});

  // How many TCP connections this client has opened.
  int connections_opened() const { return connections_opened_; }

  // A field sent with every later request (e.g. Authorization); replaces one of the same name.
  void SetDefaultHeader(std::string name, std::string value);

 private:
  uint16_t port_;
  std::chrono::milliseconds timeout_;
  HeaderList default_headers_;
  std::unique_ptr<Connection> connection_;
  int connections_opened_ = 0;
};

class SseStream {
 public:
  // Connects, POSTs `body` to `target` with `headers` added, and reads the response header.
  static Result<std::unique_ptr<SseStream>> Open(
      uint16_t port, std::string_view target, std::string body,
      std::chrono::milliseconds timeout = std::chrono::seconds(10), const HeaderList& headers = {});
  ~SseStream();
  SseStream(const SseStream&) = delete;
  SseStream& operator=(const SseStream&) = delete;

  int status() const { return status_; }
  const std::string& content_type() const { return content_type_; }
  const HeaderList& headers() const { return headers_; }

  // The data of the next event (what follows "data: "), or nullopt once the response has
  // ended cleanly. Fails when an event is not "data: ...\n\n" (after an "event: TYPE\n" line
  // if it has one), or the connection breaks.
  Result<std::optional<std::string>> Next();
  // All remaining events' data.
  Result<std::vector<std::string>> ReadAll();
  // The rest of the body, unparsed (for a response that is not an event stream).
  Result<std::string> ReadBody();
  // The whole body read so far, after de-chunking: the exact bytes the server framed.
  const std::string& raw_body() const { return raw_; }
  // Closes the connection at once, as a client that gives up mid-stream.
  void Close();

 private:
  SseStream(std::unique_ptr<Connection> connection, std::chrono::milliseconds timeout);
  Result<bool> ReadMore();  // false at the end of the body

  struct Parser;
  std::unique_ptr<Connection> connection_;
  std::unique_ptr<Parser> parser_;
  std::chrono::milliseconds timeout_;
  int status_ = 0;
  std::string content_type_;
  HeaderList headers_;
  std::string pending_;  // received, not yet returned as events
  std::string raw_;
};

}  // namespace bmas::testing
