#include "slurm/slurm_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace bmas::slurm {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kSource = BMAS_SOURCE_DIR;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Where two texts first differ, as a short diff-like note.
std::string FirstDifference(const std::string& want, const std::string& got) {
  std::vector<std::string> a = Lines(want), b = Lines(got);
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    std::string x = i < a.size() ? a[i] : "<end of file>";
    std::string y = i < b.size() ? b[i] : "<end of file>";
    if (x != y) {
      return "first difference at line " + std::to_string(i + 1) + ":\n- " + x + "\n+ " + y +
             "\n(- golden, + rendered)";
    }
  }
  return "the texts differ only in their final newline";
}

// Renders an example inventory and compares every file with tests/golden/slurm/<name>/.
// BMAS_UPDATE_GOLDEN=1 rewrites the golden files instead (review the diff before committing).
void CheckGolden(const std::string& example, const std::string& name) {
  ConfigFiles files = RenderSlurmConfig(LoadCluster(kSource + "/examples/" + example));
  fs::path dir = fs::path(kSource) / "tests/golden/slurm" / name;
  const char* update = std::getenv("BMAS_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const auto& [file, text] : files) std::ofstream(dir / file, std::ios::binary) << text;
    GTEST_SKIP() << "rewrote " << dir;
  }
  ASSERT_TRUE(fs::is_directory(dir))
      << "no golden files in " << dir << "; run with BMAS_UPDATE_GOLDEN=1 to write them";
  std::vector<std::string> golden_files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    golden_files.push_back(entry.path().filename().string());
  }
  std::sort(golden_files.begin(), golden_files.end());
  std::vector<std::string> rendered_files;
  for (const auto& [file, text] : files) rendered_files.push_back(file);
  EXPECT_EQ(rendered_files, golden_files) << "the files rendered differ from those in " << dir;
  for (const auto& [file, text] : files) {
    std::string want = ReadFile(dir / file);
    EXPECT_TRUE(want == text) << (dir / file).string() << " differs from the rendering of "
                              << example << "; " << FirstDifference(want, text)
                              << "\nRun with BMAS_UPDATE_GOLDEN=1 to accept the new output.";
  }
}

TEST(SlurmGoldenTest, ReferenceCluster) { CheckGolden("cluster-12x4.toml", "12x4"); }

TEST(SlurmGoldenTest, LocalCluster) { CheckGolden("cluster-local.toml", "local"); }

TEST(SlurmGoldenTest, LocalMigCluster) { CheckGolden("cluster-local-mig.toml", "local-mig"); }

TEST(SlurmGoldenTest, LocalSharedCluster) {
  CheckGolden("cluster-local-shared.toml", "local-shared");
}

// A shared GPU is a gpu of its own type and a shard line on the same file; the node's Gres=
// lists its gpu types in the order gres.conf first names them, so that Slurm's numbering
// (type by type) is the one the hooks read back.
TEST(SlurmSharedConfigTest, SharedGpusAreGpusOfTheirOwnTypeAndShards) {
  Cluster c = LoadCluster(kSource + "/examples/cluster-local-shared.toml");
  c.nodes[2].gpus.shared[0].gpus = {0, 2};  // interleaved with the whole GPUs 1 and 3
  ConfigFiles files = RenderSlurmConfig(c);
  EXPECT_THAT(files["slurm.conf"], HasSubstr("GresTypes=gpu,shard\n"));
  EXPECT_THAT(files["slurm.conf"], HasSubstr(" Gres=gpu:l40s-shared:2,gpu:l40s:2,shard:8 "));
  EXPECT_THAT(files["gres.conf"], HasSubstr("NodeName=oss03 Name=gpu Type=l40s-shared "
                                            "File=/dev/bmas-local/oss03/nvidia0\n"
                                            "NodeName=oss03 Name=shard Count=4 "
                                            "File=/dev/bmas-local/oss03/nvidia0\n"
                                            "NodeName=oss03 Name=gpu Type=l40s "
                                            "File=/dev/bmas-local/oss03/nvidia1\n"));
  EXPECT_THAT(RenderSlurmConfig(LoadCluster(kSource + "/examples/cluster-local.toml"))["slurm.conf"],
              HasSubstr("GresTypes=gpu\n"));
}

