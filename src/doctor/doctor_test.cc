#include <sys/stat.h>
#include <sys/timex.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "doctor/checks.h"
#include "doctor/node_facts.h"
#include "doctor/report.h"
#include "gpu/gpu_telemetry.h"

namespace bmas::doctor {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// GPUs as a test sets them, or no driver.
class FakeGpuTelemetry : public GpuTelemetry {
 public:
  explicit FakeGpuTelemetry(std::vector<GpuReading> gpus) : gpus_(std::move(gpus)) {}
  FakeGpuTelemetry() : no_driver_(true) {}
  Result<std::vector<GpuReading>> Read() override {
    if (no_driver_) {
      return Error{ErrorCode::kUnavailable, "no NVIDIA driver (libnvidia-ml.so.1 not found)"};
    }
    return gpus_;
  }
  std::string Describe() override { return "fake"; }

 private:
  std::vector<GpuReading> gpus_;
  bool no_driver_ = false;
};

GpuReading H100(int index) {
  GpuReading g;
  g.index = index;
  g.name = "NVIDIA H100 80GB HBM3";
  g.mem_total_bytes = 81559ull << 20;
  g.mig_capable = true;
  g.nvlinks_up = g.nvlinks_total = 18;
  g.cuda_major = 9;
  return g;
}

Check Named(const std::vector<Check>& checks, const std::string& name) {
  for (const Check& c : checks) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no check " << name;
  return {};
}

TEST(GpuChecks, EightH100sWithEveryNvlinkUpPass) {
  std::vector<GpuReading> gpus;
  for (int i = 0; i < 8; ++i) gpus.push_back(H100(i));
  FakeGpuTelemetry telemetry(gpus);
  const auto checks = GpuChecks(telemetry.Read());
  ASSERT_EQ(checks.size(), 3u);
  for (const Check& c : checks) {
    EXPECT_TRUE(c.ok) << c.name << ": " << c.found;
    EXPECT_EQ(c.kind, CheckKind::kSpec);
    EXPECT_EQ(c.fix, "");
  }
  EXPECT_EQ(Named(checks, "gpu-arch").found,
            "8 × NVIDIA H100 80GB HBM3: Hopper (compute 9.0), MIG capable");
  EXPECT_EQ(Named(checks, "gpu-vram").found, "8 × NVIDIA H100 80GB HBM3: 79.6 GiB");
  EXPECT_EQ(Named(checks, "nvlink").found, "8 × NVIDIA H100 80GB HBM3: 18 of 18 links up");
}

TEST(GpuChecks, A24GbAmpereCardWithoutNvlinkFailsEachWithAFix) {
  GpuReading g;
  g.name = "NVIDIA GeForce RTX 3090";
  g.mem_total_bytes = 24576ull << 20;
  g.cuda_major = 8;
  g.cuda_minor = 6;
  FakeGpuTelemetry telemetry({g});
  const auto checks = GpuChecks(telemetry.Read());
  for (const Check& c : checks) {
    EXPECT_FALSE(c.ok) << c.name;
    EXPECT_NE(c.fix, "") << c.name;
  }
  EXPECT_THAT(Named(checks, "gpu-arch").found, HasSubstr("Ampere (compute 8.6), no MIG"));
  EXPECT_THAT(Named(checks, "gpu-vram").found, HasSubstr("24.0 GiB"));
  EXPECT_THAT(Named(checks, "nvlink").found, HasSubstr("no NVLink"));
}

TEST(GpuChecks, A100HasMigButIsAmpereBelowTheSpec) {
  GpuReading a100 = H100(0);
  a100.name = "NVIDIA A100-SXM4-80GB";
  a100.cuda_major = 8;
  a100.cuda_minor = 0;
  GpuReading down = H100(1);
  down.nvlinks_up = 16;
  FakeGpuTelemetry telemetry({a100, down});
  const auto checks = GpuChecks(telemetry.Read());
  EXPECT_FALSE(Named(checks, "gpu-arch").ok);
  EXPECT_THAT(Named(checks, "gpu-arch").found, HasSubstr("Ampere (compute 8.0), MIG capable"));
  EXPECT_TRUE(Named(checks, "gpu-vram").ok);
  EXPECT_FALSE(Named(checks, "nvlink").ok);
  EXPECT_THAT(Named(checks, "nvlink").found, HasSubstr("16 of 18 links up"));
}

TEST(GpuChecks, NoDriverFailsEveryGpuCheckSayingSo) {
  FakeGpuTelemetry telemetry;
  for (const Check& c : GpuChecks(telemetry.Read())) {
    EXPECT_FALSE(c.ok);
    EXPECT_THAT(c.found, StartsWith("no GPU/driver: no NVIDIA driver"));
    EXPECT_NE(c.fix, "");
  }
  for (const Check& c : GpuChecks(std::vector<GpuReading>{})) {
    EXPECT_FALSE(c.ok);
    EXPECT_THAT(c.found, StartsWith("no GPU/driver"));
  }
}

TEST(BareMetalCheck, SaysWhichHypervisor) {
  VirtFacts firecracker{true, std::string("KVMKVMKVM\0\0\0", 12), false, "", "", "docker"};
  Check c = BareMetalCheck(firecracker);
  EXPECT_FALSE(c.ok);
  EXPECT_THAT(c.found, StartsWith("a virtual machine: KVM (CPUID hypervisor bit set, signature "
                                  "\"KVMKVMKVM\"; no DMI tables"));
  EXPECT_THAT(c.found, HasSubstr("inside a docker container"));

  VirtFacts qemu{false, "", true, "QEMU", "Standard PC (Q35 + ICH9, 2009)", ""};
  EXPECT_THAT(BareMetalCheck(qemu).found, StartsWith("a virtual machine: QEMU"));
  VirtFacts vmware{true, "VMwareVMware", true, "VMware, Inc.", "VMware7,1", ""};
  EXPECT_THAT(BareMetalCheck(vmware).found, StartsWith("a virtual machine: VMware ("));
  VirtFacts ec2{true, "KVMKVMKVM", true, "Amazon EC2", "p5.48xlarge", ""};
  EXPECT_THAT(BareMetalCheck(ec2).found, StartsWith("a virtual machine: KVM (Amazon EC2)"));
  VirtFacts unknown{true, "NewHypervsor", true, "Acme", "Box", ""};
  EXPECT_THAT(BareMetalCheck(unknown).found, StartsWith("a virtual machine: unknown hypervisor"));

  VirtFacts metal{false, "", true, "Amazon EC2", "p5.metal", ""};
  EXPECT_TRUE(BareMetalCheck(metal).ok);
  VirtFacts dell{false, "", true, "Dell Inc.", "PowerEdge XE9680", ""};
  c = BareMetalCheck(dell);
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.found, "bare metal (CPUID hypervisor bit clear; DMI vendor \"Dell Inc.\", product "
                     "\"PowerEdge XE9680\")");
  EXPECT_EQ(HypervisorFromSignature("Microsoft Hv"), "Hyper-V");
  EXPECT_EQ(HypervisorFromSignature("XenVMMXenVMM"), "Xen");
  EXPECT_EQ(HypervisorFromDmi("Microsoft Corporation", "Virtual Machine"), "Hyper-V");
}

