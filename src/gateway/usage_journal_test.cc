#include "gateway/usage_journal.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace bmas::gateway {
namespace {

class UsageJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bmas-journal-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = UsageJournalPath(dir_, 8000);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static UsageDelta Delta(int64_t minute, const std::string& user, int64_t prompt) {
    return UsageDelta{minute, user, "llama", "http://127.0.0.1:18100", 1, prompt, 2 * prompt};
  }

  std::string dir_;
  std::string path_;
};

int64_t Sum(const std::vector<UsageDelta>& ds, int64_t UsageDelta::*field) {
  int64_t n = 0;
  for (const UsageDelta& d : ds) n += d.*field;
  return n;
}

TEST_F(UsageJournalTest, AKilledGatewaysUsageIsThereForTheNextOne) {
  // A child appends 1000 records and is killed with SIGKILL: no destructor, no flush.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto j = UsageJournal::Open(path_);
    if (!j) _exit(2);
    for (int i = 0; i < 1000; ++i) {
      if (!(*j)->Append(Delta(29000000 + i / 600, "student" + std::to_string(i % 7), 10))) _exit(3);
    }
    raise(SIGKILL);
    _exit(4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_EQ(std::filesystem::status(path_).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

  auto j = UsageJournal::Open(path_);
  ASSERT_TRUE(j) << j.error().message;
  auto recovered = (*j)->TakeRecovered();
  EXPECT_EQ(Sum(recovered, &UsageDelta::requests), 1000);
  EXPECT_EQ(Sum(recovered, &UsageDelta::prompt_tokens), 10000);
  EXPECT_EQ(Sum(recovered, &UsageDelta::completion_tokens), 20000);
  EXPECT_EQ(recovered.front().user, "student0");
  EXPECT_EQ(recovered.front().backend, "http://127.0.0.1:18100");
  EXPECT_TRUE((*j)->TakeRecovered().empty());
  // Kept until a flush releases them: a second kill now still finds them.
  j->reset();
  j = UsageJournal::Open(path_);
  ASSERT_TRUE(j);
  auto again = (*j)->TakeRecovered();
  EXPECT_EQ(Sum(again, &UsageDelta::requests), 1000);
  // The first flush seals them with what came since, and releases them once stored.
  ASSERT_TRUE((*j)->Append(Delta(29000010, "late", 5)));
  auto sealed = (*j)->Seal();
  EXPECT_FALSE(sealed.empty());
  ASSERT_TRUE((*j)->Append(Delta(29000010, "after-seal", 1)));
  (*j)->Release(sealed);
  j->reset();
  j = UsageJournal::Open(path_);
  ASSERT_TRUE(j);
  auto left = (*j)->TakeRecovered();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].user, "after-seal");
}

TEST_F(UsageJournalTest, ARecordCutShortIsTheEndOfItsSegment) {
  {
    auto j = UsageJournal::Open(path_);
    ASSERT_TRUE(j);
    ASSERT_TRUE((*j)->Append(Delta(1, "a", 1)));
    ASSERT_TRUE((*j)->Append(Delta(1, "b", 2)));
  }
  // A third record whose copy was cut before its length: bytes after the second, length 0.
  {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 2 * 80 + 8);
    f.write("\x07\x07\x07\x07", 4);
  }
  auto j = UsageJournal::Open(path_);
  ASSERT_TRUE(j);
  auto recovered = (*j)->TakeRecovered();
  ASSERT_EQ(recovered.size(), 2u);
  EXPECT_EQ(recovered[1].user, "b");
  // The garbage is gone: what is appended now reads back whole.
  ASSERT_TRUE((*j)->Append(Delta(2, "c", 3)));
  j->reset();
  j = UsageJournal::Open(path_);
  ASSERT_TRUE(j);
  EXPECT_EQ((*j)->TakeRecovered().size(), 3u);
}

TEST_F(UsageJournalTest, ASecondGatewayOnTheFileIsRefused) {
  auto first = UsageJournal::Open(path_);
  ASSERT_TRUE(first);
  auto second = UsageJournal::Open(path_);
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find("another gateway"), std::string::npos)
      << second.error().message;
  EXPECT_NE(second.error().message.find(path_), std::string::npos);
}

TEST_F(UsageJournalTest, AFileThatIsNoJournalIsLeftAsItIs) {
  {
    std::ofstream f(path_);
    f << "someone's notes\n";
  }
  auto j = UsageJournal::Open(path_);
  ASSERT_FALSE(j);
  EXPECT_NE(j.error().message.find("not a bmas usage journal"), std::string::npos);
  std::ifstream in(path_);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "someone's notes");
  // A link in its place is not followed.
  std::filesystem::remove(path_);
  std::filesystem::create_symlink(dir_ + "/elsewhere", path_);
  EXPECT_FALSE(UsageJournal::Open(path_));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/elsewhere"));
}

TEST_F(UsageJournalTest, WithEverySegmentWaitingOnTheStoreAppendsAreRefused) {
  auto j = UsageJournal::Open(path_, 4096);
  ASSERT_TRUE(j);
  int appended = 0;
  while ((*j)->Append(Delta(1, "u", 1))) ++appended;
  EXPECT_EQ(appended, UsageJournal::kSegments * (4096 / 80));
  auto sealed = (*j)->Seal();
  EXPECT_EQ(sealed.size(), static_cast<size_t>(UsageJournal::kSegments));
  EXPECT_FALSE((*j)->Append(Delta(1, "u", 1)));
  (*j)->Release(sealed);
  EXPECT_TRUE((*j)->Append(Delta(1, "u", 1)));
}

}  // namespace
}  // namespace bmas::gateway
