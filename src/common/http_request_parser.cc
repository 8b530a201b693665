#include "common/http_request_parser.h"

#include <algorithm>
#include <new>

namespace bmas {

bool HttpRequestParser::Keeps(http::field name) const {
  return fields_.empty() || name == http::field::connection ||
         (name != http::field::unknown &&
          std::find(fields_.begin(), fields_.end(), name) != fields_.end());
}

void HttpRequestParser::on_request_impl(http::verb method, std::string_view method_string,
                                        std::string_view target, int version,
                                        beast::error_code& ec) {
  try {
    request_.target(target);
    if (method != http::verb::unknown) {
      request_.method(method);
    } else {
      request_.method_string(method_string);
    }
    ec = {};
  } catch (const std::bad_alloc&) {
    ec = http::error::bad_alloc;
  }
  request_.version(version);
}

void HttpRequestParser::on_field_impl(http::field name, std::string_view name_string,
                                      std::string_view value, beast::error_code& ec) {
  ec = {};
  if (Keeps(name)) request_.insert(name, name_string, value);
}

void HttpRequestParser::on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                                          beast::error_code& ec) {
  ec = {};
  if (!content_length) return;
  if (*content_length > request_.body().max_size()) {
    ec = http::error::buffer_overflow;
    return;
  }
  request_.body().reserve(static_cast<size_t>(*content_length));
}

size_t HttpRequestParser::on_body_impl(std::string_view body, beast::error_code& ec) {
  ec = {};
  if (body.size() > request_.body().max_size() - request_.body().size()) {
    ec = http::error::buffer_overflow;
    return 0;
  }
  request_.body().append(body);
  return body.size();
}

}  // namespace bmas
