// `bmas doctor` on this machine: the real binary, reading the real /sys, /proc and /etc. It
// starts nothing. What it must say is worked out here independently of bmas's own code:
// /proc/cpuinfo's "hypervisor" flag for a VM, /dev/nvidia0 for a GPU.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "engine_process.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

bool CpuinfoSaysHypervisor() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) == 0) return line.find(" hypervisor") != std::string::npos;
  }
  return false;
}

class DoctorTest : public ::testing::Test {
 protected:
  CliRun Doctor(bool json) {
    std::vector<std::string> args = {"doctor"};
    if (json) args.push_back("--json");
    auto r = RunBmas(args, {{"BMAS_STATE_DIR", dir_.path() + "/state"}},
                     std::chrono::seconds(60));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CliRun{};
  }

  TempDir dir_;
};

TEST_F(DoctorTest, JsonOnThisMachine) {
  const CliRun run = Doctor(true);
  ASSERT_TRUE(run.status.exited) << run.status.ToString();
  rapidjson::Document d;
  d.Parse(run.out.c_str());
  ASSERT_FALSE(d.HasParseError()) << run.out;
  ASSERT_TRUE(d.IsObject());
  ASSERT_TRUE(d["ok"].IsBool());
  ASSERT_TRUE(d["checks"].IsArray());
  std::map<std::string, std::pair<bool, std::string>> checks;  // name -> ok, found
  bool required_pass = true;
  for (const auto& c : d["checks"].GetArray()) {
    for (const char* key : {"name", "kind", "required", "found", "fix"}) {
      ASSERT_TRUE(c.HasMember(key) && c[key].IsString()) << key << " in " << run.out;
    }
    ASSERT_TRUE(c["ok"].IsBool());
    const std::string kind = c["kind"].GetString();
    ASSERT_TRUE(kind == "spec" || kind == "bmas" || kind == "info") << kind;
    EXPECT_NE(std::string(c["found"].GetString()), "");
    if (!c["ok"].GetBool()) {
      EXPECT_NE(std::string(c["fix"].GetString()), "") << c["name"].GetString();
      if (kind != "info") required_pass = false;
    }
    checks[c["name"].GetString()] = {c["ok"].GetBool(), c["found"].GetString()};
  }
  for (const char* name : {"gpu-arch", "gpu-vram", "nvlink", "rdma", "roce-v2", "ram",
                           "bare-metal", "cgroups", "kernel", "lxd", "slurm", "munge-key",
                           "lxcfs", "subids", "clock", "clock-skew"}) {
    EXPECT_TRUE(checks.count(name)) << name;
  }
  // No Slurm runs in this test's state dir and no --config names one: the clock against
  // slurmctld's is skipped, and does not fail the run.
  EXPECT_TRUE(checks["clock-skew"].first);
  EXPECT_THAT(checks["clock-skew"].second, StartsWith("no Slurm reachable ("));
  EXPECT_THAT(checks["clock-skew"].second, HasSubstr(": skipped"));
  EXPECT_EQ(d["ok"].GetBool(), required_pass);
  EXPECT_EQ(run.status.code, required_pass ? 0 : 1);

  if (CpuinfoSaysHypervisor()) {
    EXPECT_FALSE(checks["bare-metal"].first);
    EXPECT_THAT(checks["bare-metal"].second, StartsWith("a virtual machine: "));
  } else {
    EXPECT_TRUE(checks["bare-metal"].first) << checks["bare-metal"].second;
  }
  if (!std::filesystem::exists("/dev/nvidia0")) {
    for (const char* name : {"gpu-arch", "gpu-vram", "nvlink"}) {
      EXPECT_FALSE(checks[name].first);
      EXPECT_THAT(checks[name].second, StartsWith("no GPU/driver")) << name;
    }
    EXPECT_FALSE(d["ok"].GetBool());
    EXPECT_EQ(run.status.code, 1);
  }
  if (!std::filesystem::exists("/sys/class/infiniband")) {
    EXPECT_THAT(checks["rdma"].second, StartsWith("no RDMA device"));
  }
  ASSERT_TRUE(d["can_run"].IsArray());
  std::string can;
  for (const auto& p : d["can_run"].GetArray()) can += std::string(p.GetString()) + ",";
  EXPECT_THAT(can, StartsWith("simulated engines,gateway,"));
  ASSERT_TRUE(d["cannot_run"].IsArray());
}

TEST_F(DoctorTest, TextSaysTheSameAsJson) {
  const CliRun json = Doctor(true);
  const CliRun text = Doctor(false);
  EXPECT_EQ(text.status.code, json.status.code);
  rapidjson::Document d;
  d.Parse(json.out.c_str());
  ASSERT_FALSE(d.HasParseError());
  // The hardware's lines only: lxcfs, the clock and the like can change between the two runs.
  for (const auto& c : d["checks"].GetArray()) {
    if (std::string(c["kind"].GetString()) != "spec") continue;
    const std::string line = std::string(c["ok"].GetBool() ? "  ✓ " : "  ✗ ") +
                             c["name"].GetString() + ": " + c["found"].GetString();
    EXPECT_THAT(text.out, HasSubstr(line));
  }
  EXPECT_THAT(text.out, HasSubstr("\ncan run here: simulated engines, gateway"));
}

