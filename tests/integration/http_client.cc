#include "http_client.h"

#include <fmt/format.h>

#include <limits>

namespace bmas::testing {

// One TCP connection with its own io_context; each blocking call runs one asynchronous
// operation to completion, bounded by the tcp_stream's deadline.
class Connection {
 public:
  explicit Connection(std::chrono::milliseconds timeout) : stream_(io_), timeout_(timeout) {}

  // Starts an operation with `start(handler)` and runs until it completes or times out.
  template <typename Start>
  beast::error_code Run(Start start) {
    beast::error_code result = net::error::timed_out;
    stream_.expires_after(timeout_);
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    io_.restart();
    io_.run();
    return result;
  }

  beast::error_code Connect(uint16_t port) {
    tcp::endpoint endpoint(net::ip::make_address_v4("127.0.0.1"), port);
    return Run([&](auto handler) { stream_.async_connect(endpoint, std::move(handler)); });
  }

  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  bool is_open() { return stream_.socket().is_open(); }
  beast::tcp_stream& stream() { return stream_; }
  beast::flat_buffer& buffer() { return buffer_; }

 private:
  net::io_context io_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::chrono::milliseconds timeout_;
};

std::optional<std::string> FindHeader(const HeaderList& headers, std::string_view name) {
  for (const auto& [n, v] : headers) {
    if (beast::iequals(n, name)) return v;
  }
  return std::nullopt;
}

namespace {

http::request<http::string_body> MakeRequest(http::verb method, std::string_view target,
                                             uint16_t port, std::string body,
                                             const RequestOptions& options) {
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, fmt::format("127.0.0.1:{}", port));
  req.set(http::field::user_agent, "bmas-integration-test");
  if (!body.empty() || method == http::verb::post) {
    req.set(http::field::content_type, options.content_type);
  }
  for (const auto& [name, value] : options.headers) req.set(name, value);
  req.body() = std::move(body);
  if (options.chunked) {
    req.chunked(true);
  } else {
    req.prepare_payload();
  }
  return req;
}

Error Failed(std::string_view step, const beast::error_code& ec) {
  return Internal(fmt::format("{} failed: {}", step, ec.message()));
}

template <typename Fields>
HeaderList HeadersOf(const Fields& fields) {
  HeaderList out;
  for (const auto& f : fields) {
    out.emplace_back(std::string(f.name_string()), std::string(f.value()));
  }
  return out;
}

}  // namespace

HttpClient::HttpClient(uint16_t port, std::chrono::milliseconds timeout)
    : port_(port), timeout_(timeout) {}

HttpClient::~HttpClient() = default;

void HttpClient::SetDefaultHeader(std::string name, std::string value) {
  std::erase_if(default_headers_, [&](const auto& h) { return beast::iequals(h.first, name); });
  default_headers_.emplace_back(std::move(name), std::move(value));
}

Result<HttpResponse> HttpClient::Get(std::string_view target) {
  return Request(http::verb::get, target, "");
}

Result<HttpResponse> HttpClient::Post(std::string_view target, std::string body) {
  return Request(http::verb::post, target, std::move(body));
}

Result<HttpResponse> HttpClient::Request(http::verb method, std::string_view target,
                                         std::string body, const RequestOptions& options) {
  if (connection_ == nullptr || !connection_->is_open()) {
    connection_ = std::make_unique<Connection>(timeout_);
    if (auto ec = connection_->Connect(port_)) {
      connection_.reset();
      return Failed("connect", ec);
    }
    ++connections_opened_;
  }
  Connection& c = *connection_;
  RequestOptions all = options;
  all.headers.insert(all.headers.begin(), default_headers_.begin(), default_headers_.end());
  auto req = MakeRequest(method, target, port_, std::move(body), all);
  if (auto ec = c.Run([&](auto h) { http::async_write(c.stream(), req, std::move(h)); })) {
    connection_.reset();
    return Failed("write", ec);
  }
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  if (auto ec =
          c.Run([&](auto h) { http::async_read(c.stream(), c.buffer(), parser, std::move(h)); })) {
    connection_.reset();
    return Failed("read", ec);
  }
  auto res = parser.release();
  HttpResponse out;
  out.status = res.result_int();
  out.body = std::move(res.body());
  out.content_type = std::string(res[http::field::content_type]);
  out.keep_alive = res.keep_alive();
  out.headers = HeadersOf(res.base());
  if (!out.keep_alive) connection_.reset();
  return out;
}

