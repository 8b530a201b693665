#include "common/listen_socket.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "common/process.h"

namespace bmas {
namespace {

using ::testing::HasSubstr;

TEST(SplitHostPortTest, SplitsHostAndPortAndUnbracketsIpv6) {
  auto v4 = SplitHostPort("127.0.0.1:8080");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->first, "127.0.0.1");
  EXPECT_EQ(v4->second, 8080);
  auto v6 = SplitHostPort("[::1]:0");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->first, "::1");
  EXPECT_EQ(v6->second, 0);
  EXPECT_EQ(JoinHostPort("::1", 9), "[::1]:9");
  EXPECT_EQ(JoinHostPort("10.0.0.1", 9), "10.0.0.1:9");
  for (const char* bad : {"127.0.0.1", ":80", "host:", "host:65536", "host:8o", ""}) {
    auto r = SplitHostPort(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_THAT(r.error().message, HasSubstr("is not host:port")) << bad;
  }
}

TEST(ListenTcpTest, ListensAtOnceAndAPortHeldIsAClearError) {
  auto fd = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(fd) << fd.error().message;
  auto port = BoundPort(*fd);
  ASSERT_TRUE(port);
  EXPECT_NE(*port, 0);
  int listening = 0;
  socklen_t size = sizeof listening;
  ASSERT_EQ(getsockopt(*fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size), 0);
  EXPECT_EQ(listening, 1);
  EXPECT_EQ(fcntl(*fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  auto again = ListenTcp("127.0.0.1", *port);
  ASSERT_FALSE(again);
  EXPECT_THAT(again.error().message, HasSubstr("another process holds port " +
                                               std::to_string(*port)));
  auto named = ListenTcp("localhost", 0);
  ASSERT_FALSE(named);
  EXPECT_THAT(named.error().message, HasSubstr("is not an IP address"));
  close(*fd);
}

TEST(InheritedListenerTest, ServesTheDescriptorPassedForItsAddressOnceAndHidesTheVariable) {
  auto held = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(held);
  const uint16_t port = *BoundPort(*held);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const std::string value =
      ListenFdsValue({{"127.0.0.1", port, *held}, {"127.0.0.1", 1, pipe_fds[0]}});
  EXPECT_EQ(value, "3=127.0.0.1:" + std::to_string(port) + ",4=127.0.0.1:1");
  // In this process the descriptors are not at 3 and 4: name them as they are here.
  const std::string here = std::to_string(*held) + "=127.0.0.1:" + std::to_string(port) + "," +
                           std::to_string(pipe_fds[0]) + "=127.0.0.1:1";
  ASSERT_EQ(setenv("BMAS_LISTEN_FDS", here.c_str(), 1), 0);

  auto other = TakeInheritedListener("127.0.0.1", static_cast<uint16_t>(port + 1));
  ASSERT_TRUE(other);
  EXPECT_EQ(*other, -1) << "an address nothing was passed for";
  EXPECT_EQ(std::getenv("BMAS_LISTEN_FDS"), nullptr) << "the variable reaches no child";
  auto taken = TakeInheritedListener("127.0.0.1", port);
  ASSERT_TRUE(taken) << taken.error().message;
  EXPECT_EQ(*taken, *held);
  auto twice = TakeInheritedListener("127.0.0.1", port);
  ASSERT_TRUE(twice);
  EXPECT_EQ(*twice, -1) << "handed out once";
  // A descriptor that is not a listening socket on its port is refused, by number.
  auto wrong = TakeInheritedListener("127.0.0.1", 1);
  ASSERT_FALSE(wrong);
  EXPECT_THAT(wrong.error().message,
              HasSubstr("descriptor " + std::to_string(pipe_fds[0]) + " passed for 127.0.0.1:1"));
  close(*held);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

TEST(SpawnPassFdsTest, TheChildGetsThePassedDescriptorsAtThreeAndUpAndNothingElse) {
  auto held = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(held);
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  char out[] = "/tmp/bmas-pass-fds-XXXXXX";
  const int out_fd = mkstemp(out);
  ASSERT_GE(out_fd, 0);
  close(out_fd);
  SpawnOptions o;
  // In the child: 3 is the socket, 4 the pipe's read end; the write end was not passed.
  o.args = {"sh", "-c",
            "readlink /proc/$$/fd/3 | cut -d: -f1; readlink /proc/$$/fd/4 | cut -d: -f1; "
            "[ -e /proc/$$/fd/5 ] && echo five || echo none"};
  o.output = out;
  o.pass_fds = {*held, pipe_fds[0]};
  auto pid = Spawn(o);
  ASSERT_TRUE(pid) << pid.error().message;
  int status = 0;
  ASSERT_EQ(waitpid(*pid, &status, 0), *pid);
  EXPECT_EQ(status, 0);
  char text[256] = {};
  const int in = open(out, O_RDONLY);
  ASSERT_GE(in, 0);
  ASSERT_GT(read(in, text, sizeof text - 1), 0);
  close(in);
  unlink(out);
  EXPECT_EQ(std::string(text), "socket\npipe\nnone\n");
  close(*held);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

}  // namespace
}  // namespace bmas
