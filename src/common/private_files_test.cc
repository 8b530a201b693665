// Private directories and lock files: what a local user may plant in a shared place (a symlink,
// a file, a held lock) must not steer or block root. The attacks run as `nobody`.

#include "common/private_files.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grp.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class PrivateFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = fs::temp_directory_path() / "bmas-private-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    base_ = tmpl;
    chmod(base_.c_str(), 0755);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(base_, ec);
  }

  // Runs `body` in a child as `nobody` (root only); returns its exit status.
  static int AsNobody(const std::function<int()>& body) {
    passwd* pw = getpwnam("nobody");
    if (pw == nullptr) return -1;
    pid_t child = fork();
    if (child == 0) {
      if (setgroups(0, nullptr) != 0 || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0) {
        _exit(99);
      }
      _exit(body());
    }
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  }

  std::string base_;
};

TEST_F(PrivateFilesTest, MakesTheDirectoryAndLocksAFileInIt) {
  const std::string dir = base_ + "/run";
  auto fd = LockPrivateFile(dir, "x.lock", /*wait=*/false);
  ASSERT_TRUE(fd) << fd.error().message;
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(stat((dir + "/x.lock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // Held: a second taker is told at once, without waiting.
  auto again = LockPrivateFile(dir, "x.lock", /*wait=*/false);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kUnavailable);
  close(*fd);
  auto after = LockPrivateFile(dir, "x.lock", /*wait=*/false);
  ASSERT_TRUE(after) << after.error().message;
  close(*after);
}

TEST_F(PrivateFilesTest, ADirectoryOthersMayWriteIsRefusedNamingTheFix) {
  const std::string dir = base_ + "/open";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod(dir.c_str(), 01777), 0);
  auto fd = OpenPrivateDir(dir);
  ASSERT_FALSE(fd);
  EXPECT_THAT(fd.error().message, HasSubstr("others may write it"));
  EXPECT_THAT(fd.error().message, HasSubstr(dir));
}

TEST_F(PrivateFilesTest, ASymlinkInPlaceOfTheDirectoryOrTheFileIsNotFollowed) {
  const std::string target = base_ + "/target";
  ASSERT_EQ(mkdir(target.c_str(), 0755), 0);
  ASSERT_EQ(symlink(target.c_str(), (base_ + "/run").c_str()), 0);
  auto dir = OpenPrivateDir(base_ + "/run");
  ASSERT_FALSE(dir);
  EXPECT_THAT(dir.error().message, HasSubstr("symlink"));

  const std::string real = base_ + "/real";
  ASSERT_EQ(mkdir(real.c_str(), 0755), 0);
  ASSERT_EQ(symlink((base_ + "/planted").c_str(), (real + "/x.lock").c_str()), 0);
  auto fd = LockPrivateFile(real, "x.lock", /*wait=*/true);
  EXPECT_FALSE(fd);
  EXPECT_FALSE(fs::exists(base_ + "/planted")) << "root created a file where a symlink pointed";
}

// The attack of issue 11, finding 4: a user got to the workspace lock first (in /run/lock,
// world-writable), held it or planted a symlink. Root's lock now lives where users cannot write.
TEST_F(PrivateFilesTest, AUserCannotPlantOrHoldRootsLock) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (root's lock directory, and `nobody`)";
  auto fd = LockPrivateFile(kRootRunDir, "private-files-test.lock", /*wait=*/false);
  ASSERT_TRUE(fd) << fd.error().message;
  close(*fd);
  const std::string planted = std::string(kRootRunDir) + "/planted-by-nobody";
  const int code = AsNobody([&] {
    // Neither a file nor a symlink can be made there, and the lock file cannot be opened.
    if (open(planted.c_str(), O_CREAT | O_WRONLY, 0644) >= 0) return 1;
    if (symlink("/etc/passwd", planted.c_str()) == 0) return 2;
    const std::string lock = std::string(kRootRunDir) + "/private-files-test.lock";
    int held = open(lock.c_str(), O_RDONLY);
    if (held >= 0 && flock(held, LOCK_EX | LOCK_NB) == 0) return 3;
    return 0;
  });
  EXPECT_EQ(code, 0) << "1: created a file, 2: a symlink, 3: held root's lock";
  EXPECT_FALSE(fs::exists(planted));
  // Root still takes it.
  auto again = LockPrivateFile(kRootRunDir, "private-files-test.lock", /*wait=*/false);
  ASSERT_TRUE(again) << again.error().message;
  close(*again);
  unlink((std::string(kRootRunDir) + "/private-files-test.lock").c_str());
}

// Root's chown and chmod in a directory that `nobody` writes (as the service account writes the
// store's): a symlink there is refused, not followed, and so is a file with a second name; a
// plain file is handed over.
TEST_F(PrivateFilesTest, HandOverFollowsNoLinkInAnotherAccountsDirectory) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (chown, and `nobody`)";
  passwd* pw = getpwnam("nobody");
  ASSERT_NE(pw, nullptr);
  const std::string theirs = base_ + "/theirs";
  ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(chown(theirs.c_str(), pw->pw_uid, pw->pw_gid), 0);
  const std::string canary = base_ + "/canary";
  ASSERT_TRUE(std::ofstream(canary) << "root's\n");
  ASSERT_EQ(chmod(canary.c_str(), 0600), 0);
  ASSERT_EQ(AsNobody([&] {
              return symlink(canary.c_str(), (theirs + "/link").c_str()) == 0 &&
                             close(open((theirs + "/plain").c_str(), O_CREAT | O_WRONLY, 0644)) ==
                                 0 &&
                             link((theirs + "/plain").c_str(), (theirs + "/twice").c_str()) == 0
                         ? 0
                         : 1;
            }),
            0);
  const int dir = open(theirs.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  ASSERT_GE(dir, 0);
  const HandOver to_root{0, 0, 0644, std::nullopt};
  auto linked = HandOverInDir(dir, theirs, "link", to_root);
  ASSERT_FALSE(linked);
  EXPECT_THAT(linked.error().message, HasSubstr("symlink"));
  struct stat st;
  ASSERT_EQ(stat(canary.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u) << "root's chmod followed the link";
  auto twice = HandOverInDir(dir, theirs, "twice", to_root);
  ASSERT_FALSE(twice);
  EXPECT_THAT(twice.error().message, HasSubstr("hard links"));
  EXPECT_TRUE(HandOverInDir(dir, theirs, "absent", to_root));
  ASSERT_EQ(unlink((theirs + "/twice").c_str()), 0);
  ASSERT_TRUE(HandOverInDir(dir, theirs, "plain", to_root));
  ASSERT_EQ(stat((theirs + "/plain").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  close(dir);

  // A path through the link is refused whole, not only in its last component.
  ASSERT_EQ(AsNobody([&] { return symlink(base_.c_str(), (theirs + "/up").c_str()); }), 0);
  auto via = OpenDirNoSymlinks(theirs + "/up");
  ASSERT_FALSE(via);
  EXPECT_THAT(via.error().message, HasSubstr("symlink"));
  auto direct = OpenDirNoSymlinks(theirs);
  ASSERT_TRUE(direct) << direct.error().message;
  close(*direct);
}

}  // namespace
}  // namespace bmas
