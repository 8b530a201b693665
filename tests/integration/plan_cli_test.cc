// `bmas plan` as a student runs it: the real binary, as a non-root account, on the reference
// scenario (cut to one day) copied into a folder of theirs; the JSON, the HTML file, a sweep,
// and the errors for a bad sweep, a scenario without a cluster and an unwritable --html.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <rapidjson/document.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "engine_process.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class PlanCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    user_ = EnsureUnixUser("bmastest1");
    fs::permissions(dir_.path(), fs::perms::owner_all | fs::perms::group_read |
                                     fs::perms::group_exec | fs::perms::others_read |
                                     fs::perms::others_exec);
    const std::string src = std::string(BMAS_SOURCE_DIR) + "/examples/";
    // One simulated day keeps the test short; everything else is the reference scenario.
    std::string scenario = ReadAll(src + "plan-300x48.toml");
    scenario = std::regex_replace(scenario, std::regex("\ndays = 7 "), "\ndays = 1 ");
    dir_.WriteFile("plan.toml", scenario);
    dir_.WriteFile("cluster-12x4.toml", ReadAll(src + "cluster-12x4.toml"));
    out_ = dir_.path() + "/out";
    fs::create_directory(out_);
    const passwd* pw = getpwnam(user_.c_str());
    ASSERT_NE(pw, nullptr);
    ASSERT_EQ(chown(out_.c_str(), pw->pw_uid, pw->pw_gid), 0);
    state_ = dir_.path() + "/state";
  }

  CommandOutput Plan(std::vector<std::string> args) {
    args.insert(args.begin(), "plan");
    auto r = RunBmasIn(dir_.path(), state_, args, user_, std::chrono::seconds(300));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  TempDir dir_;
  std::string user_, out_, state_;
};