TEST(CgroupCheck, V2AloneHybridAndV1) {
  const std::string v2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n";
  EXPECT_TRUE(CgroupCheck(v2, "cpuset cpu io memory pids").ok);
  Check c = CgroupCheck(v2, "cpu io pids");
  EXPECT_FALSE(c.ok);
  EXPECT_THAT(c.fix, HasSubstr("cpuset and memory"));

  const std::string hybrid =
      "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
      "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
      "cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n"
      "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
      "cgroup /sys/fs/cgroup/devices cgroup rw,relatime,devices 0 0\n"
      "cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0\n"
      "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
  c = CgroupCheck(hybrid, "");
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.found,
            "hybrid: cgroup v1 (cpu, cpuset, memory, devices) and cgroup v2 at "
            "/sys/fs/cgroup/unified");
  EXPECT_THAT(c.fix, HasSubstr("systemd.unified_cgroup_hierarchy=1"));

  c = CgroupCheck("cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n", "");
  EXPECT_FALSE(c.ok);
  EXPECT_THAT(c.fix, HasSubstr("cpuset, devices"));
  EXPECT_FALSE(CgroupCheck("proc /proc proc rw 0 0\n", "").ok);
}

TEST(VersionChecks, KernelLxdSlurm) {
  EXPECT_TRUE(KernelCheck("6.1.0-18-amd64").ok);
  EXPECT_TRUE(KernelCheck("5.6.0").ok);
  EXPECT_FALSE(KernelCheck("5.4.0-150-generic").ok);
  EXPECT_FALSE(KernelCheck("").ok);

  Check c = LxdCheck({true, 0, "5.0.2\n", ""});
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.found, "LXD 5.0.2");
  c = LxdCheck({true, 0, "4.0.9\n", ""});
  EXPECT_FALSE(c.ok);
  EXPECT_THAT(c.fix, HasSubstr("upgrade to LXD 5.0"));
  c = LxdCheck({false, -1, "", "cannot start lxd: No such file or directory"});
  EXPECT_FALSE(c.ok);
  EXPECT_THAT(c.found, StartsWith("not installed"));
  EXPECT_THAT(c.fix, HasSubstr("apt-get install"));

  c = SlurmCheck({true, 0, "slurm-wlm 22.05.8\n", ""});
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.found, "slurm-wlm 22.05.8");
  EXPECT_FALSE(SlurmCheck({true, 0, "slurm 21.08.5\n", ""}).ok);
  EXPECT_FALSE(SlurmCheck({true, 1, "error: something\n", ""}).ok);
}

