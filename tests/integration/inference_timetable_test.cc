// `bmas inference deploy --timetable` and `--timetable-file` as an admin runs them, and as a
// student (a non-root account made here): the real binary on a state dir of its own. The
// controller's use of the timetable is in src/autoscale/controller_test.cc.

#include <pwd.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/process.h"
#include "engine_process.h"
#include "test_helpers.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class InferenceTimetableTest : public ::testing::Test {
 protected:
  CliRun Bmas(const std::vector<std::string>& args) {
    auto r = RunBmas(args, {{"BMAS_STATE_DIR", state_}});
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CliRun{};
  }

  TempDir dir_;
  std::string state_ = dir_.path() + "/state";
};

TEST_F(InferenceTimetableTest, AnAdminSetsFloorsAndTheListingShowsThem) {
  CliRun deployed = Bmas({"inference", "deploy", "acme/lab", "--min", "1", "--max", "4",
                          "--timetable", "Mon-Fri 09:00-12:00 min=3", "--timetable",
                          "sat 10:00-11:30 min=2"});
  ASSERT_TRUE(deployed.status.Success()) << deployed.err;
  EXPECT_THAT(deployed.out,
              HasSubstr("timetable Mon-Fri 09:00-12:00 min=3, Sat 10:00-11:30 min=2"));
  CliRun list = Bmas({"inference", "list"});
  ASSERT_TRUE(list.status.Success()) << list.err;
  EXPECT_THAT(list.out, HasSubstr("acme/lab: min 1 max 4, 1 GPU per replica, profile "
                                  "llama-3.1-8b-h100; timetable Mon-Fri 09:00-12:00 min=3, Sat "
                                  "10:00-11:30 min=2\n"));
  CliRun json = Bmas({"inference", "list", "--json"});
  ASSERT_TRUE(json.status.Success()) << json.err;
  rapidjson::Document doc = ParseJson(json.out);
  const rapidjson::Value& t = At(At(doc, 0), "timetable");
  ASSERT_TRUE(t.IsArray());
  ASSERT_EQ(t.Size(), 2u);
  EXPECT_EQ(Str(At(t[0], "days")), "Mon-Fri");
  EXPECT_EQ(Str(At(t[0], "from")), "09:00");
  EXPECT_EQ(Str(At(t[0], "to")), "12:00");
  EXPECT_EQ(Int(At(t[0], "min")), 3);
  EXPECT_EQ(Str(At(t[1], "days")), "Sat");

  // The TOML form; deploy replaces the whole deployment, timetable included.
  const std::string file = dir_.WriteFile("lab.toml",
                                          "[[deployment.timetable]]\n"
                                          "days = \"Tue,Thu\"\nfrom = \"14:00\"\nto = \"24:00\"\n"
                                          "min = 2\n");
  ASSERT_TRUE(Bmas({"inference", "deploy", "acme/lab", "--max", "2", "--timetable-file", file})
                  .status.Success());
  list = Bmas({"inference", "list"});
  EXPECT_THAT(list.out, HasSubstr("; timetable Tue,Thu 14:00-24:00 min=2\n"));
  EXPECT_THAT(list.out, Not(HasSubstr("Mon-Fri")));
}

TEST_F(InferenceTimetableTest, ABadFloorIsAClearErrorAndChangesNothing) {
  ASSERT_TRUE(Bmas({"inference", "deploy", "m", "--max", "2", "--timetable",
                    "Mon 09:00-10:00 min=1"})
                  .status.Success());
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::string bad_file =
      dir_.WriteFile("bad.toml", "[[deployment.timetable]]\ndays = \"Mon\"\nfrom = \"09:00\"\n"
                                 "to = \"10:00\"\nmin = 1\nmax = 3\n");
  const std::vector<Case> cases = {
      {{"--timetable", "Mnday 09:00-12:00 min=1"}, "'Mnday' in days \"Mnday\" is not a day"},
      {{"--timetable", "Mon 12:00-09:00 min=1"}, "ends before it starts"},
      {{"--timetable", "Mon 09:00-12:00 min=3"}, "is above --max 2: raise --max"},
      {{"--timetable", "Mon 09:00-12:00"}, "write DAYS HH:MM-HH:MM min=N"},
      {{"--timetable-file", bad_file}, "deployment.timetable[0]"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"inference", "deploy", "m", "--max", "2"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    CliRun r = Bmas(args);
    EXPECT_FALSE(r.status.Success()) << c.expected;
    EXPECT_THAT(r.err, HasSubstr(c.expected));
  }
  EXPECT_THAT(Bmas({"inference", "list"}).out, HasSubstr("; timetable Mon 09:00-10:00 min=1\n"));
}

// A student can neither set nor read the deployments: the store is root's, and the error says
// so.
TEST_F(InferenceTimetableTest, AStudentCannotSetATimetable) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a user";
  const std::string student = EnsureUnixUser("bmastest1");
  ASSERT_TRUE(Bmas({"inference", "deploy", "m", "--max", "3"}).status.Success());
  namespace fs = std::filesystem;
  const auto shared = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec;
  fs::permissions(dir_.path(), shared);
  const std::string bin = SharedBinaryIn(dir_.path());
  const std::string config = dir_.WriteFile("bmas.toml", "state_dir = \"" + state_ + "\"\n");
  fs::permissions(config, fs::perms::owner_read | fs::perms::owner_write |
                              fs::perms::group_read | fs::perms::others_read);
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"inference", "deploy", "m", "--max", "3", "--timetable", "Mon-Fri 08:00-18:00 min=3"},
           {"inference", "list"}}) {
    std::vector<std::string> argv = {"setpriv",  "--reuid=" + student, "--regid=" + student,
                                     "--init-groups", "env", "-u", "BMAS_STATE_DIR",
                                     "BMAS_CONFIG=" + config, bin};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_NE(r->exit_code, 0) << args[1];
    EXPECT_THAT(r->err, HasSubstr("needs root")) << args[1];
  }
  EXPECT_THAT(Bmas({"inference", "list"}).out, Not(HasSubstr("timetable")));
}

}  // namespace
}  // namespace bmas::testing