// The GPU checks read NVML through the same code as the agent: here the fake libnvidia-ml
// (tests/fake_nvml), named by [telemetry] nvml_library, with the GPUs a test describes.
TEST_F(DoctorTest, TheGpuChecksReadNvml) {
  const std::string values = dir_.WriteFile("gpus.txt", "");
  const std::string config = dir_.WriteFile(
      "bmas.toml", std::string("[telemetry]\nnvml_library = \"") + BMAS_FAKE_NVML_LIBRARY + "\"\n");
  auto gpu_checks = [&](const std::string& gpus) {
    std::ofstream(values) << gpus;
    auto r = RunBmas({"--config", config, "doctor", "--json"},
                     {{"BMAS_STATE_DIR", dir_.path() + "/state"}, {"BMAS_FAKE_NVML", values}},
                     std::chrono::seconds(60));
    std::map<std::string, std::pair<bool, std::string>> checks;
    rapidjson::Document d;
    d.Parse(r ? r->out.c_str() : "{}");
    if (d.HasParseError() || !d.IsObject() || !d.HasMember("checks")) return checks;
    for (const auto& c : d["checks"].GetArray()) {
      checks[c["name"].GetString()] = {c["ok"].GetBool(), c["found"].GetString()};
    }
    return checks;
  };
  std::string h100s;
  for (int i = 0; i < 4; ++i) {
    h100s += fmt::format("uuid=GPU-{} name=NVIDIA_H100_80GB_HBM3 util=0 mem_total_mib=81559 "
                         "mig=0 nvlinks=18 nvlinks_up=18 cc=9.0\n",
                         i);
  }
  auto good = gpu_checks(h100s);
  for (const char* name : {"gpu-arch", "gpu-vram", "nvlink"}) {
    EXPECT_TRUE(good[name].first) << name << ": " << good[name].second;
  }
  EXPECT_THAT(good["gpu-arch"].second, HasSubstr("H100"));
  // A 24 GB Ampere card without MIG or NVLink fails all three, saying what was found.
  auto poor = gpu_checks("uuid=GPU-a name=NVIDIA_GeForce_RTX_3090 util=0 mem_total_mib=24576 "
                         "cc=8.6\n");
  for (const char* name : {"gpu-arch", "gpu-vram", "nvlink"}) {
    EXPECT_FALSE(poor[name].first) << name << ": " << poor[name].second;
  }
  EXPECT_THAT(poor["gpu-arch"].second, HasSubstr("RTX 3090"));
}

// `--cluster INVENTORY --node NAME` adds mig-layout: the node's GPUs as the fake NVML reports
// them, MIG devices included, against the layouts examples/cluster-local-mig.toml gives oss02.
TEST_F(DoctorTest, TheMigLayoutCheckReadsNvmlAgainstTheInventory) {
  const std::string values = dir_.WriteFile("gpus.txt", "");
  const std::string config = dir_.WriteFile(
      "bmas.toml", std::string("[telemetry]\nnvml_library = \"") + BMAS_FAKE_NVML_LIBRARY + "\"\n");
  const std::string inventory = std::string(BMAS_SOURCE_DIR) + "/examples/cluster-local-mig.toml";
  auto mig_check = [&](const std::string& gpus, const std::string& node) {
    std::ofstream(values) << gpus;
    auto r = RunBmas({"--config", config, "doctor", "--json", "--cluster", inventory, "--node", node},
                     {{"BMAS_STATE_DIR", dir_.path() + "/state"}, {"BMAS_FAKE_NVML", values}},
                     std::chrono::seconds(60));
    rapidjson::Document d;
    d.Parse(r ? r->out.c_str() : "{}");
    std::pair<bool, std::string> check{false, "no mig-layout check in: " + (r ? r->out : "")};
    if (d.HasParseError() || !d.IsObject() || !d.HasMember("checks")) return check;
    for (const auto& c : d["checks"].GetArray()) {
      if (std::string(c["name"].GetString()) == "mig-layout") {
        check = {c["ok"].GetBool(), std::string(c["found"].GetString()) + " | fix: " +
                                        c["fix"].GetString()};
      }
    }
    return check;
  };
  const std::string gpu = "name=NVIDIA_H100_80GB_HBM3 mem_total_mib=81559 cc=9.0 nvlinks=18 "
                          "nvlinks_up=18 ";
  std::string split = "uuid=GPU-0 " + gpu + "mig=0\nuuid=GPU-1 " + gpu + "mig=0\n" +
                      "uuid=GPU-2 " + gpu + "mig=1\n" +
                      "mig uuid=MIG-2-1 gi=1 ci=0 profile=3g.40gb\n"
                      "mig uuid=MIG-2-2 gi=2 ci=0 profile=2g.20gb\n"
                      "mig uuid=MIG-2-3 gi=3 ci=0 profile=1g.10gb\n"
                      "mig uuid=MIG-2-4 gi=4 ci=0 profile=1g.10gb\n"
                      "uuid=GPU-3 " + gpu + "mig=1\n";
  for (int gi = 1; gi <= 7; ++gi) {
    split += fmt::format("mig uuid=MIG-3-{} gi={} ci=0 profile=1g.10gb\n", gi, gi);
  }
  auto good = mig_check(split, "oss02");
  EXPECT_TRUE(good.first) << good.second;
  EXPECT_THAT(good.second, HasSubstr("GPU 2: 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb"));
  // oss01 keeps every GPU whole: GPUs 2 and 3 in MIG mode are wrong there.
  auto whole = mig_check(split, "oss01");
  EXPECT_FALSE(whole.first);
  EXPECT_THAT(whole.second, HasSubstr("GPU 2: MIG on (3g.40gb (GI 1) + 2g.20gb (GI 2)"));
  EXPECT_THAT(whole.second, HasSubstr("nvidia-smi -i 3 -mig 0"));
  // A node the inventory does not list.
  auto stranger = mig_check(split, "gpu-9");
  EXPECT_FALSE(stranger.first);
  EXPECT_THAT(stranger.second, HasSubstr("lists no node gpu-9"));
}

}  // namespace
}  // namespace bmas::testing
