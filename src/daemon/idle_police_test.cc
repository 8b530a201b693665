#include "daemon/idle_police.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace bmas {
namespace {

namespace fs = std::filesystem;

JobInfo Job(int64_t id, const std::string& user) {
  JobInfo j;
  j.id = id;
  j.user = user;
  j.partition = "lab";
  j.name = "train";
  return j;
}

GpuReading Gpu(int index, unsigned util) {
  GpuReading g;
  g.index = index;
  g.util_pct = util;
  return g;
}

class IdlePoliceTest : public ::testing::Test {
 protected:
  IdlePolice Police() {
    IdleSettings s;
    s.warn_after_s = 60;
    s.cancel_after_s = 120;
    IdlePoliceHooks hooks;
    hooks.job = [](int64_t id) -> Result<JobInfo> { return Job(id, "alice"); };
    hooks.act = [this](const IdleAction& a, const JobInfo&) { acted_.push_back(a); };
    return IdlePolice(s, hooks);
  }
  std::vector<IdleAction> acted_;
};

TEST_F(IdlePoliceTest, AnIdleJobOfItsOwnUsersProcessesIsWarnedThenCancelled) {
  IdlePolice police = Police();
  for (int64_t t = 0; t <= 120; t += 10) {
    police.OnSample({Gpu(0, 0)}, {{0, GpuHolder{7, "alice"}}}, t);
  }
  ASSERT_EQ(acted_.size(), 2u);
  EXPECT_EQ(acted_[0].kind, IdleAction::Kind::kWarn);
  EXPECT_EQ(acted_[1].kind, IdleAction::Kind::kCancel);
  EXPECT_EQ(acted_[1].job_id, 7);
}

// A process of another user in a cgroup named after Alice's job (the root of a workspace names
// its cgroups) counts for nothing: its idle GPU neither gets Alice's job cancelled nor, held by
// Mallory's job, escapes policing through the wrong name.
TEST_F(IdlePoliceTest, AnotherUsersProcessCannotSpeakForAJob) {
  IdlePolice police = Police();
  for (int64_t t = 0; t <= 300; t += 10) {
    police.OnSample({Gpu(0, 0), Gpu(1, 80)},
                    {{0, GpuHolder{7, "mallory"}}, {1, GpuHolder{7, "alice"}}}, t);
  }
  EXPECT_TRUE(acted_.empty()) << "Alice's busy GPU is all that counts for her job";
  IdlePolice alone = Police();
  for (int64_t t = 0; t <= 300; t += 10) {
    alone.OnSample({Gpu(0, 0)}, {{0, GpuHolder{7, "mallory"}}}, t);
  }
  EXPECT_TRUE(acted_.empty());
}

// The warning goes into the job's output as root: only into a regular file its user owns,
// never through a symlink the user planted (to /etc/shadow, say).
TEST(AppendToJobOutputTest, WritesOnlyTheUsersOwnRegularFile) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (writes as root, chowns the file)";
  const passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  const fs::path dir = fs::temp_directory_path() / ("bmas_append_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path mine = dir / "mine.out", roots = dir / "roots", link = dir / "link.out";
  std::ofstream(mine) << "";
  std::ofstream(roots) << "root's\n";
  ASSERT_EQ(chown(mine.c_str(), nobody->pw_uid, nobody->pw_gid), 0);
  fs::create_symlink(roots, link);
  JobInfo job = Job(5, "nobody");

  job.stdout_path = mine;
  ASSERT_TRUE(AppendToJobOutput(job, "bmas: warned"));
  job.stdout_path = roots;  // not the user's
  EXPECT_FALSE(AppendToJobOutput(job, "bmas: planted"));
  job.stdout_path = link;  // the user's symlink to it
  EXPECT_FALSE(AppendToJobOutput(job, "bmas: planted"));
  auto read = [](const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  EXPECT_EQ(read(mine), "bmas: warned\n");
  EXPECT_EQ(read(roots), "root's\n");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bmas