struct SseStream::Parser {
  http::response_parser<http::buffer_body> parser;
};

SseStream::SseStream(std::unique_ptr<Connection> connection, std::chrono::milliseconds timeout)
    : connection_(std::move(connection)), parser_(std::make_unique<Parser>()), timeout_(timeout) {
  // Not boost::none: Boost 1.74 compares a Content-Length with a disabled limit as larger.
  parser_->parser.body_limit(std::numeric_limits<std::uint64_t>::max());
}

SseStream::~SseStream() = default;

Result<std::unique_ptr<SseStream>> SseStream::Open(uint16_t port, std::string_view target,
                                                   std::string body,
                                                   std::chrono::milliseconds timeout,
                                                   const HeaderList& headers) {
  auto connection = std::make_unique<Connection>(timeout);
  if (auto ec = connection->Connect(port)) return Failed("connect", ec);
  Connection& c = *connection;
  RequestOptions options;
  options.headers = headers;
  auto req = MakeRequest(http::verb::post, target, port, std::move(body), options);
  req.set(http::field::accept, "text/event-stream");
  if (auto ec = c.Run([&](auto h) { http::async_write(c.stream(), req, std::move(h)); })) {
    return Failed("write", ec);
  }
  std::unique_ptr<SseStream> s(new SseStream(std::move(connection), timeout));
  if (auto ec = c.Run([&](auto h) {
        http::async_read_header(c.stream(), c.buffer(), s->parser_->parser, std::move(h));
      })) {
    return Failed("reading the response header", ec);
  }
  const auto& head = s->parser_->parser.get();
  s->status_ = head.result_int();
  s->content_type_ = std::string(head[http::field::content_type]);
  s->headers_ = HeadersOf(head.base());
  return s;
}

Result<bool> SseStream::ReadMore() {
  auto& p = parser_->parser;
  if (p.is_done()) return false;
  if (connection_ == nullptr) return Internal("the stream was closed");
  char buf[16384];
  p.get().body().data = buf;
  p.get().body().size = sizeof buf;
  Connection& c = *connection_;
  auto ec = c.Run([&](auto h) { http::async_read_some(c.stream(), c.buffer(), p, std::move(h)); });
  if (ec == http::error::need_buffer) ec = {};
  if (ec) return Failed("reading the event stream", ec);
  const size_t n = sizeof buf - p.get().body().size;
  pending_.append(buf, n);
  raw_.append(buf, n);
  return true;
}

Result<std::optional<std::string>> SseStream::Next() {
  while (true) {
    if (size_t end = pending_.find("\n\n"); end != std::string::npos) {
      std::string event = pending_.substr(0, end);
      pending_.erase(0, end + 2);
      // A typed event (the Responses API) names its type on a line of its own first.
      if (event.starts_with("event: ") && event.find('\n') != std::string::npos) {
        event.erase(0, event.find('\n') + 1);
      }
      if (!event.starts_with("data: ") || event.find('\n') != std::string::npos) {
        return Internal("malformed SSE event: " + event);
      }
      return std::optional<std::string>(event.substr(6));
    }
    auto more = ReadMore();
    if (!more) return more.error();
    if (!*more) {
      if (!pending_.empty()) return Internal("the stream ended inside an event: " + pending_);
      return std::optional<std::string>();
    }
  }
}

Result<std::vector<std::string>> SseStream::ReadAll() {
  std::vector<std::string> events;
  while (true) {
    auto next = Next();
    if (!next) return next.error();
    if (!*next) return events;
    events.push_back(std::move(**next));
  }
}

Result<std::string> SseStream::ReadBody() {
  while (true) {
    auto more = ReadMore();
    if (!more) return more.error();
    if (!*more) break;
  }
  std::string body = std::move(pending_);
  pending_.clear();
  return body;
}

void SseStream::Close() {
  if (connection_ != nullptr) connection_->Close();
  connection_.reset();
}

}  // namespace bmas::testing
