// `bmas slurm up/status/down`: a real Slurm (munged, slurmctld, slurmd per node, slurmrestd)
// started by the real binary in a fresh state dir, checked with Slurm's own commands, and
// stopped. Needs root and Slurm's packages (scripts/install-deps.sh installs them).

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <rapidjson/document.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/process.h"
#include "engine_process.h"
#include "plan/calibration.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SlurmLocalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || access("/usr/sbin/slurmctld", X_OK) != 0) {
      GTEST_SKIP() << "needs root and Slurm (bash scripts/install-deps.sh)";
    }
    // munge, nobody and the jobs' users must reach the state dir.
    fs::permissions(dir_.path(), fs::perms::owner_all | fs::perms::group_read |
                                     fs::perms::group_exec | fs::perms::others_read |
                                     fs::perms::others_exec);
  }

  void TearDown() override {
    for (const std::string& state : started_) {
      RunBmas({"--state-dir", state, "slurm", "down"});
    }
  }

  CliRun Bmas(const std::vector<std::string>& args) {
    auto r = RunBmas(args);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CliRun{};
  }

  // `bmas slurm up` in `state`; stopped at the end of the test.
  CliRun Up(const std::string& state, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--state-dir", state, "slurm", "up"};
    args.insert(args.end(), extra.begin(), extra.end());
    started_.push_back(state);
    return Bmas(args);
  }

  rapidjson::Document Status(const std::string& state) {
    CliRun r = Bmas({"--state-dir", state, "slurm", "status", "--json"});
    EXPECT_TRUE(r.status.Success()) << r.err;
    return ParseJson(r.out);
  }

  static std::string Conf(const std::string& state) { return state + "/slurm/etc/slurm.conf"; }

  TempDir dir_;
  std::vector<std::string> started_;
};

