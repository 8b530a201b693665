#include "plan/slurm_model.h"

#include <gtest/gtest.h>

namespace bmas::plan {
namespace {

// Two nodes of 4 GPUs with bmas's default partitions: lab (default) and training at tier 10,
// inference (tier 1, requeued by preemption) and inference_floor (tier 1, never preempted).
Cluster TwoNodes() {
  return ParseCluster(
      "[cluster]\ncontroller = { name = \"c\", address = \"127.0.0.1\" }\n[cluster.slurm]\nlocal = true\n"
      "[[cluster.nodes]]\nnames = \"n[1-2]\"\naddress = \"127.0.0.1\"\ncpus = 8\nmemory_gb = 16\n"
      "gpus = { count = 4, type = \"h100\" }\n",
      "two.toml");
}

SimJob Job(int64_t id, double submit, int gpus, double duration,
           std::string partition = "training") {
  return SimJob{.id = id, .user = "u", .partition = std::move(partition), .gpus = gpus,
                .submit = TimePoint{submit}, .duration = Duration{duration}};
}

double Start(const SlurmModelResult& r, int64_t id) {
  for (const SimJobResult& j : r.jobs) {
    if (j.id == id) return j.start.count();
  }
  ADD_FAILURE() << "no job " << id;
  return -1;
}

const SimJobResult& Of(const SlurmModelResult& r, int64_t id) {
  for (const SimJobResult& j : r.jobs) {
    if (j.id == id) return j;
  }
  static SimJobResult none;
  ADD_FAILURE() << "no job " << id;
  return none;
}

TEST(SlurmModelTest, JobsThatFitStartAtOnceAndTheRestWaitForGpus) {
  SlurmModelResult r = RunSlurmModel(
      TwoNodes(), {Job(1, 0, 4, 100), Job(2, 0, 4, 50), Job(3, 10, 2, 10)}, {});
  EXPECT_EQ(Start(r, 1), 0);
  EXPECT_EQ(Start(r, 2), 0);
  EXPECT_EQ(Start(r, 3), 50);  // the first node that frees two GPUs
  EXPECT_EQ(Of(r, 3).nodes, "n2");
  EXPECT_EQ(r.makespan.count(), 100);
  EXPECT_DOUBLE_EQ(r.gpu_seconds_allocated, 4 * 100 + 4 * 50 + 2 * 10);
}

TEST(SlurmModelTest, MoreThanANodeTakesWholeNodes) {
  // 8 GPUs: both nodes, whole, once the 1-GPU job on n1 ends.
  SlurmModelResult r = RunSlurmModel(TwoNodes(), {Job(1, 0, 1, 30), Job(2, 1, 8, 10)}, {});
  EXPECT_EQ(Start(r, 2), 30);
  EXPECT_EQ(Of(r, 2).nodes, "n1,n2");
}

TEST(SlurmModelTest, BackfillStartsOnlyJobsThatDoNotDelayTheReservation) {
  // n1 and n2 each hold a 3-GPU job (until 100 and 40). The whole-node job 3 waits for n2 at
  // 40. A 1-GPU job of 30 s (4) takes n1's last GPU at once. A 1-GPU job of 500 s (5) could
  // only take n2's free GPU, which would delay job 3: it waits for n1's GPU (when 4 ends).
  SlurmModelResult r = RunSlurmModel(
      TwoNodes(),
      {Job(1, 0, 3, 100), Job(2, 0, 3, 40), Job(3, 1, 4, 50), Job(4, 2, 1, 30),
       Job(5, 3, 1, 500)},
      {});
  EXPECT_EQ(Start(r, 3), 40);
  EXPECT_LE(Start(r, 4), 3);  // within the next backfill pass
  EXPECT_EQ(Of(r, 4).nodes, "n1");
  EXPECT_EQ(Start(r, 5), Of(r, 4).end.count());
  EXPECT_EQ(Of(r, 5).nodes, "n1");
}

TEST(SlurmModelTest, TheMainSchedulerKeepsPriorityOrderWithinAPartition) {
  // Without backfill (a pass only every 1000 s), a job behind a blocked one in the same
  // partition waits even though it would fit.
  SlurmModelSettings s;
  s.backfill_interval = Duration{1000};
  SlurmModelResult r = RunSlurmModel(
      TwoNodes(), {Job(1, 0, 4, 100), Job(2, 0, 3, 100), Job(3, 1, 4, 10), Job(4, 2, 1, 10)}, s);
  EXPECT_EQ(Start(r, 3), 100);
  EXPECT_GT(Start(r, 4), 2);
}

TEST(SlurmModelTest, TrainingPreemptsReplicasAboveTheFloorAndTheyComeBack) {
  // Eight replicas: two floor (never preempted) and six preemptible; a whole-node training
  // job at t=10 takes a node from the preemptible ones, the youngest first.
  std::vector<SimJob> jobs;
  jobs.push_back(Job(1, 0, 1, 1000, "inference_floor"));
  jobs.push_back(Job(2, 0, 1, 1000, "inference_floor"));
  for (int i = 3; i <= 8; ++i) jobs.push_back(Job(i, i, 1, 1000, "inference"));
  jobs.push_back(Job(9, 10, 4, 100));
  SlurmModelResult r = RunSlurmModel(TwoNodes(), jobs, {});
  EXPECT_EQ(Start(r, 9), 10);
  EXPECT_EQ(Of(r, 9).nodes, "n2");  // n1 holds the floor
  EXPECT_EQ(Of(r, 1).requeues, 0);
  EXPECT_EQ(Of(r, 2).requeues, 0);
  int requeued = 0;
  for (int i = 3; i <= 8; ++i) requeued += Of(r, i).requeues;
  EXPECT_EQ(requeued, 4);
  // The requeued replicas start over once the training job is gone.
  for (int i = 3; i <= 8; ++i) {
    if (Of(r, i).requeues > 0) {
      EXPECT_EQ(Start(r, i), 110);
    }
  }
}

TEST(SlurmModelTest, LaunchDelayAndTimeLimitAndJobsThatCannotRun) {
  SlurmModelSettings s;
  s.launch_delay = Duration{0.5};
  SimJob limited = Job(2, 0, 1, 100);
  limited.time_limit = Duration{20};
  SlurmModelResult r =
      RunSlurmModel(TwoNodes(), {Job(1, 0, 1, 10), limited, Job(3, 0, 16, 10), Job(4, 0, 1, 1, "nope")}, s);
  EXPECT_DOUBLE_EQ(Start(r, 1), 0.5);
  EXPECT_DOUBLE_EQ(Of(r, 1).end.count(), 10.5);
  EXPECT_DOUBLE_EQ(Of(r, 2).end.count(), 20.5);  // ended at its time limit
  EXPECT_FALSE(Of(r, 3).started);
  EXPECT_NE(Of(r, 3).error.find("GPUs in all"), std::string::npos) << Of(r, 3).error;
  EXPECT_NE(Of(r, 4).error.find("no partition 'nope'"), std::string::npos) << Of(r, 4).error;
}

TEST(SlurmModelTest, TheSameJobsGiveTheSameSchedule) {
  std::vector<SimJob> jobs;
  for (int i = 0; i < 200; ++i) jobs.push_back(Job(i, i * 0.7, 1 + i % 4, 5 + (i * 37) % 50));
  SlurmModelResult a = RunSlurmModel(TwoNodes(), jobs, {});
  SlurmModelResult b = RunSlurmModel(TwoNodes(), jobs, {});
  ASSERT_EQ(a.jobs.size(), b.jobs.size());
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    EXPECT_EQ(a.jobs[i].start, b.jobs[i].start);
    EXPECT_EQ(a.jobs[i].nodes, b.jobs[i].nodes);
    EXPECT_TRUE(a.jobs[i].started);
  }
  EXPECT_EQ(a.makespan, b.makespan);
}

// Research mode: n2 is reserved for "ada" from 100 to 200. Another user's job that would run
// into the reservation goes to n1 or waits; ada's job gets n2 in the window; after it, n2 is
// everyone's again.
TEST(SlurmModelTest, AReservationKeepsItsNodesForItsUsers) {
  SlurmModelSettings settings;
  settings.reservations.push_back({.users = {"ada"}, .nodes = {"n2"}, .start = 100, .end = 200});
  SimJob busy = Job(1, 0, 4, 300);  // n1, all along
  SimJob late = Job(2, 50, 4, 100);  // would reach into the window on n2: waits for its end
  SimJob ada = Job(3, 120, 4, 50);
  ada.user = "ada";
  SimJob small = Job(4, 10, 4, 20);  // ends before the window: n2 is free for it
  SlurmModelResult r = RunSlurmModel(TwoNodes(), {busy, late, ada, small}, settings);
  EXPECT_EQ(Start(r, 4), 10);
  EXPECT_EQ(Of(r, 4).nodes, "n2");
  EXPECT_EQ(Start(r, 3), 120);
  EXPECT_EQ(Of(r, 3).nodes, "n2");
  EXPECT_EQ(Start(r, 2), 200);
  EXPECT_EQ(Of(r, 2).nodes, "n2");
}

}  // namespace
}  // namespace bmas::plan