TEST(SubIdsCheck, RootsFirstBigRangeMustHoldEveryWorkspace) {
  const std::string text =
      "root:1001:1\n_lxd:100000:10000001\nroot:100000:19791872\nbob:19891872:65536\n";
  Check c = SubIdsCheck(text, text, 300);
  EXPECT_TRUE(c.ok) << c.found;
  EXPECT_EQ(c.found, "/etc/subuid: root:100000:19791872; /etc/subgid: root:100000:19791872");
  c = SubIdsCheck(text, "root:100000:65536\n", 300);
  EXPECT_FALSE(c.ok);
  EXPECT_THAT(c.fix, HasSubstr("19791872"));
  EXPECT_FALSE(SubIdsCheck(text, "", 300).ok);
}

TEST(ClockCheck, UnsynchronisedIsInformational) {
  Check c = ClockCheck({TIME_ERROR, 0, 16000000});
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.kind, CheckKind::kInfo);
  EXPECT_THAT(c.found, StartsWith("not synchronised (adjtimex TIME_ERROR)"));
  EXPECT_TRUE(AllRequiredPass({c}));
  EXPECT_TRUE(ClockCheck({TIME_OK, 500, 1200}).ok);
  Check spec = KernelCheck("4.19");
  EXPECT_FALSE(AllRequiredPass({c, spec}));
}

TEST(ClockOffsetTest, TheControllersSecondWasReadDuringTheRoundTrip) {
  // Asked at 100.2, answered at 100.4; slurmctld said 100: it read 100.0 to 100.999 at some
  // instant from 100.2 to 100.4, so its clock is 0.4 s behind to 0.8 s ahead.
  const ClockOffset o = EstimateClockOffset(100.2, 100.4, 100);
  EXPECT_NEAR(o.low, -0.4, 1e-9);
  EXPECT_NEAR(o.high, 0.8, 1e-9);
  const ClockOffset ahead = EstimateClockOffset(100.2, 100.4, 130);
  EXPECT_NEAR(ahead.low, 29.6, 1e-9);
  EXPECT_NEAR(ahead.high, 30.8, 1e-9);
}

SlurmClockFacts SlurmSaid(double asked_at, double answered_at, int64_t controller_time) {
  return {true, "", "127.0.0.1:6820", asked_at, answered_at, controller_time};
}

