#include "lxd/device_holders.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "lxd/holder_testing.h"

namespace bmas::lxd {
namespace {

// A file of the test's own; a match for it alone.
class DeviceHoldersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (/proc/PID/map_files, user namespaces)";
    char path[] = "/tmp/bmas-holders-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, 4096), 0);
    close(fd);
    path_ = path;
    ASSERT_EQ(stat(path, &file_), 0);
    match_ = [this](const struct stat& st) {
      return st.st_dev == file_.st_dev && st.st_ino == file_.st_ino;
    };
  }
  void TearDown() override {
    for (pid_t p : children_) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    if (!path_.empty()) unlink(path_.c_str());
  }

  // A child that runs `hold` (system calls only), then waits to be killed.
  void Start(void (*hold)(const char* path)) {
    const pid_t child = testing::StartHolder(hold, path_.c_str());
    ASSERT_GT(child, 0);
    children_.push_back(child);
  }

  bool Found() {
    auto holders = FindHolders(match_);
    return !holders.empty();
  }

  std::string path_;
  struct stat file_ {};
  FileMatch match_;
  std::vector<pid_t> children_;
};

TEST_F(DeviceHoldersTest, AHolderInNestedUserAndPidNamespacesIsFoundAndKilled) {
  EXPECT_FALSE(Found());
  // As `unshare -Urpf` does: the process that holds the file is pid 1 of a namespace of its own.
  Start([](const char* path) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0) _exit(1);
    int ready[2];
    if (pipe(ready) != 0) _exit(1);
    if (fork() == 0) {
      if (open(path, O_RDONLY) < 0) _exit(1);
      [[maybe_unused]] ssize_t w = write(ready[1], "x", 1);
      for (;;) pause();
    }
    char byte;
    if (read(ready[0], &byte, 1) != 1) _exit(1);
  });
  auto holders = FindHolders(match_);
  ASSERT_EQ(holders.size(), 1u);
  EXPECT_NE(holders[0].pid, children_[0]) << "the grandchild, in its own pid namespace";
  auto killed = KillHolders(match_, {}, std::chrono::seconds(10));
  ASSERT_TRUE(killed) << killed.error().message;
  EXPECT_EQ(*killed, 1);
  EXPECT_FALSE(Found());
}

TEST_F(DeviceHoldersTest, AMappingWhoseFdIsClosedStillHolds) {
  Start([](const char* path) {
    const int fd = open(path, O_RDWR);
    if (fd < 0 || mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED) _exit(1);
    close(fd);
  });
  auto holders = FindHolders(match_);
  ASSERT_EQ(holders.size(), 1u);
  EXPECT_EQ(holders[0].pid, children_[0]);
  EXPECT_EQ(DescribeHolders(holders), fmt::format("pid {} ({})", children_[0], holders[0].command));
  ASSERT_TRUE(KillHolders(match_, {}, std::chrono::seconds(10)));
  EXPECT_FALSE(Found());
}

TEST_F(DeviceHoldersTest, ProcessesNamedBesideAreKilledToo) {
  Start([](const char*) {});  // holds nothing, but the GPU's driver says it runs on it
  auto killed = KillHolders(match_, {children_[0]}, std::chrono::seconds(10));
  ASSERT_TRUE(killed) << killed.error().message;
  EXPECT_EQ(*killed, 1);
  int status = 0;
  ASSERT_EQ(waitpid(children_[0], &status, 0), children_[0]);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  children_.clear();
}

// A holder that SIGKILL does not end (a process stuck in the driver, in uninterruptible sleep)
// is an error that names it, after the timeout: the epilog then drains the node with that
// reason instead of unplugging. A kernel thread stands in for it: signals never end one.
TEST_F(DeviceHoldersTest, AHolderThatOutlivesSigkillIsAnErrorNamingIt) {
  // kthreadd: pid 2, parent 0, where the kernel's threads are visible (not in a pid namespace).
  std::ifstream stat_file("/proc/2/stat");
  std::string stat_line;
  std::getline(stat_file, stat_line);
  if (stat_line.find("(kthreadd) S 0 ") == std::string::npos) {
    GTEST_SKIP() << "no kernel thread visible here: " << stat_line;
  }
  auto held = KillHolders(match_, {2}, std::chrono::milliseconds(300));
  ASSERT_FALSE(held);
  EXPECT_EQ(held.error().message, "still held after SIGKILL by pid 2 (kthreadd)");
}

}  // namespace
}  // namespace bmas::lxd
