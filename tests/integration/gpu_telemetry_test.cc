// The agent's GPU telemetry through the real NVML code path, against the fake libnvidia-ml
// (tests/fake_nvml): its /metrics carries each GPU's readings as the DCGM exporter names them,
// labelled with the Slurm job and user whose process holds the GPU. Needs root, LXD and Slurm
// (the job runs in a workspace), like the workspace tests.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "lxd_workspace_fixture.h"
#include "store/store.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;

class GpuTelemetryTest : public WorkspaceJobsTest {
 protected:
  void SetUp() override {
    // The fake reads the GPUs' values from this file, named in the agent's environment.
    values_ = "/tmp/bmas-fake-nvml-" + std::to_string(getpid()) + ".txt";
    Write("");
    setenv("BMAS_FAKE_NVML", values_.c_str(), 1);
    agent_flags_ = {"--nvml-library", BMAS_FAKE_NVML_LIBRARY, "--telemetry-interval", "0.2"};
    WorkspaceJobsTest::SetUp();
  }
  void TearDown() override {
    WorkspaceJobsTest::TearDown();
    unsetenv("BMAS_FAKE_NVML");
    std::remove(values_.c_str());
  }
  void Write(const std::string& text) { std::ofstream(values_) << text; }
  // What `scontrol ARGS...` prints about the local cluster.
  std::string Scontrol(std::vector<std::string> args) {
    args.insert(args.begin(), "scontrol");
    auto r = RunCommand(args, {"SLURM_CONF=" + state_ + "/slurm/etc/slurm.conf"});
    return r ? r->out + r->err : r.error().message;
  }

  std::string values_;
};