TEST(ClockSkewCheck, InStepPasses) {
  const Check c = ClockSkewCheck(SlurmSaid(1000.30, 1000.32, 1000));
  EXPECT_TRUE(c.ok) << c.found;
  EXPECT_EQ(c.kind, CheckKind::kBmas);
  EXPECT_THAT(c.found, StartsWith("in step with slurmctld's clock (+0.2 s, ± 0.5 s"));
  EXPECT_THAT(c.found, HasSubstr("127.0.0.1:6820"));
}

TEST(ClockSkewCheck, SkewOverTheLimitFailsEitherWay) {
  const Check behind = ClockSkewCheck(SlurmSaid(1000.0, 1000.2, 1030));
  EXPECT_FALSE(behind.ok);
  EXPECT_THAT(behind.found, StartsWith("30.4 s behind slurmctld's clock (+30.4 s, ± 0.6 s"));
  EXPECT_THAT(behind.fix, HasSubstr("chrony"));
  EXPECT_FALSE(AllRequiredPass({behind}));
  const Check ahead = ClockSkewCheck(SlurmSaid(1000.0, 1000.2, 990));
  EXPECT_FALSE(ahead.ok);
  EXPECT_THAT(ahead.found, StartsWith("9.6 s ahead of slurmctld's clock (-9.6 s"));
  // Within the limit, or not surely over it (a slow answer widens the range): passes.
  EXPECT_TRUE(ClockSkewCheck(SlurmSaid(1000.1, 1000.2, 1004)).ok);
  EXPECT_TRUE(ClockSkewCheck(SlurmSaid(1000.0, 1008.0, 1010)).ok);
}

TEST(ClockSkewCheck, NoSlurmIsSkipped) {
  SlurmClockFacts none;
  none.why_not = "no Slurm reachable (no Slurm to talk to)";
  const Check c = ClockSkewCheck(none);
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.kind, CheckKind::kInfo);
  EXPECT_EQ(c.found, "no Slurm reachable (no Slurm to talk to): skipped");
  EXPECT_EQ(ClockSkewCheck({}).found, "no Slurm reachable: skipped");
}

// A node's files written under a temporary root.
class FakeTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bmas-doctor-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  void Write(const std::string& path, const std::string& text, mode_t mode = 0644) {
    const fs::path p = root_ + path;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    chmod(p.c_str(), mode);
  }
  NodeFacts Read() { return ReadNodeFacts({root_, "/var/lib/bmas", false}); }

  // A node of the spec, as far as files say: 400 Gb/s RoCE, 1 TiB, Dell, cgroup v2, munge,
  // lxcfs serving, id ranges for 300 users.
  void WriteGoodNode() {
    const std::string port = "/sys/class/infiniband/mlx5_0/ports/1/";
    Write(port + "rate", "400 Gb/sec (4X NDR)\n");
    Write(port + "state", "4: ACTIVE\n");
    Write(port + "link_layer", "Ethernet\n");
    Write(port + "gid_attrs/types/0", "IB/RoCE v1\n");
    Write(port + "gid_attrs/types/1", "RoCE v2\n");
    Write(port + "gid_attrs/types/2", "");
    Write("/sys/class/infiniband/mlx5_1/ports/1/rate", "100 Gb/sec (4X EDR)\n");
    Write("/proc/meminfo", "MemTotal:       1056291488 kB\nMemFree: 1 kB\n");
    Write("/sys/class/dmi/id/sys_vendor", "Dell Inc.\n");
    Write("/sys/class/dmi/id/product_name", "PowerEdge XE9680\n");
    Write("/proc/self/mounts", "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n");
    Write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    Write("/etc/passwd", "root:x:0:0::/root:/bin/bash\nmunge:x:" + std::to_string(getuid()) +
                             ":110::/nonexistent:/usr/sbin/nologin\n");
    Write("/etc/munge/munge.key", "k", 0400);
    Write("/var/lib/bmas/slurm/etc/munge.key", "k", 0600);
    Write("/var/lib/lxcfs/proc/meminfo", "MemTotal: 1 kB\n");
    Write("/proc/4242/comm", "lxcfs\n");
    Write("/etc/subuid", "root:100000:19791872\n");
    Write("/etc/subgid", "root:100000:19791872\n");
  }

  std::string root_;
};

