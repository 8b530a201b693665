#include "idle/idle_police.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/process.h"

namespace bmas {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr const char* kNode = "oss01";

// A running job of `user`'s in `partition` that Slurm gave GPUs `indexes` of this node.
JobInfo Job(int64_t id, const std::string& user, std::vector<int> indexes,
            const std::string& partition = "lab", const std::string& name = "train") {
  JobInfo j;
  j.id = id;
  j.user = user;
  j.partition = partition;
  j.name = name;
  j.state = JobState::kRunning;
  j.gpu_alloc.push_back(NodeGpus{kNode, "h100", std::move(indexes)});
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
    hooks.jobs = [this]() -> Result<std::vector<JobInfo>> { return jobs_; };
    hooks.act = [this](const IdleAction& a, const JobInfo&) { acted_.push_back(a); };
    hooks.gres_slots = gres_slots_;
    return IdlePolice(s, kNode, hooks);
  }
  // Samples every 10 s from 0 to `until`.
  void Run(IdlePolice& police, const std::vector<GpuReading>& gpus,
           const std::map<int, GpuHolder>& holders, int64_t until = 300) {
    for (int64_t t = 0; t <= until; t += 10) police.OnSample(gpus, holders, t);
  }
  std::vector<JobInfo> jobs_ = {Job(7, "alice", {0})};
  std::vector<IdleAction> acted_;
  std::function<std::vector<slurm::GresSlot>(const std::string&)> gres_slots_;  // unset: GPUs
};

TEST_F(IdlePoliceTest, AnIdleJobOfItsOwnUsersProcessesIsWarnedThenCancelled) {
  IdlePolice police = Police();
  Run(police, {Gpu(0, 0)}, {{0, GpuHolder{7, "alice"}}}, 120);
  ASSERT_EQ(acted_.size(), 2u);
  EXPECT_EQ(acted_[0].kind, IdleAction::Kind::kWarn);
  EXPECT_EQ(acted_[1].kind, IdleAction::Kind::kCancel);
  EXPECT_EQ(acted_[1].job_id, 7);
}

// `bmas run --gpus 2 -- sleep infinity`: no process on either GPU Slurm gave it. Before, a job
// counted only through its processes, and this one was never seen.
TEST_F(IdlePoliceTest, AJobWithNoProcessOnItsAllocatedGpusIsWarnedThenCancelled) {
  jobs_ = {Job(9, "alice", {1, 2}), Job(10, "bob", {3})};
  IdlePolice police = Police();
  Run(police, {Gpu(0, 0), Gpu(1, 0), Gpu(2, 0), Gpu(3, 70)}, {{3, GpuHolder{10, "bob"}}});
  ASSERT_EQ(acted_.size(), 2u) << "bob's busy job is left alone";
  EXPECT_EQ(acted_[0].job_id, 9);
  EXPECT_EQ(acted_[0].kind, IdleAction::Kind::kWarn);
  EXPECT_EQ(acted_[0].gpus, 2);
  EXPECT_EQ(acted_[1].job_id, 9);
  EXPECT_EQ(acted_[1].kind, IdleAction::Kind::kCancel);
}

// A process of another user in a cgroup named after Alice's job (the root of a workspace names
// its cgroups) counts for nothing: her GPU it runs on is still idle, and her busy GPU with her
// own process is what keeps her job.
TEST_F(IdlePoliceTest, AnotherUsersProcessCannotSpeakForAJob) {
  jobs_ = {Job(7, "alice", {0, 1})};
  IdlePolice police = Police();
  Run(police, {Gpu(0, 0), Gpu(1, 80)},
      {{0, GpuHolder{7, "mallory"}}, {1, GpuHolder{7, "alice"}}});
  EXPECT_TRUE(acted_.empty()) << "Alice's busy GPU is all that counts for her job";
  jobs_ = {Job(7, "alice", {0})};
  IdlePolice alone = Police();
  Run(alone, {Gpu(0, 90)}, {{0, GpuHolder{7, "mallory"}}});
  ASSERT_EQ(acted_.size(), 2u) << "Mallory's busy process does not make Alice's GPU hers";
  EXPECT_EQ(acted_[1].kind, IdleAction::Kind::kCancel);
}

