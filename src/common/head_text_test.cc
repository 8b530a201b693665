#include "common/head_text.h"

#include <gtest/gtest.h>

#include <string>

namespace bmas {
namespace {

TEST(HeadTextTest, PutsTextNumbersAndFields) {
  HeadText<64> head;
  head << "HTTP/1.1 " << uint64_t{200} << " OK\r\n";
  head.Field("Content-Length", "0");
  EXPECT_EQ(head.view(), "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n");
  EXPECT_EQ(head.buffer().size(), head.view().size());
  HeadText<64> largest;
  largest << uint64_t{18446744073709551615u};
  EXPECT_EQ(largest.view(), "18446744073709551615");
}

// Past its array it goes on in a string, whatever the sizes of the pieces.
TEST(HeadTextTest, OutgrowingItsArrayKeepsEveryByte) {
  for (size_t piece : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{300}}) {
    HeadText<8> head;
    std::string want;
    for (int i = 0; i < 50; ++i) {
      const std::string name(piece, static_cast<char>('a' + i % 26));
      head.Field(name, std::to_string(i));
      want += name + ": " + std::to_string(i) + "\r\n";
      head << uint64_t(i);
      want += std::to_string(i);
    }
    EXPECT_EQ(head.view(), want) << piece;
  }
}

}  // namespace
}  // namespace bmas
