#pragma once

// HeadText: the text of an HTTP head (a status or request line, then "Name: value" lines),
// put together with memcpy in an array of its own, and moved to a string only when it
// outgrows the array. On a request path a head is a few hundred bytes: no allocation, and
// none of a string's checks and calls per piece appended.

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/asio.h"

namespace bmas {

template <size_t N>
class HeadText {
 public:
  HeadText() = default;
  // It points into itself: neither copied nor moved.
  HeadText(const HeadText&) = delete;
  HeadText& operator=(const HeadText&) = delete;

  HeadText& operator<<(std::string_view s) {
    if (size_ + s.size() > capacity_) Grow(s.size());
    std::memcpy(data_ + size_, s.data(), s.size());
    size_ += s.size();
    return *this;
  }
  HeadText& operator<<(uint64_t n) {
    if (size_ + 20 > capacity_) Grow(20);
    size_ = static_cast<size_t>(std::to_chars(data_ + size_, data_ + size_ + 20, n).ptr - data_);
    return *this;
  }
  // "name: value\r\n"
  HeadText& Field(std::string_view name, std::string_view value) {
    const size_t n = name.size() + value.size() + 4;
    if (size_ + n > capacity_) Grow(n);
    char* p = data_ + size_;
    std::memcpy(p, name.data(), name.size());
    p += name.size();
    *p++ = ':';
    *p++ = ' ';
    std::memcpy(p, value.data(), value.size());
    p += value.size();
    *p++ = '\r';
    *p++ = '\n';
    size_ += n;
    return *this;
  }

  std::string_view view() const { return {data_, size_}; }
  net::const_buffer buffer() const { return {data_, size_}; }

 private:
  // Moves the text to a string with room for `more` bytes after it (rare: out of line).
  [[gnu::noinline]] void Grow(size_t more) {
    capacity_ = std::max(2 * capacity_, size_ + more);
    std::string grown(capacity_, '\0');
    std::memcpy(grown.data(), data_, size_);
    heap_ = std::move(grown);
    data_ = heap_.data();
  }

  std::array<char, N> inline_;
  std::string heap_;
  char* data_ = inline_.data();
  size_t size_ = 0;
  size_t capacity_ = N;
};

}  // namespace bmas