TEST_F(SlurmLocalTest, UpRunsJobsOnFakeGpusAndDownStopsExactlyWhatItStarted) {
  const std::string state = dir_.path() + "/state";
  CliRun up = Up(state);
  ASSERT_TRUE(up.status.Success()) << up.err;
  EXPECT_THAT(up.out, HasSubstr("slurmrestd  http://127.0.0.1:"));

  rapidjson::Document status = Status(state);
  std::vector<int> pids;
  for (const auto& d : At(status, "daemons").GetArray()) {
    EXPECT_TRUE(At(d, "running").GetBool()) << Str(At(d, "name"));
    pids.push_back(Int(At(d, "pid")));
  }
  EXPECT_EQ(pids.size(), 6u);  // munged, slurmctld, 3 slurmd, slurmrestd
  std::vector<std::string> nodes;
  for (const auto& n : At(status, "nodes").GetArray()) {
    nodes.push_back(Str(At(n, "name")));
    EXPECT_EQ(Str(At(n, "state")), "idle");
  }
  EXPECT_EQ(nodes, (std::vector<std::string>{"oss01", "oss02", "oss03"}));

  // Fake GPUs: character devices with the NVIDIA driver's major number, one set per node.
  const std::string conf = Conf(state);
  std::string gres;
  {
    std::ifstream in(state + "/slurm/etc/gres.conf");
    gres.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = gres.find("File=/dev/bmas-");
  ASSERT_NE(at, std::string::npos) << gres;
  const std::string device_dir = gres.substr(at + 5, gres.find("/oss01/") - at - 5);
  struct stat st;
  ASSERT_EQ(stat((device_dir + "/oss02/nvidia3").c_str(), &st), 0) << device_dir;
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(major(st.st_rdev), 195u);

  // A 2-GPU job lands on one node, sees two GPUs, and runs under that node's host name.
  auto job = RunCommand({"srun", "--gres=gpu:2", "-N1", "sh", "-c",
                         "echo $(hostname) $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"},
                        {"SLURM_CONF=" + conf}, std::chrono::seconds(30));
  ASSERT_TRUE(job) << job.error().message;
  ASSERT_EQ(job->exit_code, 0) << job->err;
  std::istringstream words(job->out);
  std::string host, node, gpus;
  words >> host >> node >> gpus;
  EXPECT_EQ(host, node);
  EXPECT_EQ(gpus, "0,1");

  // One cluster per state dir.
  CliRun again = Bmas({"--state-dir", state, "slurm", "up"});
  EXPECT_EQ(again.status.code, 1);
  EXPECT_THAT(again.err, HasSubstr("already up"));

  CliRun down = Bmas({"--state-dir", state, "slurm", "down"});
  ASSERT_TRUE(down.status.Success()) << down.err;
  for (int pid : pids) EXPECT_FALSE(ProcessRunning(pid)) << pid;
  EXPECT_FALSE(fs::exists(device_dir));
  CliRun gone = Bmas({"--state-dir", state, "slurm", "status"});
  EXPECT_EQ(gone.status.code, 1);
  EXPECT_THAT(gone.err, HasSubstr("no local Slurm cluster"));
}

// MIG slices (examples/cluster-local-mig.toml): slurmd takes each slice as a GPU of its profile's
// type, the nodes come up idle, and a job given one slice may open its GPU and the two access
// capabilities of its slice, and no other slice's (cgroup.conf's ConstrainDevices: a fake device
// the job may open answers ENXIO, no driver; one it may not, EPERM).
TEST_F(SlurmLocalTest, MigSlicesAreGpusOfTheirProfileFencedToTheirOwnCapabilities) {
  const std::string state = dir_.path() + "/state";
  CliRun up = Up(state, {"--cluster", std::string(BMAS_SOURCE_DIR) +
                                          "/examples/cluster-local-mig.toml"});
  ASSERT_TRUE(up.status.Success()) << up.err;
  rapidjson::Document status = Status(state);
  for (const auto& n : At(status, "nodes").GetArray()) {
    EXPECT_EQ(Str(At(n, "state")), "idle") << Str(At(n, "name"));
  }
  const std::string conf = Conf(state);
  auto shown = RunCommand({"scontrol", "show", "node", "oss02"}, {"SLURM_CONF=" + conf});
  ASSERT_TRUE(shown) << shown.error().message;
  EXPECT_THAT(shown->out, HasSubstr("Gres=gpu:h100:2,gpu:3g.40gb:1,gpu:2g.20gb:1,gpu:1g.10gb:9"));

  std::string gres;
  {
    std::ifstream in(state + "/slurm/etc/gres.conf");
    gres.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = gres.find("File=/dev/bmas-");
  ASSERT_NE(at, std::string::npos) << gres;
  const std::string node_dir = gres.substr(at + 5, gres.find("/oss01/") - at - 5) + "/oss02";
  struct stat st;
  ASSERT_EQ(stat((node_dir + "/nvidia-caps/nvidia-cap300").c_str(), &st), 0) << node_dir;
  EXPECT_TRUE(S_ISCHR(st.st_mode));

  // The job tries its node's GPUs and every capability there, and says how each open fails.
  const std::string probe = fmt::format(
      "for f in {0}/nvidia2 {0}/nvidia3 {0}/nvidia-caps/*; do "
      "if (exec 3<$f) 2>/dev/null; then r=open; else r=$( (exec 3<$f) 2>&1 ); fi; "
      "case $r in *'not permitted'*) r=EPERM;; *'No such device'*) r=ENXIO;; esac; "
      "echo \"$(basename $f) $r\"; done",
      node_dir);
  auto job = RunCommand({"srun", "--gres=gpu:1g.10gb:1", "-w", "oss02", "sh", "-c", probe},
                        {"SLURM_CONF=" + conf}, std::chrono::seconds(30));
  ASSERT_TRUE(job) << job.error().message;
  ASSERT_EQ(job->exit_code, 0) << job->err;
  std::map<std::string, std::string> opens;
  std::istringstream lines(job->out);
  for (std::string file, result; lines >> file >> result;) opens[file] = result;
  int allowed_caps = 0, denied_caps = 0;
  for (const auto& [file, result] : opens) {
    if (file.rfind("nvidia-cap", 0) != 0) continue;
    allowed_caps += result == "ENXIO";
    denied_caps += result == "EPERM";
  }
  EXPECT_EQ(allowed_caps, 2) << job->out;  // its GPU instance's and compute instance's
  EXPECT_EQ(denied_caps, 2 * 11 - 2) << job->out;  // 11 slices on oss02
  EXPECT_NE(opens["nvidia2"] == "ENXIO", opens["nvidia3"] == "ENXIO") << job->out;

  // The task prolog names the job's slices by MIG UUID, read through NVML (the fake here,
  // describing oss02's GPUs), for a user who is not root; Slurm's own value is their indexes.
  const std::string nvml = "/tmp/bmas-fake-nvml-mig-" + std::to_string(getpid()) + ".txt";
  const std::string config = "/tmp/bmas-fake-nvml-mig-" + std::to_string(getpid()) + ".toml";
  {
    std::ofstream(nvml) << "uuid=GPU-0 name=NVIDIA_H100_80GB_HBM3 mem_total_mib=81559 mig=0\n"
                           "uuid=GPU-1 name=NVIDIA_H100_80GB_HBM3 mem_total_mib=81559 mig=0\n"
                           "uuid=GPU-2 name=NVIDIA_H100_80GB_HBM3 mem_total_mib=81559 mig=1\n"
                           "mig uuid=MIG-2-1 gi=1 ci=0 profile=3g.40gb\n"
                           "mig uuid=MIG-2-2 gi=2 ci=0 profile=2g.20gb\n"
                           "mig uuid=MIG-2-3 gi=3 ci=0 profile=1g.10gb\n"
                           "mig uuid=MIG-2-4 gi=4 ci=0 profile=1g.10gb\n";
    std::ofstream(config) << "[telemetry]\nnvml_library = \"" << BMAS_FAKE_NVML_LIBRARY << "\"\n";
  }
  chmod(nvml.c_str(), 0644);
  chmod(config.c_str(), 0644);
  auto visible = [&](const std::string& gres) {
    auto r = RunCommand({"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "srun",
                         "--chdir=/", "--gres=" + gres, "-w", "oss02", "sh", "-c",
                         "echo $(id -un) $CUDA_VISIBLE_DEVICES"},
                        {"SLURM_CONF=" + conf, "BMAS_CONFIG=" + config, "BMAS_FAKE_NVML=" + nvml},
                        std::chrono::seconds(30));
    return r ? r->out + r->err : r.error().message;
  };
  EXPECT_THAT(visible("gpu:1g.10gb:2"), HasSubstr("nobody MIG-2-3,MIG-2-4\n"));
  EXPECT_THAT(visible("gpu:3g.40gb:1"), HasSubstr("nobody MIG-2-1\n"));
  // A whole GPU keeps Slurm's index.
  EXPECT_THAT(visible("gpu:h100:1"), HasSubstr("nobody 0\n"));
  std::remove(nvml.c_str());
  std::remove(config.c_str());

  // Whole GPUs beside the slices are asked for by their type.
  auto whole = RunCommand({"srun", "--gres=gpu:h100:2", "-w", "oss02", "sh", "-c",
                           "echo $CUDA_VISIBLE_DEVICES"},
                          {"SLURM_CONF=" + conf}, std::chrono::seconds(30));
  ASSERT_TRUE(whole) << whole.error().message;
  EXPECT_EQ(whole->exit_code, 0) << whole->err;
}

// Slurm numbers a node's gres type by type, not in gres.conf's order. With layouts whose types
// interleave (GPU 2: 3g, 1g, 1g, 1g, 1g; GPU 3: 3g, 2g, 1g, 1g), the one 2g.20gb slice is GPU 3's
// GPU instance 2 whatever index Slurm gives it, and the task prolog names that slice's UUID.
TEST_F(SlurmLocalTest, TheTaskPrologFollowsSlurmsGresOrderWhenTypesInterleave) {
  std::string inventory;
  {
    std::ifstream in(std::string(BMAS_SOURCE_DIR) + "/examples/cluster-local-mig.toml");
    inventory.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string two = R"(profiles = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])";
  const std::string three =
      R"(profiles = ["1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"])";
  ASSERT_NE(inventory.find(two), std::string::npos);
  ASSERT_NE(inventory.find(three), std::string::npos);
  inventory.replace(inventory.find(two), two.size(),
                    R"(profiles = ["3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"])");
  inventory.replace(inventory.find(three), three.size(),
                    R"(profiles = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])");
  const std::string file = dir_.WriteFile("interleaved.toml", inventory);
  const std::string state = dir_.path() + "/state";
  CliRun up = Up(state, {"--cluster", file});
  ASSERT_TRUE(up.status.Success()) << up.err;
  const std::string nvml = dir_.WriteFile(
      "gpus.txt",
      "uuid=GPU-0 name=NVIDIA_H100_80GB_HBM3 mem_total_mib=81559 mig=0\n"
      "uuid=GPU-1 name=NVIDIA_H100_80GB_HBM3 mem_total_mib=81559 mig=0\n"
      "uuid=GPU-2 name=NVIDIA_H100_80GB_HBM3 mem_total_mib=81559 mig=1\n"
      "mig uuid=MIG-2-1 gi=1 ci=0 profile=3g.40gb\nmig uuid=MIG-2-2 gi=2 ci=0 profile=1g.10gb\n"
      "mig uuid=MIG-2-3 gi=3 ci=0 profile=1g.10gb\nmig uuid=MIG-2-4 gi=4 ci=0 profile=1g.10gb\n"
      "mig uuid=MIG-2-5 gi=5 ci=0 profile=1g.10gb\n"
      "uuid=GPU-3 name=NVIDIA_H100_80GB_HBM3 mem_total_mib=81559 mig=1\n"
      "mig uuid=MIG-3-1 gi=1 ci=0 profile=3g.40gb\nmig uuid=MIG-3-2 gi=2 ci=0 profile=2g.20gb\n"
      "mig uuid=MIG-3-3 gi=3 ci=0 profile=1g.10gb\nmig uuid=MIG-3-4 gi=4 ci=0 profile=1g.10gb\n");
  const std::string config = dir_.WriteFile(
      "bmas.toml", std::string("[telemetry]\nnvml_library = \"") + BMAS_FAKE_NVML_LIBRARY + "\"\n");
  auto visible = [&](const std::string& gres) {
    auto r = RunCommand({"srun", "--gres=" + gres, "-w", "oss02", "sh", "-c",
                         "echo $SLURM_STEP_GPUS $CUDA_VISIBLE_DEVICES"},
                        {"SLURM_CONF=" + Conf(state), "BMAS_CONFIG=" + config,
                         "BMAS_FAKE_NVML=" + nvml},
                        std::chrono::seconds(30));
    return r ? r->out + r->err : r.error().message;
  };
  EXPECT_THAT(visible("gpu:2g.20gb:1"), HasSubstr(" MIG-3-2\n"));
  EXPECT_THAT(visible("gpu:3g.40gb:2"), HasSubstr(" MIG-2-1,MIG-3-1\n"));
  EXPECT_THAT(visible("gpu:1g.10gb:6"),
              HasSubstr(" MIG-2-2,MIG-2-3,MIG-2-4,MIG-2-5,MIG-3-3,MIG-3-4\n"));
}

// A slurmctld that died alone is started again by the next `bmas slurm up`; the other
// daemons, and so their jobs, run on (found by the fault benchmark, bench/RESULTS.md AS2).
TEST_F(SlurmLocalTest, UpStartsAgainADaemonThatDiedAndLeavesTheOthersRunning) {
  const std::string state = dir_.path() + "/state";
  ASSERT_TRUE(Up(state).status.Success());
  std::map<std::string, int> pids;
  const rapidjson::Document before = Status(state);
  for (const auto& d : At(before, "daemons").GetArray()) {
    pids[Str(At(d, "name"))] = Int(At(d, "pid"));
  }
  ASSERT_TRUE(pids.contains("slurmctld"));
  ASSERT_EQ(kill(pids["slurmctld"], SIGKILL), 0);
  ASSERT_TRUE(Eventually([&] { return !ProcessRunning(pids["slurmctld"]); },
                         std::chrono::seconds(10)));

  CliRun again = Bmas({"--state-dir", state, "slurm", "up"});
  ASSERT_TRUE(again.status.Success()) << again.err;
  EXPECT_THAT(again.out, HasSubstr("restarted slurmctld"));
  const rapidjson::Document after = Status(state);
  for (const auto& d : At(after, "daemons").GetArray()) {
    const std::string name = Str(At(d, "name"));
    EXPECT_TRUE(At(d, "running").GetBool()) << name;
    if (name != "slurmctld") EXPECT_EQ(Int(At(d, "pid")), pids[name]) << name;
  }
  auto job = RunCommand({"srun", "-N1", "hostname"}, {"SLURM_CONF=" + Conf(state)},
                        std::chrono::seconds(60));
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->exit_code, 0) << job->err;
}

TEST_F(SlurmLocalTest, TwoStateDirsRunTwoClustersSideBySide) {
  // One node each, from an inventory file.
  const std::string inventory = dir_.path() + "/one.toml";
  {
    std::ofstream out(inventory);
    out << "[cluster]\ncontroller = { name = \"localhost\", address = \"127.0.0.1\" }\n"
           "[cluster.slurm]\nlocal = true\n"
           "[[cluster.nodes]]\nnames = \"solo\"\naddress = \"127.0.0.1\"\ncpus = 2\n"
           "memory_gb = 2\n[cluster.nodes.gpus]\ncount = 2\ntype = \"h100\"\n";
  }
  const std::string a = dir_.path() + "/a", b = dir_.path() + "/b";
  CliRun up_a = Up(a, {"--cluster", inventory});
  ASSERT_TRUE(up_a.status.Success()) << up_a.err;
  CliRun up_b = Up(b, {"--cluster", inventory});
  ASSERT_TRUE(up_b.status.Success()) << up_b.err;
  EXPECT_NE(Str(At(Status(a), "slurmrestd")), Str(At(Status(b), "slurmrestd")));
  for (const std::string& state : {a, b}) {
    auto job = RunCommand({"srun", "--gres=gpu:1", "hostname"}, {"SLURM_CONF=" + Conf(state)},
                          std::chrono::seconds(30));
    ASSERT_TRUE(job) << job.error().message;
    EXPECT_EQ(job->exit_code, 0) << job->err;
    EXPECT_EQ(job->out, "solo\n");
  }
}

TEST_F(SlurmLocalTest, PlanTakesItsLaunchDelayFromTheFinishedJobsOfTheClusterItIsPointedAt) {
  const std::string student = EnsureUnixUser("bmastest1");
  const std::string state = dir_.path() + "/state";
  CliRun up = Up(state);
  ASSERT_TRUE(up.status.Success()) << up.err;
  // 12 one-GPU jobs on the empty cluster, sent at different moments of a second.
  for (int i = 0; i < 12; ++i) {
    auto r = RunCommand({"sbatch", "--parsable", "--gres=gpu:1", "-D", dir_.path(), "-o",
                         "/dev/null", "--wrap", "true"},
                        {"SLURM_CONF=" + Conf(state)}, std::chrono::seconds(30));
    ASSERT_TRUE(r && r->exit_code == 0) << (r ? r->err : r.error().message);
    std::this_thread::sleep_for(std::chrono::milliseconds(370));
  }
  ASSERT_TRUE(Eventually(
      [&] {
        // slurmctld's own list: the local cluster keeps no accounting.
        auto r = RunCommand({"squeue", "-h", "-t", "all", "-o", "%T"},
                            {"SLURM_CONF=" + Conf(state)}, std::chrono::seconds(10));
        if (!r || r->exit_code != 0) return false;
        int completed = 0;
        for (size_t at = 0; (at = r->out.find("COMPLETED", at)) != std::string::npos; ++at) {
          ++completed;
        }
        return completed == 12;
      },
      std::chrono::seconds(60)))
      << "the jobs did not finish";

  dir_.WriteFile("trace.csv", "submit_s,user,gpus,duration_s\n0,a,1,10\n5,b,2,20\n");
  const std::string cluster = std::string(BMAS_SOURCE_DIR) + "/examples/cluster-local.toml";
  auto plan = RunBmasIn(dir_.path(), state,
                        {"plan", "--cluster", cluster, "--trace", "trace.csv", "--json"}, student);
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->exit_code, 0) << plan->err;
  rapidjson::Document d = ParseJson(plan->out);
  const rapidjson::Value& sim = At(At(d, "sim"), "calibration");
  const std::string source = Str(At(sim, "launch_delay_source"));
  EXPECT_THAT(source, HasSubstr("slurmrestd at 127.0.0.1:"));
  EXPECT_THAT(source, HasSubstr(": 12 finished jobs that started on free GPUs"));
  // Slurm starts a batch job at its next pass, once a second here: 0-1 s, plus the launch.
  const double delay = At(sim, "launch_delay_s").GetDouble();
  EXPECT_GE(delay, plan::kUnseenLaunchS);
  EXPECT_LE(delay, 1 + plan::kUnseenLaunchS) << source;
  std::cout << "launch delay from the cluster: " << delay << " s (" << source << ")\n";

  // With the cluster down, the measured default, and why.
  EXPECT_TRUE(Bmas({"--state-dir", state, "slurm", "down"}).status.Success());
  auto fallback = RunBmasIn(dir_.path(), state,
                            {"plan", "--cluster", cluster, "--trace", "trace.csv", "--json"},
                            student, std::chrono::seconds(60));
  ASSERT_TRUE(fallback) << fallback.error().message;
  ASSERT_EQ(fallback->exit_code, 0) << fallback->err;
  rapidjson::Document f = ParseJson(fallback->out);
  const rapidjson::Value& measured = At(At(f, "sim"), "calibration");
  EXPECT_EQ(At(measured, "launch_delay_s").GetDouble(), plan::kMeasuredLaunchDelayS);
  EXPECT_THAT(Str(At(measured, "launch_delay_source")), HasSubstr("bmas's default ("));
}

TEST_F(SlurmLocalTest, BadInventoryOrUnreachableStateDirIsAClearErrorAndStartsNothing) {
  const std::string inventory = dir_.path() + "/bad.toml";
  {
    std::ofstream out(inventory);
    out << "[cluster]\ncontroller = { name = \"localhost\", address = \"127.0.0.1\" }\n"
           "[[cluster.nodes]]\nnames = \"n1\"\naddress = \"127.0.0.1\"\ncpus = 2\n"
           "memory_gb = 2\n[[cluster.nodes]]\nnames = \"n1\"\naddress = \"127.0.0.1\"\n"
           "cpus = 2\nmemory_gb = 2\n";
  }
  const std::string state = dir_.path() + "/state";
  CliRun bad = Bmas({"--state-dir", state, "slurm", "up", "--cluster", inventory});
  EXPECT_EQ(bad.status.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("n1"));
  EXPECT_FALSE(fs::exists(state + "/slurm/local.json"));

  // A parent the daemons' users cannot pass through.
  const std::string closed = dir_.path() + "/closed";
  fs::create_directories(closed);
  fs::permissions(closed, fs::perms::owner_all);
  CliRun unreachable = Bmas({"--state-dir", closed + "/state", "slurm", "up"});
  EXPECT_EQ(unreachable.status.code, 2);
  EXPECT_THAT(unreachable.err, HasSubstr("chmod o+x " + closed));
}

}  // namespace
}  // namespace bmas::testing