TEST_F(GpuTelemetryTest, AJobsGpuMetricsCarryItsJobAndUser) {
  CommandOutput run = InHome("bmastest1", {"run", "--gpus", "1", "--", "sleep", "3007"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string job = run.out.substr(0, run.out.find('\n'));
  ASSERT_TRUE(Eventually([] { return !HostProcesses("sleep 3007").empty(); },
                         std::chrono::seconds(30)));
  const pid_t pid = HostProcesses("sleep 3007").front();
  // GPU 0 runs the job's process; GPU 1 runs nothing.
  Write("uuid=GPU-fake-0 name=NVIDIA_H100_80GB_HBM3 util=0 mem_used_mib=512 mem_total_mib=81559 "
        "power_mw=72000 temp=33 mig=0 nvlinks=18 nvlinks_up=18 cc=9.0 pids=" +
        std::to_string(pid) +
        "\n"
        "uuid=GPU-fake-1 name=NVIDIA_H100_80GB_HBM3 util=0 mem_used_mib=0 mem_total_mib=81559 "
        "power_mw=70000 temp=31 mig=0 nvlinks=18 nvlinks_up=18 cc=9.0\n");
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string held = fmt::format(
      "DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",UUID=\"GPU-fake-0\",modelName=\"NVIDIA H100 80GB HBM3\","
      "Hostname=\"{}\",hpc_job=\"{}\",user=\"bmastest1\"}} 0\n",
      host, job);
  std::string metrics;
  EXPECT_TRUE(Eventually(
      [&] {
        metrics = AgentMetrics();
        return metrics.find(held) != std::string::npos;
      },
      std::chrono::seconds(20)))
      << metrics;
  EXPECT_THAT(metrics, HasSubstr("bmas_agent_gpu_telemetry_up 1\n"));
  EXPECT_THAT(metrics, HasSubstr("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-fake-1\""));
  EXPECT_THAT(metrics, HasSubstr("hpc_job=\"\",user=\"\"} 0\n"));
  EXPECT_THAT(metrics, HasSubstr(fmt::format("hpc_job=\"{}\",user=\"bmastest1\"}} 72\n", job)));
  // The same sample as JSON for the dashboard (/gpus).
  const rapidjson::Document gpus = ParseJson(AgentMetrics("/gpus"));
  EXPECT_TRUE(At(gpus, "up").IsBool() && At(gpus, "up").GetBool());
  const auto& gpu0 = At(At(At(gpus, "sample"), "gpus"), 0);
  EXPECT_EQ(std::to_string(Int(At(gpu0, "job_id"))), job);
  EXPECT_EQ(Str(At(gpu0, "user")), "bmastest1");
  EXPECT_EQ(Int(At(gpu0, "mem_total_mb")), 81559);
  EXPECT_EQ(Int(At(At(At(At(gpus, "sample"), "gpus"), 1), "job_id")), 0);
  // Issue 23.4: which user and job holds each GPU is operator data. Another student asks the
  // agent without the operator secret, or with a wrong one: 401 and nothing of the data.
  const uint16_t port = AgentMetricsPort();
  ASSERT_NE(port, 0);
  for (const std::string target : {"/gpus", "/metrics", "/gpus?x=1"}) {
    for (const std::string bearer :
         {std::string(), std::string("Bearer wrong"), "Bearer " + std::string(64, 'a'),
          std::string("Bearer ")}) {
      SCOPED_TRACE(target + " with '" + bearer.substr(0, 12) + "'");
      const HttpResponse r = GetAsUser("bmastest2", port, target, bearer);
      EXPECT_EQ(r.status, 401) << r.body;
      EXPECT_THAT(r.body, HasSubstr("operator secret"));
      EXPECT_THAT(r.body, ::testing::Not(HasSubstr("bmastest1")));
      EXPECT_THAT(r.body, ::testing::Not(HasSubstr(job)));
    }
  }
  EXPECT_EQ(GetAsUser("bmastest2", port, "/health").status, 200);  // open, and says nothing
  EXPECT_FALSE(UserCanRead("bmastest2", state_ + "/run/operator.secret"));

  // Issue 26: GPU 1 in MIG mode, the job's process on its 2g.20gb. Memory and processes are
  // per MIG device, with DCGM's GPU_I_ID and GPU_I_PROFILE, each with its own holder; the GPU
  // has no utilization series in MIG mode.
  Write("uuid=GPU-fake-0 name=NVIDIA_H100_80GB_HBM3 util=0 mem_used_mib=0 mem_total_mib=81559 "
        "mig=0 cc=9.0\n"
        "uuid=GPU-fake-1 name=NVIDIA_H100_80GB_HBM3 util=0 mem_used_mib=0 mem_total_mib=81559 "
        "power_mw=90000 mig=1 cc=9.0\n"
        "mig uuid=MIG-fake-1-1 gi=1 ci=0 profile=3g.40gb\n"
        "mig uuid=MIG-fake-1-2 gi=2 ci=0 profile=2g.20gb mem_used_mib=300 pids=" +
        std::to_string(pid) + "\n");
  const std::string slice = fmt::format(
      "DCGM_FI_DEV_FB_USED{{gpu=\"1\",UUID=\"GPU-fake-1\",modelName=\"NVIDIA H100 80GB HBM3\","
      "Hostname=\"{}\",GPU_I_ID=\"2\",GPU_I_PROFILE=\"2g.20gb\",hpc_job=\"{}\","
      "user=\"bmastest1\"}} 300\n",
      host, job);
  EXPECT_TRUE(Eventually(
      [&] {
        metrics = AgentMetrics();
        return metrics.find(slice) != std::string::npos;
      },
      std::chrono::seconds(20)))
      << metrics;
  EXPECT_THAT(metrics, HasSubstr("GPU_I_ID=\"1\",GPU_I_PROFILE=\"3g.40gb\",hpc_job=\"\",user=\"\"} 0\n"));
  EXPECT_THAT(metrics, ::testing::Not(HasSubstr("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\"")));
  const rapidjson::Document split = ParseJson(AgentMetrics("/gpus"));
  const auto& mig = At(At(At(At(split, "sample"), "gpus"), 1), "mig");
  EXPECT_EQ(Str(At(At(mig, 1), "uuid")), "MIG-fake-1-2");
  EXPECT_EQ(Str(At(At(mig, 1), "user")), "bmastest1");
  EXPECT_EQ(Int(At(At(mig, 0), "job_id")), 0);
  ASSERT_EQ(InHome("bmastest1", {"cancel", job}).exit_code, 0);

  // The driver goes away: the agent says so, and serves on.
  std::remove(values_.c_str());
  EXPECT_TRUE(Eventually([&] { return AgentMetrics().find("bmas_agent_gpu_telemetry_up 0") !=
                                      std::string::npos; },
                         std::chrono::seconds(20)));
  EXPECT_THAT(agent_->StderrText(), HasSubstr("GPU telemetry"));
}

// Idle-GPU policing with its intervals shortened by config: a student's lab job that only
// sleeps holds a GPU that Slurm allocated and no process of its runs on. It is warned in its
// output, then cancelled, and both go into the store; a busy job is left alone. (Before, a job
// counted only through a process on a GPU, and `bmas run --gpus 1 -- sleep` was never seen.)
// The agent polices the node oss01 of the local cluster, where Slurm puts both jobs.
class IdleGpuTest : public GpuTelemetryTest {
 protected:
  void SetUp() override {
    config_extra_ = "[idle]\nwarn_after_min = 0.05\ncancel_after_min = 0.12\n"
                    "[telemetry]\nnode = \"" + idle_node_ + "\"\n";
    GpuTelemetryTest::SetUp();
  }
  std::string idle_node_ = "oss01";  // the node the agent polices
  rapidjson::Document Show(const std::string& job) {
    return ParseJson(Bmas({"job", "show", job, "--json"}).out);
  }
  std::string State(const std::string& job) {
    rapidjson::Document d = Show(job);
    return d.IsObject() && d.HasMember("state") ? Str(d["state"]) : "?";
  }
  // The GPU a running one-GPU job was given on its node (scontrol's "gpu:1(IDX:N)"); -1 if none.
  int GpuOf(const std::string& job) {
    std::smatch m;
    const std::string out = Scontrol({"show", "job", "-d", job});
    return std::regex_search(out, m, std::regex("IDX:([0-9]+)")) ? std::stoi(m[1].str()) : -1;
  }
};

TEST_F(IdleGpuTest, AJobThatOnlySleepsOnItsGpuIsWarnedThenCancelledAndABusyOneIsLeftAlone) {
  CommandOutput idle = InHome("bmastest1", {"run", "--gpus", "1", "--", "sleep", "3011"});
  CommandOutput busy = InHome("bmastest1", {"run", "--gpus", "1", "--", "sleep", "3012"});
  ASSERT_EQ(idle.exit_code, 0) << idle.err;
  ASSERT_EQ(busy.exit_code, 0) << busy.err;
  const std::string idle_job = idle.out.substr(0, idle.out.find('\n'));
  const std::string busy_job = busy.out.substr(0, busy.out.find('\n'));
  ASSERT_TRUE(Eventually(
      [] { return !HostProcesses("sleep 3011").empty() && !HostProcesses("sleep 3012").empty(); },
      std::chrono::seconds(30)));
  for (const std::string& job : {idle_job, busy_job}) {
    ASSERT_EQ(Str(At(At(Show(job), "nodes"), 0)), "oss01") << "job " << job;
  }
  // Only the busy job's process runs on a GPU: every GPU but the idle job's reads busy with that
  // process on it. (NVML never lists a process on a GPU its job was not given, and the agent's
  // sweep kills one that is: lxd/gpu_sweep.h.) The idle job's GPU shows no process.
  const std::string busy_pid = std::to_string(HostProcesses("sleep 3012").front());
  const int idle_gpu = GpuOf(idle_job);
  ASSERT_GE(idle_gpu, 0);
  std::string gpus;
  for (int i = 0; i < 4; ++i) {
    gpus += fmt::format("uuid=GPU-{} name=NVIDIA_H100_80GB_HBM3 util={} mem_total_mib=81559 "
                        "pids={}\n",
                        i, i == idle_gpu ? 0 : 57, i == idle_gpu ? "" : busy_pid);
  }
  Write(gpus);
  ASSERT_TRUE(Eventually([&] { return State(idle_job) == "CANCELLED"; }, std::chrono::seconds(60)))
      << State(idle_job) << agent_->StderrText();
  const std::string output = Bmas({"logs", idle_job}).out;
  EXPECT_THAT(output, HasSubstr("bmas: job " + idle_job + " warning: its 1 GPU(s) have been under "
                                "1% utilisation"));
  EXPECT_THAT(output, HasSubstr("bmas: job " + idle_job + " cancelled: its 1 GPU(s) stayed under "
                                "1% utilisation"));
  EXPECT_EQ(State(busy_job), "RUNNING");
  {
    auto store = OpenSqliteStore(StorePath(state_));
    ASSERT_TRUE(store) << store.error().message;
    auto actions = (*store)->QueryIdle(std::string("bmastest1"), 0);
    ASSERT_TRUE(actions) << actions.error().message;
    ASSERT_EQ(actions->size(), 2u);
    EXPECT_EQ((*actions)[0].kind, "cancel");
    EXPECT_EQ((*actions)[1].kind, "warn");
    EXPECT_EQ(std::to_string((*actions)[0].job), idle_job);
    EXPECT_EQ((*actions)[0].partition, "lab");
    EXPECT_EQ((*actions)[0].gpus, 1);
    EXPECT_GE((*actions)[0].wasted_gpu_seconds, 7);
  }
  ASSERT_EQ(InHome("bmastest1", {"cancel", busy_job}).exit_code, 0);
}

}  // namespace
}  // namespace bmas::testing

