#include "gateway/upstream_parser.h"

#include <algorithm>
#include <cstring>

namespace bmas::gateway {

std::string_view UpstreamParser::content_type() const {
  if (!type_long_.empty()) return type_long_;
  return std::string_view(type_inline_.data(), type_size_);
}

void UpstreamParser::on_response_impl(int code, std::string_view /*reason*/, int /*version*/,
                                      beast::error_code& ec) {
  status_ = static_cast<unsigned>(code);
  ec = {};
}

void UpstreamParser::on_field_impl(http::field name, std::string_view /*name_string*/,
                                   std::string_view value, beast::error_code& ec) {
  ec = {};
  if (name != http::field::content_type || has_type_) return;
  has_type_ = true;
  if (value.size() <= type_inline_.size()) {
    std::memcpy(type_inline_.data(), value.data(), value.size());
    type_size_ = value.size();
  } else {
    type_long_.assign(value);
  }
}

size_t UpstreamParser::on_body_impl(std::string_view body, beast::error_code& ec) {
  if (body_.data == nullptr) {
    ec = http::error::need_buffer;
    return 0;
  }
  const size_t n = std::min(body.size(), body_.size);
  std::memcpy(body_.data, body.data(), n);
  body_.data += n;
  body_.size -= n;
  ec = n == body.size() ? beast::error_code() : beast::error_code(http::error::need_buffer);
  return n;
}

size_t UpstreamParser::on_chunk_body_impl(std::uint64_t /*remain*/, std::string_view body,
                                          beast::error_code& ec) {
  return on_body_impl(body, ec);
}

}  // namespace bmas::gateway