namespace bmas::plan {
namespace {

// One node of 4 H100s: GPU 2 split into seven 1g.10gb, GPU 3 as `gpu3` says (a fixed layout, or
// a flexible GPU's layouts).
Cluster MigNode(const std::string& gpu3) {
  return ParseCluster(
      "[cluster]\ncontroller = { name = \"c\", address = \"127.0.0.1\" }\n[cluster.slurm]\nlocal = true\n"
      "[[cluster.nodes]]\nnames = \"n1\"\naddress = \"127.0.0.1\"\ncpus = 8\nmemory_gb = 16\n"
      "[cluster.nodes.gpus]\ncount = 4\ntype = \"h100\"\nmemory_gb = 80\nmig = true\n"
      "[[cluster.nodes.gpus.mig_layouts]]\ngpus = [2]\nprofiles = [\"1g.10gb\", \"1g.10gb\", "
      "\"1g.10gb\", \"1g.10gb\", \"1g.10gb\", \"1g.10gb\", \"1g.10gb\"]\n" + gpu3,
      "mig.toml");
}

SimJob Slice(int64_t id, double submit, double duration, int slices = 1) {
  SimJob j = Job(id, submit, slices, duration, "lab");
  j.mig_profile = "1g.10gb";
  return j;
}

TEST(SlurmModelMigTest, SliceJobsTakeSlicesAndCountAsASeventhOfAGpu) {
  // Seven 1g.10gb on GPU 2: seven exercises start at once, the eighth waits for one to end.
  std::vector<SimJob> jobs;
  for (int i = 1; i <= 8; ++i) jobs.push_back(Slice(i, 0, 70 + i));
  jobs.push_back(Job(9, 0, 2, 10, "lab"));  // the whole GPUs 0 and 1
  SlurmModelResult r = RunSlurmModel(MigNode(""), jobs, {});
  for (int i = 1; i <= 7; ++i) EXPECT_EQ(Start(r, i), 0) << i;
  EXPECT_EQ(Start(r, 8), 71);
  EXPECT_EQ(Of(r, 8).gres, "1g.10gb");
  EXPECT_EQ(Start(r, 9), 0);
  EXPECT_EQ(Of(r, 9).gres, "");
  EXPECT_DOUBLE_EQ(Of(r, 1).gpu_equivalents, 1.0 / 7);
  EXPECT_DOUBLE_EQ(Of(r, 9).gpu_equivalents, 2);
}

TEST(SlurmModelMigTest, ASliceJobRunsOnAWholeGpuWhereThereAreNoSlices) {
  SimJob j = Slice(1, 0, 100);
  j.slice_duration_factor = 2;  // only on slices
  SlurmModelResult r = RunSlurmModel(TwoNodes(), {j}, {});
  EXPECT_EQ(Of(r, 1).gres, "");
  EXPECT_EQ(Of(r, 1).end.count(), 100);
  EXPECT_DOUBLE_EQ(Of(r, 1).gpu_equivalents, 1);
}

TEST(SlurmModelMigTest, SlicesRunLongerByTheirFactorWithinTheTimeLimit) {
  SimJob a = Slice(1, 0, 100), b = Slice(2, 0, 100);
  a.slice_duration_factor = b.slice_duration_factor = 3;
  b.time_limit = Duration{200};
  SlurmModelResult r = RunSlurmModel(MigNode(""), {a, b}, {});
  EXPECT_EQ(Of(r, 1).end.count(), 300);
  EXPECT_EQ(Of(r, 2).end.count(), 200);  // Slurm ends it at its limit
}

TEST(SlurmModelMigTest, AnIdleFlexibleGpuTakesTheLayoutThatWaitingJobsNeed) {
  // GPU 3 follows demand (whole, or seven 1g.10gb). Nine exercises: seven take GPU 2's slices,
  // two wait; after min_wait_s the next policy pass splits the idle GPU 3, and they start
  // delay_s later. A whole-GPU job on GPU 0 keeps running throughout.
  const Cluster c = MigNode(
      "[[cluster.nodes.gpus.flexible]]\ngpus = [3]\nlayouts = [\"whole\", \"7x1g.10gb\"]\n");
  std::vector<SimJob> jobs = {Job(1, 0, 1, 1000, "lab")};
  for (int i = 2; i <= 10; ++i) jobs.push_back(Slice(i, 1, 500));
  SlurmModelSettings s;
  s.relayout = {.every_s = 10, .min_wait_s = 30, .hold_s = 300, .delay_s = 0.5};
  SlurmModelResult r = RunSlurmModel(c, jobs, s);
  EXPECT_EQ(Start(r, 1), 0);
  EXPECT_EQ(Of(r, 1).end.count(), 1000);
  for (int i = 2; i <= 8; ++i) EXPECT_EQ(Start(r, i), 1) << i;
  ASSERT_EQ(r.layout_changes.size(), 1u);
  EXPECT_EQ(r.layout_changes[0].time, 40);  // the first pass after waiting 30 s
  EXPECT_EQ(r.layout_changes[0].from, "n1-gpu3-0");
  EXPECT_EQ(r.layout_changes[0].to, "n1-gpu3-1");
  EXPECT_EQ(Start(r, 9), 40.5);
  EXPECT_EQ(Start(r, 10), 40.5);
  EXPECT_EQ(Of(r, 9).nodes, "n1-gpu3-1");
}

TEST(SlurmModelMigTest, AFlexibleGpuWithAJobIsNeverSplit) {
  // GPU 3 starts whole and takes the second whole job: the exercises wait for GPU 2's slices.
  const Cluster c = MigNode(
      "[[cluster.nodes.gpus.flexible]]\ngpus = [3]\nlayouts = [\"whole\", \"7x1g.10gb\"]\n");
  std::vector<SimJob> jobs = {Job(1, 0, 1, 1000, "lab"), Job(2, 0, 1, 1000, "lab"),
                              Job(3, 0, 1, 1000, "lab")};
  for (int i = 4; i <= 11; ++i) jobs.push_back(Slice(i, 1, 100));
  SlurmModelSettings s;
  s.relayout = {.every_s = 10, .min_wait_s = 30, .hold_s = 300, .delay_s = 0.5};
  SlurmModelResult r = RunSlurmModel(c, jobs, s);
  EXPECT_EQ(Of(r, 3).nodes, "n1-gpu3-0");
  EXPECT_TRUE(r.layout_changes.empty());
  EXPECT_EQ(Start(r, 11), 101);
}

}  // namespace
}  // namespace bmas::plan