// Each MIG slice is a GPU of its profile's type, opened through its GPU's device file and its two
// access capabilities; the node counts its whole GPUs and its slices per profile.
TEST(SlurmMigConfigTest, SlicesAreGresOfTheirProfilesType) {
  Cluster c = LoadCluster(kSource + "/examples/cluster-local-mig.toml");
  ConfigFiles files = RenderSlurmConfig(c);
  EXPECT_THAT(files["slurm.conf"],
              HasSubstr(" Gres=gpu:h100:2,gpu:3g.40gb:1,gpu:2g.20gb:1,gpu:1g.10gb:9 "));
  EXPECT_THAT(files["slurm.conf"], HasSubstr("NodeName=oss01 NodeAddr=127.0.0.1 Port=17818 CPUs=8 "
                                             "RealMemory=16384 Gres=gpu:h100:4 "));
  // GPU 2's first slice is GPU instance 1: caps gpu2/gi1/access and gpu2/gi1/ci0/access.
  EXPECT_THAT(files["gres.conf"],
              HasSubstr("NodeName=oss02 Name=gpu Type=3g.40gb MultipleFiles=/dev/bmas-local/oss02/"
                        "nvidia2,/dev/bmas-local/oss02/nvidia-caps/nvidia-cap282,"
                        "/dev/bmas-local/oss02/nvidia-caps/nvidia-cap283\n"));
  EXPECT_THAT(files["gres.conf"], HasSubstr("NodeName=oss02 Name=gpu Type=h100 "
                                            "File=/dev/bmas-local/oss02/nvidia1\n"));
  EXPECT_THAT(files["gres.conf"], HasSubstr("NodeName=oss01 Name=gpu Type=h100 "
                                            "File=/dev/bmas-local/oss01/nvidia1 Links=6,-1,6,6\n"));
}

class SlurmConfigTest : public ::testing::Test {
 protected:
  Cluster reference_ = LoadCluster(kSource + "/examples/cluster-12x4.toml");
  Cluster local_ = LoadCluster(kSource + "/examples/cluster-local.toml");
};

TEST_F(SlurmConfigTest, EveryFileSaysItIsGenerated) {
  for (const Cluster* c : {&reference_, &local_}) {
    for (const auto& [file, text] : RenderSlurmConfig(*c)) {
      EXPECT_EQ(text.rfind("# generated by bmas", 0), 0u) << file;
      EXPECT_EQ(text.back(), '\n') << file;
    }
  }
}

// Same bytes whatever directory the inventory was read from: only its file name shows.
TEST_F(SlurmConfigTest, OutputDependsOnlyOnTheInventory) {
  Cluster moved = reference_;
  moved.source = "/elsewhere/entirely/cluster-12x4.toml";
  EXPECT_EQ(RenderSlurmConfig(moved), RenderSlurmConfig(reference_));
  EXPECT_THAT(RenderSlurmConfig(reference_)["slurm.conf"], Not(HasSubstr(kSource)));
}

TEST_F(SlurmConfigTest, GresLinesCarryTheNvlinkMatrix) {
  std::string gres = RenderSlurmConfig(reference_)["gres.conf"];
  EXPECT_THAT(gres, HasSubstr("AutoDetect=off\n"));
  EXPECT_THAT(gres,
              HasSubstr("NodeName=oss07 Name=gpu Type=h100 File=/dev/nvidia2 Links=6,6,-1,6\n"));
  Cluster partial = reference_;
  partial.nodes[0].gpus.nvlinks = {{0, 1, 12, 0}, {2, 3, 4, 0}};
  gres = RenderSlurmConfig(partial)["gres.conf"];
  EXPECT_THAT(gres,
              HasSubstr("NodeName=oss01 Name=gpu Type=h100 File=/dev/nvidia1 Links=12,-1,0,0\n"));
  EXPECT_THAT(gres,
              HasSubstr("NodeName=oss01 Name=gpu Type=h100 File=/dev/nvidia3 Links=0,0,4,-1\n"));
}

TEST_F(SlurmConfigTest, LocalNodesGetTheirOwnPortsFilesAndDevices) {
  ConfigFiles files = RenderSlurmConfig(local_);
  EXPECT_THAT(files["slurm.conf"], HasSubstr("NodeName=oss02 NodeAddr=127.0.0.1 Port=17819 "));
  EXPECT_THAT(files["slurm.conf"], HasSubstr("SlurmdSpoolDir=/var/lib/bmas/slurm/spool/%n\n"));
  EXPECT_THAT(files["slurm.conf"], HasSubstr("SlurmdParameters=config_overrides\n"));
  EXPECT_THAT(files["slurm.conf"],
              HasSubstr("AuthInfo=socket=/var/lib/bmas/slurm/run/munge.sock,cred_expire=10\n"));
  EXPECT_THAT(files["gres.conf"], HasSubstr("File=/dev/bmas-local/oss03/nvidia3 "));
  EXPECT_THAT(RenderSlurmConfig(reference_)["slurm.conf"], Not(HasSubstr("config_overrides")));
}

