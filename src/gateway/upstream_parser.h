#pragma once

// The parser of a backend's response head and body: Beast's HTTP/1 parser (basic_parser), with
// a derived class that keeps only what the relay reads of the head, the status and the first
// Content-Type, rather than a fields container (an allocation and a tree insert per field),
// and puts body bytes into a buffer the caller sets before each read, as buffer_body does.
// Beast still checks the whole head: its syntax, Content-Length, Transfer-Encoding and
// Connection (keep_alive()).

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/asio.h"

namespace bmas::gateway {

class UpstreamParser : public http::basic_parser<false> {
 public:
  // Where the next body bytes go: `data` advances and `size` shrinks as they are put there.
  // With no room left (size 0), a read ends with http::error::need_buffer.
  struct Body {
    char* data = nullptr;
    size_t size = 0;
  };

  UpstreamParser() = default;

  http::status result() const { return static_cast<http::status>(status_); }
  // The first Content-Type field's value; "" if none came.
  std::string_view content_type() const;
  Body& body() { return body_; }

 private:
  void on_request_impl(http::verb, std::string_view, std::string_view, int,
                       beast::error_code&) override {}
  void on_response_impl(int code, std::string_view reason, int version,
                        beast::error_code& ec) override;
  void on_field_impl(http::field name, std::string_view name_string, std::string_view value,
                     beast::error_code& ec) override;
  void on_header_impl(beast::error_code& ec) override { ec = {}; }
  void on_body_init_impl(const boost::optional<std::uint64_t>& /*content_length*/,
                         beast::error_code& ec) override {
    ec = {};
  }
  size_t on_body_impl(std::string_view body, beast::error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t /*size*/, std::string_view /*extensions*/,
                            beast::error_code& ec) override {
    ec = {};
  }
  size_t on_chunk_body_impl(std::uint64_t remain, std::string_view body,
                            beast::error_code& ec) override;
  void on_finish_impl(beast::error_code& ec) override { ec = {}; }

  unsigned status_ = 0;
  bool has_type_ = false;
  // A usual Content-Type fits here; a longer one goes to type_long_.
  std::array<char, 96> type_inline_;
  size_t type_size_ = 0;
  std::string type_long_;
  Body body_;
};

}  // namespace bmas::gateway