// The exemption is by owner and partition: a student who names a job like a replica
// ("bmas-inference...", as the old exemption read it) is policed; the service account's replica
// ("bmas-replica:PORT:MODEL") in the inference partition is not. Other nodes' GPUs, other states
// and the research reservation are not judged here.
TEST_F(IdlePoliceTest, AJobsNameNeverExemptsIt) {
  JobInfo research = Job(14, "carol", {4});
  research.reservation = "bmas_research";
  JobInfo elsewhere = Job(15, "dave", {5});
  elsewhere.gpu_alloc[0].node = "oss02";
  JobInfo ending = Job(16, "erin", {6});
  ending.state = JobState::kCompleting;
  jobs_ = {Job(11, "mallory", {0}, "lab", "bmas-inference-llama"),
           Job(12, "bmas", {1}, "inference", "bmas-replica:18100:llama"),
           Job(13, "bmas", {2}, "inference_floor", "bmas-replica:18101:llama"),
           research, elsewhere, ending};
  IdlePolice police = Police();
  std::vector<GpuReading> gpus;
  for (int i = 0; i < 7; ++i) gpus.push_back(Gpu(i, 0));
  Run(police, gpus, {});
  ASSERT_EQ(acted_.size(), 2u);
  EXPECT_EQ(acted_[0].job_id, 11);
  EXPECT_EQ(acted_[1].job_id, 11);
  EXPECT_EQ(acted_[1].kind, IdleAction::Kind::kCancel);
}

TEST_F(IdlePoliceTest, WithoutSlurmsAnswerNothingIsJudged) {
  IdlePolice police(IdleSettings{}, kNode,
                    IdlePoliceHooks{[]() -> Result<std::vector<JobInfo>> {
                                      return Error{ErrorCode::kUnavailable, "slurmrestd down"};
                                    },
                                    [this](const IdleAction& a, const JobInfo&) {
                                      acted_.push_back(a);
                                    }});
  for (int64_t t = 0; t <= 3 * 3600; t += 60) police.OnSample({Gpu(0, 0)}, {}, t);
  EXPECT_TRUE(acted_.empty());
}