TEST_F(SlurmConfigTest, PartitionsAndPreemption) {
  std::string conf = RenderSlurmConfig(reference_)["slurm.conf"];
  EXPECT_THAT(conf, HasSubstr("PartitionName=lab Nodes=oss[01-12] Default=YES DefaultTime=01:00:00 "
                              "MaxTime=1-00:00:00 PriorityTier=10 PreemptMode=OFF State=UP\n"));
  EXPECT_THAT(conf, HasSubstr("PartitionName=inference Nodes=oss[01-12] Default=NO "
                              "DefaultTime=UNLIMITED MaxTime=UNLIMITED GraceTime=0 PriorityTier=1 "
                              "PreemptMode=REQUEUE State=UP\n"));
  EXPECT_THAT(conf, HasSubstr("PartitionName=inference_floor Nodes=oss[01-12] Default=NO "
                              "DefaultTime=UNLIMITED MaxTime=UNLIMITED PriorityTier=1 "
                              "PreemptMode=OFF State=UP\n"));
  EXPECT_THAT(conf, HasSubstr("PreemptType=preempt/partition_prio\n"));
  EXPECT_THAT(conf, HasSubstr("Prolog=/usr/local/sbin/bmas-slurm-prolog\nPrologFlags=Alloc\n"));
}

TEST_F(SlurmConfigTest, OptionalPartsFollowTheInventory) {
  Cluster c = reference_;
  c.switches.clear();
  c.slurm.prolog.clear();
  c.slurm.epilog.clear();
  c.slurm.jwt_key.clear();
  c.slurm.accounting = true;
  c.slurm.munge_socket = "/run/m.sock";
  ConfigFiles files = RenderSlurmConfig(c);
  EXPECT_EQ(files.count("topology.conf"), 0u);
  std::string conf = files["slurm.conf"];
  EXPECT_THAT(conf, Not(HasSubstr("TopologyPlugin")));
  EXPECT_THAT(conf, Not(HasSubstr("Prolog")));
  EXPECT_THAT(conf, Not(HasSubstr("AuthAltTypes")));
  EXPECT_THAT(conf, HasSubstr("AccountingStorageType=accounting_storage/slurmdbd\n"
                              "AccountingStorageHost=mgs1\nAccountingStoragePort=6819\n"
                              "AccountingStoragePass=/run/m.sock\n"));
  EXPECT_THAT(conf, Not(HasSubstr("jobcomp")));
  EXPECT_THAT(conf, HasSubstr("AccountingStorageEnforce=associations,limits,qos\n"));
}

TEST_F(SlurmConfigTest, AGpuCapGivesThePartitionAQos) {
  Cluster c = reference_;
  c.slurm.accounting = true;
  c.partitions[0].max_gpus_per_user = 4;  // lab
  EXPECT_EQ(c.partitions[0].EffectiveQos(), "bmas_lab");
  std::string conf = RenderSlurmConfig(c)["slurm.conf"];
  EXPECT_THAT(conf, HasSubstr("PartitionName=lab Nodes=oss[01-12] Default=YES DefaultTime=01:00:00 "
                              "MaxTime=1-00:00:00 QOS=bmas_lab PriorityTier=10"));
  // Without slurmdbd a cap cannot be enforced: the inventory is refused, naming the entry.
  c.slurm.accounting = false;
  auto valid = ValidateCluster(c);
  ASSERT_FALSE(valid);
  EXPECT_THAT(valid.error().message, HasSubstr("partition lab"));
  EXPECT_THAT(valid.error().message, HasSubstr("accounting = true"));
}

TEST_F(SlurmConfigTest, DefMemPerCpuComesFromTheSmallestNode) {
  Cluster c = local_;
  c.nodes[1].memory_mib = 4096;  // 8 CPUs
  EXPECT_THAT(RenderSlurmConfig(c)["slurm.conf"], HasSubstr("DefMemPerCPU=512\n"));
  c.slurm.def_mem_per_cpu_mib = 300;
  EXPECT_THAT(RenderSlurmConfig(c)["slurm.conf"], HasSubstr("DefMemPerCPU=300\n"));
}

}  // namespace
}  // namespace bmas::slurm
