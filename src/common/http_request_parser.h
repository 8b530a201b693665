#pragma once

// The parser of a client's request in HttpServer: Beast's HTTP/1 request parser (basic_parser),
// with a derived class that builds the HttpRequest as http::request_parser<string_body> does
// but keeps only the header fields the server's handlers read. Each field kept costs an
// allocation and an insert into the fields' tree; an OpenAI client sends a dozen fields
// (User-Agent, Accept, eight X-Stainless-*) that the gateway never reads. Beast still checks the
// whole head (its syntax, Content-Length, Transfer-Encoding and Connection) and the body
// limit. The Connection field is always kept: HttpRequest::keep_alive() reads it.

#include <cstdint>
#include <span>
#include <string_view>

#include "common/asio.h"

namespace bmas {

using HttpRequest = http::request<http::string_body>;

class HttpRequestParser : public http::basic_parser<true> {
 public:
  // `fields`: the fields kept besides Connection; empty: every field, as Beast's own parser.
  // Not copied: it outlives the parser.
  explicit HttpRequestParser(std::span<const http::field> fields = {}) : fields_(fields) {}

  const HttpRequest& get() const { return request_; }
  HttpRequest release() { return std::move(request_); }

 private:
  bool Keeps(http::field name) const;

  void on_request_impl(http::verb method, std::string_view method_string, std::string_view target,
                       int version, beast::error_code& ec) override;
  void on_response_impl(int, std::string_view, int, beast::error_code& ec) override {
    ec = http::error::bad_version;  // not a request (never called: basic_parser<true>)
  }
  void on_field_impl(http::field name, std::string_view name_string, std::string_view value,
                     beast::error_code& ec) override;
  void on_header_impl(beast::error_code& ec) override { ec = {}; }
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         beast::error_code& ec) override;
  size_t on_body_impl(std::string_view body, beast::error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t /*size*/, std::string_view /*extensions*/,
                            beast::error_code& ec) override {
    ec = {};
  }
  size_t on_chunk_body_impl(std::uint64_t /*remain*/, std::string_view body,
                            beast::error_code& ec) override {
    return on_body_impl(body, ec);
  }
  void on_finish_impl(beast::error_code& ec) override { ec = {}; }

  std::span<const http::field> fields_;
  HttpRequest request_;
};

}  // namespace bmas