TEST_F(FakeTreeTest, ReadsTheTree) {
  WriteGoodNode();
  const NodeFacts f = Read();
  ASSERT_EQ(f.rdma.size(), 2u);
  EXPECT_EQ(f.rdma[0].device, "mlx5_0");
  EXPECT_EQ(f.rdma[0].port, 1);
  EXPECT_EQ(f.rdma[0].rate, "400 Gb/sec (4X NDR)");
  EXPECT_EQ(f.rdma[0].gid_types, (std::vector<std::string>{"IB/RoCE v1", "RoCE v2"}));
  EXPECT_TRUE(f.virt.dmi_present);
  EXPECT_EQ(f.virt.dmi_vendor, "Dell Inc.");
  EXPECT_FALSE(f.virt.cpuid_hypervisor.has_value());  // not live
  EXPECT_EQ(f.munge_uid, getuid());
  ASSERT_EQ(f.munge_keys.size(), 2u);
  EXPECT_EQ(f.munge_keys[1].path, "/var/lib/bmas/slurm/etc/munge.key");
  EXPECT_EQ(f.munge_keys[1].mode, 0600u);
  EXPECT_TRUE(f.lxcfs.meminfo_readable);
  EXPECT_TRUE(f.lxcfs.process_running);
  EXPECT_FALSE(f.lxcfs.installed);
}

TEST_F(FakeTreeTest, AGoodNodePassesEverySpecAndBmasCheck) {
  WriteGoodNode();
  NodeFacts f = Read();
  f.virt.cpuid_hypervisor = false;
  f.kernel_release = "6.1.0-18-amd64";
  f.lxd = {true, 0, "5.0.2\n", ""};
  f.slurm = {true, 0, "slurm-wlm 22.05.8\n", ""};
  f.clock = {TIME_OK, 100, 200};
  f.is_root = true;
  std::vector<GpuReading> gpus;
  for (int i = 0; i < 8; ++i) gpus.push_back(H100(i));
  FakeGpuTelemetry telemetry(gpus);
  const Report r = Diagnose(f, telemetry.Read(), 300);
  for (const Check& c : r.checks) EXPECT_TRUE(c.ok) << c.name << ": " << c.found;
  EXPECT_TRUE(r.ok);
  for (const Part& p : r.parts) EXPECT_TRUE(p.can) << p.name << ": " << p.why;
  EXPECT_EQ(Named(r.checks, "rdma").found,
            "mlx5_0 port 1: 400 Gb/sec (4X NDR), ACTIVE, Ethernet; mlx5_1 port 1: 100 Gb/sec "
            "(4X EDR)");
  EXPECT_EQ(Named(r.checks, "ram").found, "1007.4 GiB (MemTotal 1056291488 kB)");
  EXPECT_EQ(Named(r.checks, "munge-key").found,
            "/etc/munge/munge.key: munge, 0400; /var/lib/bmas/slurm/etc/munge.key: munge, 0600");
  EXPECT_THAT(FormatText(r), HasSubstr("meets the specification"));
}

TEST_F(FakeTreeTest, AnEmptyTreeFailsWithFixes) {
  const Report r = Diagnose(Read(), Error{ErrorCode::kUnavailable, "no driver"}, 300);
  EXPECT_FALSE(r.ok);
  for (const char* name : {"rdma", "roce-v2", "ram", "cgroups", "munge-key", "lxcfs", "subids"}) {
    const Check c = Named(r.checks, name);
    EXPECT_FALSE(c.ok) << name;
    EXPECT_NE(c.fix, "") << name;
  }
  EXPECT_EQ(Named(r.checks, "rdma").found, "no RDMA device (nothing in /sys/class/infiniband)");
  EXPECT_EQ(Named(r.checks, "munge-key").found, "no munge account");
  EXPECT_EQ(Named(r.checks, "lxcfs").found, "not installed and not serving");
}