TEST_F(PlanCliTest, AStudentPlansTheReferenceScenarioAsJsonAndHtml) {
  const std::string html = out_ + "/plan.html";
  const CommandOutput run =
      Plan({"--scenario", dir_.path() + "/plan.toml", "--json", "--html", html});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  rapidjson::Document d;
  d.Parse(run.out.c_str());
  ASSERT_FALSE(d.HasParseError()) << run.out;
  EXPECT_THAT(d["verdict"].GetString(), HasSubstr("300 users on 48 GPUs"));
  EXPECT_EQ(d["scenario"]["users"].GetInt(), 300);
  EXPECT_DOUBLE_EQ(d["sim"]["simulated_s"].GetDouble(), 86400);
  // The model's timing, and where it came from: no flag given, so the cluster and the defaults.
  EXPECT_DOUBLE_EQ(d["sim"]["calibration"]["launch_delay_s"].GetDouble(), 0.95);
  EXPECT_THAT(d["sim"]["calibration"]["backfill_interval_source"].GetString(),
              HasSubstr("SchedulerParameters bf_interval=1"));
  EXPECT_GT(d["inference"]["requests"].GetInt64(), 0);
  EXPECT_GT(d["jobs"]["count"].GetInt64(), 0);
  EXPECT_TRUE(d["cost"]["per_user_month"].IsNumber());
  EXPECT_EQ(d["timeline"].Size(), 24u);
  // The HTML file is the same report, drawn; it is the student's.
  const std::string page = ReadAll(html);
  EXPECT_THAT(page, HasSubstr("id=\"report\""));
  EXPECT_THAT(page, HasSubstr("300 users on 48 GPUs"));
  struct stat st{};
  ASSERT_EQ(stat(html.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, getpwnam(user_.c_str())->pw_uid);
}

TEST_F(PlanCliTest, ASweepGivesTheSmallestClusterThatMeetsTheSlos) {
  const CommandOutput run =
      Plan({"--scenario", dir_.path() + "/plan.toml", "--sweep", "gpus=16,48", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  rapidjson::Document d;
  d.Parse(run.out.c_str());
  ASSERT_FALSE(d.HasParseError()) << run.out;
  const auto& sweep = d["sweep"];
  ASSERT_TRUE(sweep.IsObject());
  EXPECT_STREQ(sweep["key"].GetString(), "gpus");
  ASSERT_EQ(sweep["results"].Size(), 2u);
  EXPECT_EQ(sweep["results"][0]["value"].GetDouble(), 16);
  // 16 GPUs hold the researchers' 16-GPU jobs but not the day's queue.
  EXPECT_FALSE(sweep["results"][0]["met"].GetBool());
  EXPECT_TRUE(sweep["results"][1]["met"].GetBool());
  EXPECT_EQ(sweep["smallest_meeting"].GetDouble(), 48);
}

// The reference cluster with each node's GPU 3 following demand (whole, or seven 1g.10gb), as
// an admin would write it: the students' exercises, which fit in a 1g.10gb, wait until the policy
// splits idle GPUs, then run on slices; the report says so.
TEST_F(PlanCliTest, AStudentPlansAClusterWhoseGpusFollowDemand) {
  std::string cluster = ReadAll(dir_.path() + "/cluster-12x4.toml");
  const std::string anchor = "nvlinks_all_pairs = 6";
  const size_t at = cluster.find('\n', cluster.find(anchor));
  ASSERT_NE(at, std::string::npos);
  cluster.insert(at + 1, "[[cluster.nodes.gpus.flexible]]\ngpus = [3]\n"
                         "layouts = [\"whole\", \"7x1g.10gb\"]\n");
  dir_.WriteFile("cluster-flex.toml", cluster);
  CommandOutput run = Plan({"--scenario", dir_.path() + "/plan.toml", "--cluster",
                            dir_.path() + "/cluster-flex.toml", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  rapidjson::Document d;
  d.Parse(run.out.c_str());
  ASSERT_FALSE(d.HasParseError()) << run.out;
  EXPECT_THAT(d["verdict"].GetString(), HasSubstr("300 users on 48 GPUs"));
  EXPECT_EQ(d["gpus"]["total"].GetInt(), 48);
  const auto& mig = d["mig"];
  EXPECT_EQ(mig["flexible_gpus"].GetInt(), 12);
  EXPECT_EQ(mig["sliced_gpus"].GetInt(), 0);
  EXPECT_GT(mig["layout_changes"].GetInt64(), 0);
  EXPECT_GT(mig["slice_wait_s"]["count"].GetInt64(), 0);
  EXPECT_EQ(mig["fell_back"].GetInt64(), 0);
  EXPECT_DOUBLE_EQ(mig["users_per_gpu"].GetDouble(), 6.25);
  run = Plan({"--scenario", dir_.path() + "/plan.toml", "--cluster",
              dir_.path() + "/cluster-flex.toml"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("MIG: 0 GPUs split, 12 following demand"));
  // A sweep of GPUs cannot cut such a cluster, and says what to do instead.
  run = Plan({"--scenario", dir_.path() + "/plan.toml", "--cluster",
              dir_.path() + "/cluster-flex.toml", "--sweep", "gpus=24"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.err, HasSubstr("sweep users, or give inventories of each size"));
}

TEST_F(PlanCliTest, MistakesAreNamedWithTheirFix) {
  CommandOutput run = Plan({"--scenario", dir_.path() + "/plan.toml", "--sweep", "nodes=2"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.err, HasSubstr("use gpus or users"));
  dir_.WriteFile("nocluster.toml", "[simulation]\ndays = 1\n");
  run = Plan({"--scenario", dir_.path() + "/nocluster.toml"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("--cluster FILE"));
  // The student cannot write into the test's own folder (root's, 755).
  run = Plan({"--scenario", dir_.path() + "/plan.toml", "--html", dir_.path() + "/plan.html"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("cannot write the HTML report"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/plan.html"));
}

}  // namespace
}  // namespace bmas::testing