namespace bmas::testing {
namespace {

// The agent's sweep through NVML's process list (lxd/gpu_sweep.h), on the local cluster's node
// oss01: a process of another student, in no job, runs on a GPU. It is killed. NVML still lists
// its context afterwards (as the driver does for a process stuck in it), so the agent drains
// oss01 with the reason, for the admin to reset the GPU. The job beside it runs on.
class GpuSweepDrainTest : public GpuTelemetryTest {
 protected:
  void SetUp() override {
    config_extra_ = "[telemetry]\nnode = \"oss01\"\n";
    GpuTelemetryTest::SetUp();
  }
};

TEST_F(GpuSweepDrainTest, AProcessOnAGpuOutsideAnyJobIsKilledAndOneThatStaysDrainsTheNode) {
  CommandOutput run = InHome("bmastest1", {"run", "--gpus", "1", "--", "sleep", "3014"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string job = run.out.substr(0, run.out.find('\n'));
  ASSERT_TRUE(Eventually([] { return !HostProcesses("sleep 3014").empty(); },
                         std::chrono::seconds(30)));
  auto outside = RunCommand({"sh", "-c",
                             "setsid setpriv --reuid=bmastest2 --regid=bmastest2 --init-groups "
                             "sleep 3013 </dev/null >/dev/null 2>&1 &"});
  ASSERT_TRUE(outside && outside->exit_code == 0);
  ASSERT_TRUE(Eventually([] { return !HostProcesses("sleep 3013").empty(); },
                         std::chrono::seconds(10)));
  const pid_t in_job = HostProcesses("sleep 3014").front();
  const pid_t stranger = HostProcesses("sleep 3013").front();
  std::string gpus;
  for (int i = 0; i < 4; ++i) {
    gpus += fmt::format("uuid=GPU-{} name=NVIDIA_H100_80GB_HBM3 util=50 mem_total_mib=81559 "
                        "pids={}\n",
                        i, i == 3 ? std::to_string(stranger) : std::to_string(in_job));
  }
  Write(gpus);
  EXPECT_TRUE(Eventually([] { return HostProcesses("sleep 3013").empty(); },
                         std::chrono::seconds(20)))
      << agent_->StderrText();
  std::string node;
  EXPECT_TRUE(Eventually(
      [&] {
        node = Scontrol({"show", "node", "oss01"});
        return node.find("DRAIN") != std::string::npos;
      },
      std::chrono::seconds(40)))
      << node << agent_->StderrText();
  EXPECT_THAT(node, HasSubstr(fmt::format("Reason=bmas: GPU still in use after SIGKILL: pid {} "
                                          "(gone) on oss01's GPU 3",
                                          stranger)));
  EXPECT_THAT(agent_->StderrText(),
              HasSubstr(fmt::format("killed pid {} (sleep) of uid {} on oss01's GPU 3", stranger,
                                    getpwnam("bmastest2")->pw_uid)));
  EXPECT_THAT(agent_->StderrText(), HasSubstr("drained oss01; reset its GPU, then resume it"));
  // The job's own process, on every other GPU as NVML says, runs on.
  EXPECT_EQ(HostProcesses("sleep 3014").size(), 1u);
  EXPECT_THAT(agent_->StderrText(), ::testing::Not(HasSubstr(fmt::format("killed pid {} ", in_job))));
  Write("");
  ASSERT_EQ(InHome("bmastest1", {"cancel", job}).exit_code, 0);
}

// Issue 26: the local cluster with MIG layouts (examples/cluster-local-mig.toml). A job on a
// slice gets its GPU's device node and its slice's two access capabilities in the user's
// workspace, fenced as a whole GPU is: the job opens them (ENXIO: no driver behind them), a
// session of the same user outside the job cannot (EPERM), and none is left after the job.
class MigWorkspaceTest : public GpuTelemetryTest {
 protected:
  void SetUp() override {
    slurm_up_args_ = {"--cluster",
                      std::string(BMAS_SOURCE_DIR) + "/examples/cluster-local-mig.toml"};
    GpuTelemetryTest::SetUp();
  }
};

TEST_F(MigWorkspaceTest, ASliceJobGetsItsGpuAndItsCapabilitiesInTheWorkspaceAndNothingElse) {
  const std::string probe =
      "for d in /dev/nvidia[0-9]* /dev/nvidia-caps/*; do r=$(cat $d 2>&1); "
      "case $r in *'not permitted'*) r=EPERM;; *'No such device'*) r=ENXIO;; esac; "
      "echo \"$d $r\"; done";
  std::remove((Home("bmastest1") + "/probe-job").c_str());
  CommandOutput run = InHome("bmastest1", {"run", "--gpus", "1g.10gb", "--", "sh", "-c",
                                           probe + " >probe-job.new; mv probe-job.new probe-job; "
                                                   "exec sleep 3009"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string job = run.out.substr(0, run.out.find('\n'));
  const std::string out = Home("bmastest1") + "/probe-job";
  auto read = [&] {
    std::ifstream in(out);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  ASSERT_TRUE(Eventually([&] { return !read().empty(); }, std::chrono::seconds(40)))
      << DevicesIn("bmastest1");
  // GPU 2's first 1g.10gb, its GPU instance 3: capabilities 300 and 301 (core/mig.h).
  EXPECT_EQ(read(),
            "/dev/nvidia2 ENXIO\n/dev/nvidia-caps/nvidia-cap300 ENXIO\n"
            "/dev/nvidia-caps/nvidia-cap301 ENXIO\n");
  // A session of the same user, outside the job's cgroup, opens none of them.
  CommandOutput session =
      InHome("bmastest1", {"workspace", "exec", "bmastest1", "--", "sh", "-c", probe});
  EXPECT_EQ(session.out,
            "/dev/nvidia2 EPERM\n/dev/nvidia-caps/nvidia-cap300 EPERM\n"
            "/dev/nvidia-caps/nvidia-cap301 EPERM\n")
      << session.err;
  ASSERT_EQ(InHome("bmastest1", {"cancel", job}).exit_code, 0);
  // Unplugged: no GPU and no capability (LXD leaves the empty nvidia-caps directory).
  auto left = [&] {
    return Bmas({"workspace", "exec", "bmastest1", "--", "sh", "-c",
                 "ls /dev/nvidia-caps; ls /dev/nvidia[0-9]* 2>/dev/null"})
        .out;
  };
  EXPECT_TRUE(Eventually([&] { return left().empty(); }, std::chrono::seconds(20))) << left();
}

// Idle policing and the GPU sweep on MIG slices, on oss02 of the MIG cluster: two busy jobs on
// two slices of GPU 2 and an idle one on a slice of GPU 3, all bmastest1's. NVML lists the busy
// jobs' processes on their slices with engine activity (GPM); the idle job has no process on its
// slice. The idle job is warned and cancelled; the busy ones run on, and the sweep, which sees
// both busy jobs' processes on GPU 2, kills neither (GPU 2 is plugged in for both).
class MigIdleTest : public IdleGpuTest {
 protected:
  void SetUp() override {
    slurm_up_args_ = {"--cluster",
                      std::string(BMAS_SOURCE_DIR) + "/examples/cluster-local-mig.toml"};
    idle_node_ = "oss02";
    IdleGpuTest::SetUp();
  }
};

TEST_F(MigIdleTest, AnIdleSliceIsCancelledAndBusySlicesOfOneGpuRunOn) {
  std::vector<std::string> jobs;
  for (const char* seconds : {"3013", "3014", "3015"}) {
    CommandOutput r = InHome("bmastest1", {"run", "--gpus", "1g.10gb", "--", "sleep", seconds});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    jobs.push_back(r.out.substr(0, r.out.find('\n')));
  }
  ASSERT_TRUE(Eventually(
      [] {
        return !HostProcesses("sleep 3013").empty() && !HostProcesses("sleep 3014").empty() &&
               !HostProcesses("sleep 3015").empty();
      },
      std::chrono::seconds(40)));
  // oss02's gres indexes 4 and 5 are GPU 2's GPU instances 3 and 4; 6 is GPU 3's first.
  const std::vector<int> expected_indexes = {4, 5, 6};
  for (size_t i = 0; i < jobs.size(); ++i) {
    ASSERT_EQ(Str(At(At(Show(jobs[i]), "nodes"), 0)), "oss02") << "job " << jobs[i];
    ASSERT_EQ(GpuOf(jobs[i]), expected_indexes[i]) << "job " << jobs[i];
  }
  const pid_t busy_a = HostProcesses("sleep 3013").front();
  const pid_t busy_b = HostProcesses("sleep 3014").front();
  std::string gpus = "uuid=GPU-0 name=NVIDIA_H100_80GB_HBM3 util=0 mem_total_mib=81559 cc=9.0\n"
                     "uuid=GPU-1 name=NVIDIA_H100_80GB_HBM3 util=0 mem_total_mib=81559 cc=9.0\n"
                     "uuid=GPU-2 name=NVIDIA_H100_80GB_HBM3 mem_total_mib=81559 mig=1 cc=9.0\n"
                     "mig uuid=MIG-2-1 gi=1 ci=0 profile=3g.40gb util=0\n"
                     "mig uuid=MIG-2-2 gi=2 ci=0 profile=2g.20gb util=0\n";
  gpus += fmt::format("mig uuid=MIG-2-3 gi=3 ci=0 profile=1g.10gb util=80 pids={}\n", busy_a);
  gpus += fmt::format("mig uuid=MIG-2-4 gi=4 ci=0 profile=1g.10gb util=80 pids={}\n", busy_b);
  gpus += "uuid=GPU-3 name=NVIDIA_H100_80GB_HBM3 mem_total_mib=81559 mig=1 cc=9.0\n";
  for (int gi = 1; gi <= 7; ++gi) {
    gpus += fmt::format("mig uuid=MIG-3-{} gi={} ci=0 profile=1g.10gb util=0\n", gi, gi);
  }
  Write(gpus);
  ASSERT_TRUE(Eventually([&] { return State(jobs[2]) == "CANCELLED"; }, std::chrono::seconds(60)))
      << State(jobs[2]) << agent_->StderrText();
  EXPECT_THAT(Bmas({"logs", jobs[2]}).out,
              HasSubstr("bmas: job " + jobs[2] + " cancelled: its 1 GPU(s) stayed under"));
  EXPECT_EQ(State(jobs[0]), "RUNNING");
  EXPECT_EQ(State(jobs[1]), "RUNNING") << agent_->StderrText() << [&] {
    std::ifstream in(state_ + "/slurm/log/hooks.log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }() << Bmas({"logs", jobs[1]}).out;
  EXPECT_EQ(kill(busy_a, 0), 0) << "the sweep killed a busy slice's process";
  EXPECT_EQ(kill(busy_b, 0), 0) << "the sweep killed a busy slice's process";
  EXPECT_THAT(agent_->StderrText(), ::testing::Not(HasSubstr("outside the job the GPU belongs to")));
  for (size_t i = 0; i < 2; ++i) ASSERT_EQ(InHome("bmastest1", {"cancel", jobs[i]}).exit_code, 0);
}

}  // namespace
}  // namespace bmas::testing