// ---- The warning into the job's output --------------------------------------------------

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A non-root account made for the test.
const passwd* Student() {
  const char* name = "bmasidle5";
  if (getpwnam(name) == nullptr) {
    auto added = RunCommand({"useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name});
    if (!added || added->exit_code != 0) return nullptr;
  }
  return getpwnam(name);
}

// The warning goes into a file the user names. The agent is root; the user swaps a directory of
// that path for a symlink into a root-only directory (as to /dev, for /dev/watchdog). The file
// is opened as the user and no symlink is followed, so root opens nothing there: the canary is
// neither written nor even opened. The user's own file still gets the warning.
TEST(AppendToJobOutputTest, WritesOnlyAsTheUserAndNeverThroughASymlink) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (makes an account, writes as root)";
  const passwd* student = Student();
  ASSERT_NE(student, nullptr) << "useradd failed";
  const uid_t uid = student->pw_uid;
  const gid_t gid = student->pw_gid;
  const fs::path dir = fs::temp_directory_path() / ("bmas_append_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms(0755));
  // Root's directory, which the user may not enter, with a canary that even passes the old
  // owner check (the user's own file, out of the user's reach).
  const fs::path secret = dir / "secret";
  fs::create_directories(secret);
  fs::permissions(secret, fs::perms(0700));
  std::ofstream(secret / "job.out") << "canary\n";
  ASSERT_EQ(chown((secret / "job.out").c_str(), uid, gid), 0);
  // The user's directory and output file.
  const fs::path home = dir / "home";
  fs::create_directories(home / "out");
  std::ofstream(home / "out" / "job.out") << "";
  for (const fs::path& p : {home, home / "out", home / "out" / "job.out"}) {
    ASSERT_EQ(chown(p.c_str(), uid, gid), 0);
  }
  JobInfo job = Job(5, student->pw_name, {0});
  job.stdout_path = home / "out" / "job.out";

  auto result = AppendToJobOutput(job, "bmas: warned");
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(Read(home / "out" / "job.out"), "bmas: warned\n");

  // The attack: `out` becomes a symlink to root's directory. Every open there is watched.
  const int watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(watch, 0);
  ASSERT_GE(inotify_add_watch(watch, secret.c_str(), IN_OPEN | IN_MODIFY), 0);
  fs::rename(home / "out", home / "old");
  fs::create_directory_symlink(secret, home / "out");
  result = AppendToJobOutput(job, "bmas: planted");
  ASSERT_FALSE(result) << "written through the symlink";
  EXPECT_THAT(result.error().message, HasSubstr("symlink"));
  // A symlink as the last component, to root's file.
  fs::remove(home / "out");
  fs::rename(home / "old", home / "out");
  std::ofstream(dir / "roots") << "root's\n";
  fs::create_symlink(dir / "roots", home / "out" / "link.out");
  job.stdout_path = home / "out" / "link.out";
  EXPECT_FALSE(AppendToJobOutput(job, "bmas: planted"));
  // A file that is not the user's.
  job.stdout_path = dir / "roots";
  EXPECT_FALSE(AppendToJobOutput(job, "bmas: planted"));

  char events[4096];
  EXPECT_LT(read(watch, events, sizeof events), 0) << "something opened a file in root's directory";
  close(watch);
  EXPECT_EQ(Read(secret / "job.out"), "canary\n");
  EXPECT_EQ(Read(dir / "roots"), "root's\n");
  // The legitimate path still works after all that.
  job.stdout_path = home / "out" / "job.out";
  result = AppendToJobOutput(job, "bmas: cancelled");
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(Read(home / "out" / "job.out"), "bmas: warned\nbmas: cancelled\n");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bmas

namespace bmas {
namespace {

// A node with MIG slices (examples/cluster-local-mig.toml's oss02): Slurm's indexes are its
// gres.conf lines, 0-1 the whole GPUs, 2-5 GPU 2's slices (GPU instances 1-4).
class IdlePoliceMigTest : public IdlePoliceTest {
 protected:
  IdlePoliceMigTest() {
    gres_slots_ = [](const std::string& node) {
      std::vector<slurm::GresSlot> slots;
      if (node == kNode) {
        slots = {{0, -1, "", {}}, {1, -1, "", {}}};
        for (int gi = 1; gi <= 4; ++gi) slots.push_back({2, gi, "", {}});
      } else if (node == std::string(kNode) + "-gpu3-1") {  // GPU 3 in its layout of 2 slices
        for (int gi = 1; gi <= 2; ++gi) slots.push_back({3, gi, "", {}});
      }
      return slots;
    };
  }
  static GpuReading SplitGpu(const std::vector<std::pair<bool, double>>& activity) {
    GpuReading g = Gpu(2, 0);
    g.mig_enabled = true;
    for (size_t k = 0; k < activity.size(); ++k) {
      MigDeviceReading m;
      m.gpu_instance = static_cast<int>(k) + 1;
      m.util_known = activity[k].first;
      m.util_pct = activity[k].second;
      g.mig_devices.push_back(m);
    }
    return g;
  }
};

// Four jobs on GPU 2's slices: a busy one, one whose process sits idle on its slice, one with no
// process on it, and one whose slice's activity NVML did not give. Only the two idle ones are
// warned and cancelled; the whole GPU 0 at index 0 is GPU 0, not a slice.
TEST_F(IdlePoliceMigTest, EachSliceIsJudgedByItsOwnActivityAndProcesses) {
  jobs_ = {Job(21, "ann", {2}), Job(22, "ben", {3}), Job(23, "cat", {4}), Job(24, "dan", {5}),
           Job(25, "eve", {0})};
  IdlePolice police = Police();
  const std::vector<GpuReading> gpus = {Gpu(0, 90), Gpu(1, 0),
                                        SplitGpu({{true, 80}, {true, 0}, {true, 0}, {false, 0}})};
  const std::map<int, GpuHolder> holders = {{0, {25, "eve"}}, {2, {21, "ann"}}};
  const MigHolders slices = {{{2, 1}, {21, "ann"}}, {{2, 2}, {22, "ben"}}, {{2, 4}, {24, "dan"}}};
  for (int64_t t = 0; t <= 300; t += 10) police.OnSample(gpus, holders, t, slices);
  std::map<int64_t, int> actions;
  for (const IdleAction& a : acted_) ++actions[a.job_id];
  EXPECT_EQ(actions, (std::map<int64_t, int>{{22, 2}, {23, 2}}));
}

// GPU 3's layout follows demand: Slurm allocates its slices on the layout node
// "<node>-gpu3-1", whose indexes are that node's gres.conf lines. The idle slice there is judged
// on this host's GPU 3; a job on another host's layout node ("<node>x-gpu3-1") is not this
// agent's, nor one on a layout node whose lines cannot be read ("<node>-gpu3-0").
TEST_F(IdlePoliceMigTest, SlicesOfALayoutNodeAreJudgedOnTheHostsGpu) {
  auto on = [](JobInfo j, std::string node) {
    j.gpu_alloc[0].node = std::move(node);
    return j;
  };
  jobs_ = {on(Job(31, "ann", {0}), std::string(kNode) + "-gpu3-1"),
           on(Job(32, "ben", {1}), std::string(kNode) + "-gpu3-1"),
           on(Job(33, "cat", {0}), std::string(kNode) + "x-gpu3-1"),
           on(Job(34, "dan", {0}), std::string(kNode) + "-gpu3-0")};
  IdlePolice police = Police();
  GpuReading gpu3 = SplitGpu({{true, 70}, {true, 0}});
  gpu3.index = 3;
  const MigHolders slices = {{{3, 1}, {31, "ann"}}, {{3, 2}, {32, "ben"}}};
  for (int64_t t = 0; t <= 300; t += 10) police.OnSample({Gpu(0, 0), gpu3}, {}, t, slices);
  std::map<int64_t, int> actions;
  for (const IdleAction& a : acted_) ++actions[a.job_id];
  EXPECT_EQ(actions, (std::map<int64_t, int>{{32, 2}}));
}

}  // namespace
}  // namespace bmas
