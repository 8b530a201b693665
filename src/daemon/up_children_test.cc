#include "daemon/up_children.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/listen_socket.h"

namespace bmas {
namespace {

// A part up gives up on (the dashboard's first start failed) leaves no socket behind: its port
// can be bound again.
TEST(UpChildrenTest, APartGivenUpOnFreesItsPorts) {
  Child c;
  auto port = HoldListener(c, "127.0.0.1", 0);
  ASSERT_TRUE(port) << port.error().message;
  ASSERT_EQ(c.listeners.size(), 1u);
  EXPECT_FALSE(ListenTcp("127.0.0.1", *port)) << "held";
  ReleaseListeners(c);
  EXPECT_TRUE(c.listeners.empty());
  auto again = ListenTcp("127.0.0.1", *port);
  ASSERT_TRUE(again) << again.error().message;
  close(*again);
}

}  // namespace
}  // namespace bmas