TEST_F(FakeTreeTest, AMungeKeyOthersCanReadFails) {
  WriteGoodNode();
  Write("/etc/munge/munge.key", "k", 0644);
  const Check c = MungeKeyCheck(Read().munge_keys, getuid());
  EXPECT_FALSE(c.ok);
  EXPECT_THAT(c.found, HasSubstr("/etc/munge/munge.key: munge, 0644"));
  EXPECT_EQ(c.fix, "chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key");
  // Owned by another account.
  EXPECT_FALSE(MungeKeyCheck(Read().munge_keys, getuid() + 1).ok);
  // Behind a directory only munge may enter (/etc/munge is 0700), as a user sees it.
  KeyFile hidden{"/etc/munge/munge.key", false, false, 0, 0, "Permission denied"};
  const Check as_user = MungeKeyCheck({hidden}, 110);
  EXPECT_FALSE(as_user.ok);
  EXPECT_EQ(as_user.found, "/etc/munge/munge.key: cannot be looked at (Permission denied)");
  EXPECT_EQ(as_user.fix, "run `bmas doctor` as root to check /etc/munge/munge.key");
}

TEST_F(FakeTreeTest, RdmaBelow400OrWithoutRoceV2Fails) {
  Write("/sys/class/infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)\n");
  Write("/sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  Write("/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/0", "IB/RoCE v1\n");
  Write("/sys/class/infiniband/mlx5_1/ports/1/rate", "400 Gb/sec (4X NDR)\n");
  Write("/sys/class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n");
  const NodeFacts f = Read();
  Check c = RdmaCheck(f.rdma);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.found,
            "mlx5_0 port 1: 200 Gb/sec (4X HDR), ACTIVE; mlx5_1 port 1: 400 Gb/sec (4X NDR), DOWN");
  c = RoceCheck(f.rdma);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.found, "mlx5_0 port 1: GID types IB/RoCE v1; mlx5_1 port 1: no GID");
}

TEST_F(FakeTreeTest, ReportShapes) {
  Write("/proc/meminfo", "MemTotal:       24684084 kB\n");
  NodeFacts f = Read();
  f.virt = {true, "KVMKVMKVM", false, "", "", ""};
  f.clock = {TIME_ERROR, 0, 16000000};
  FakeGpuTelemetry telemetry;
  const Report r = Diagnose(f, telemetry.Read(), 300);
  EXPECT_FALSE(r.ok);

  const std::string text = FormatText(r);
  EXPECT_THAT(text, HasSubstr("  ✗ ram: 23.5 GiB (MemTotal 24684084 kB) (required: at least 1 TB "
                              "of RAM; fix: 1 TB of RAM or more in this node)\n"));
  EXPECT_THAT(text, HasSubstr("can run here: simulated engines, gateway\n"));
  EXPECT_THAT(text, HasSubstr("  real GPU jobs: no GPU/driver: no NVIDIA driver"));
  EXPECT_THAT(text, HasSubstr("  NCCL over RDMA: no RDMA NIC\n"));
  EXPECT_THAT(text, Not(HasSubstr("✓ ram")));

  rapidjson::Document d;
  d.Parse(FormatJson(r).c_str());
  ASSERT_FALSE(d.HasParseError());
  EXPECT_FALSE(d["ok"].GetBool());
  ASSERT_TRUE(d["checks"].IsArray());
  ASSERT_EQ(d["checks"].Size(), r.checks.size());
  std::string kinds;
  for (const auto& c : d["checks"].GetArray()) {
    for (const char* key : {"name", "kind", "required", "found", "fix"}) {
      ASSERT_TRUE(c.HasMember(key) && c[key].IsString()) << key;
    }
    ASSERT_TRUE(c["ok"].IsBool());
    kinds += c["kind"].GetString()[0];
  }
  // Spec checks first, then bmas's, then the informational clock and, with no Slurm
  // reachable, the skipped clock-skew.
  EXPECT_EQ(kinds, "sssssssbbbbbbbii");
  EXPECT_EQ(d["can_run"].Size(), 2u);
  EXPECT_STREQ(d["cannot_run"][0]["part"].GetString(), "local Slurm (fake GPUs)");
  EXPECT_THAT(d["cannot_run"][0]["why"].GetString(), HasSubstr("needs root"));
}

}  // namespace
}  // namespace bmas::doctor
