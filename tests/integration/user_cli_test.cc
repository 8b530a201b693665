// `bmas user ...` and `bmas key ...` as a user runs them: the real binary on a state dir.

#include <pwd.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "common/process.h"
#include "engine_process.h"

namespace bmas::testing {
namespace {

using ::testing::HasSubstr;

class UserCliTest : public ::testing::Test {
 protected:
  CliRun Bmas(const std::vector<std::string>& args) {
    auto r = RunBmas(args, {{"BMAS_STATE_DIR", dir_.path() + "/state"}});
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CliRun{};
  }
  rapidjson::Document Json(const std::string& text) {
    rapidjson::Document doc;
    doc.Parse(text.c_str());
    EXPECT_FALSE(doc.HasParseError()) << text;
    return doc;
  }

  TempDir dir_;
};

TEST_F(UserCliTest, AddListSetRemove) {
  ASSERT_TRUE(Bmas({"user", "add", "alice", "--weight", "2", "--rpm", "60"}).status.Success());
  ASSERT_TRUE(Bmas({"user", "add", "bob"}).status.Success());
  CliRun list = Bmas({"user", "list", "--json"});
  ASSERT_TRUE(list.status.Success()) << list.err;
  rapidjson::Document users = Json(list.out);
  ASSERT_TRUE(users.IsArray());
  ASSERT_EQ(users.Size(), 2u);
  EXPECT_STREQ(users[0]["name"].GetString(), "alice");
  EXPECT_EQ(users[0]["weight"].GetDouble(), 2.0);
  EXPECT_EQ(users[0]["rpm"].GetInt64(), 60);
  EXPECT_TRUE(users[1]["rpm"].IsNull());  // unset = unlimited
  EXPECT_TRUE(users[1]["max_concurrent"].IsNull());

  ASSERT_TRUE(Bmas({"user", "set", "alice", "--unset", "rpm", "--tpm", "5000"}).status.Success());
  users = Json(Bmas({"user", "list", "--json"}).out);
  EXPECT_TRUE(users[0]["rpm"].IsNull());
  EXPECT_EQ(users[0]["tpm"].GetInt64(), 5000);

  ASSERT_TRUE(Bmas({"user", "remove", "bob"}).status.Success());
  EXPECT_EQ(Json(Bmas({"user", "list", "--json"}).out).Size(), 1u);
  EXPECT_THAT(Bmas({"user", "list"}).out, HasSubstr("alice"));
}

TEST_F(UserCliTest, KeyCreatePrintsTheKeyAloneOnceAndListShowsOnlyIds) {
  ASSERT_TRUE(Bmas({"user", "add", "alice"}).status.Success());
  CliRun created = Bmas({"key", "create", "alice"});
  ASSERT_TRUE(created.status.Success()) << created.err;
  ASSERT_TRUE(std::regex_match(created.out, std::regex("sk-bmas-[0-9a-f]{12}-[0-9a-f]{48}\n")))
      << created.out;
  const std::string key = created.out.substr(0, created.out.size() - 1);

  CliRun listed = Bmas({"key", "list", "alice", "--json"});
  ASSERT_TRUE(listed.status.Success()) << listed.err;
  EXPECT_EQ(listed.out.find(key.substr(21)), std::string::npos) << "the secret was printed";
  rapidjson::Document keys = Json(listed.out);
  ASSERT_EQ(keys.Size(), 1u);
  const std::string id = keys[0]["id"].GetString();
  EXPECT_EQ(key.substr(8, 12), id);
  EXPECT_TRUE(keys[0]["revoked_at"].IsNull());

  ASSERT_TRUE(Bmas({"key", "revoke", id}).status.Success());
  keys = Json(Bmas({"key", "list", "alice", "--json"}).out);
  EXPECT_TRUE(keys[0]["revoked_at"].IsString());
}

TEST_F(UserCliTest, BadInputIsAClearErrorAndChangesNothing) {
  ASSERT_TRUE(Bmas({"user", "add", "alice", "--rpm", "10"}).status.Success());
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"user", "add", "alice"}, "user 'alice' already exists"},
      {{"user", "add", "Not-A-Unix-Name"}, "not a valid user name"},
      {{"user", "set", "nobody", "--rpm", "1"}, "no user 'nobody'"},
      {{"user", "remove", "nobody"}, "no user 'nobody'"},
      {{"key", "create", "nobody"}, "no user 'nobody'"},
      {{"key", "revoke", "000000000000"}, "no active key"},
      {{"user", "add", "carol", "--rpm", "-5"}, "--rpm"},
      {{"user", "set", "alice", "--unset", "weight"}, "--unset"},
  };
  for (const Case& c : cases) {
    CliRun r = Bmas(c.args);
    EXPECT_FALSE(r.status.Success()) << c.args[0] << " " << c.args[1];
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args[0] << " " << c.args[1];
  }
  rapidjson::Document users = Json(Bmas({"user", "list", "--json"}).out);
  ASSERT_EQ(users.Size(), 1u);
  EXPECT_EQ(users[0]["rpm"].GetInt64(), 10);
}

// The CLI's habits (issue 15): --version, a short message for a number out of range, and exit
// code 2 for every usage error, 0 for --help.
TEST_F(UserCliTest, UsageErrorsAreShortAndExitTwo) {
  CliRun version = Bmas({"--version"});
  EXPECT_TRUE(version.status.Success());
  EXPECT_THAT(version.out, ::testing::StartsWith("bmas "));
  CliRun gpus = Bmas({"run", "--gpus", "-1", "--", "true"});
  EXPECT_EQ(gpus.status.code, 2);
  EXPECT_THAT(gpus.err, HasSubstr("--gpus: must be at least 0 (got -1)"));
  EXPECT_LT(gpus.err.size(), 200u) << gpus.err;
  CliRun word = Bmas({"user", "add", "carol", "--rpm", "ten"});
  EXPECT_EQ(word.status.code, 2);
  EXPECT_THAT(word.err, HasSubstr("--rpm: is not a number: ten"));
  EXPECT_EQ(Bmas({"no-such-command"}).status.code, 2);
  CliRun help = Bmas({"--help"});
  EXPECT_TRUE(help.status.Success());
  EXPECT_THAT(help.out, HasSubstr("Exit codes: 0"));
  // `bmas up --help` names what it starts today, not only the engines.
  CliRun up = Bmas({"up", "--help"});
  for (const char* part : {"slurmctld", "LXD", "agent", "gateway", "service account"}) {
    EXPECT_THAT(up.out, HasSubstr(part));
  }
}

// `bmas run python train.py --epochs 3`: CLI11 would say only that --epochs was not expected;
// bmas says to put `--` before the command, and shows the command line that would work. An
// option unknown before the command is another mistake, and gets CLI11's message.
TEST_F(UserCliTest, RunWithTheCommandsOptionsButNoDashDashSaysWhereToPutIt) {
  CliRun r = Bmas({"run", "--gpus", "2", "--name", "my job", "python", "train.py", "--epochs",
                   "3"});
  EXPECT_EQ(r.status.code, 2);
  EXPECT_EQ(r.err,
            "bmas run: put `--` before the command (its options are not bmas run's): bmas run "
            "--gpus 2 --name 'my job' -- python train.py --epochs 3\n");
  CliRun short_option = Bmas({"run", "--wait", "python", "-c", "print(1)"});
  EXPECT_EQ(short_option.status.code, 2);
  EXPECT_THAT(short_option.err, HasSubstr("bmas run --wait -- python -c 'print(1)'"));
  CliRun before = Bmas({"run", "--epochs", "3", "python"});
  EXPECT_EQ(before.status.code, 2);
  EXPECT_THAT(before.err, HasSubstr("not expected: --epochs"));
  EXPECT_THAT(before.err, ::testing::Not(HasSubstr("put `--`")));
}

// Two commands that open a fresh state dir at once (`bmas up` starting a gateway while the user
// runs `bmas user add`) must both succeed: creating and migrating the store is safe against a
// concurrent first open.
TEST(UserCliConcurrencyTest, CommandsOnAFreshStateDirAtOnceAllSucceed) {
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    TempDir dir;
    const EnvList env = {{"BMAS_STATE_DIR", dir.path() + "/state"}};
    std::vector<std::unique_ptr<Process>> running;
    for (const char* name : {"ann", "ben", "cat"}) {
      auto p = Process::Start({"user", "add", name}, env);
      ASSERT_TRUE(p) << p.error().message;
      running.push_back(std::move(*p));
    }
    for (auto& p : running) {
      std::optional<ExitStatus> status = p->Wait(10s);
      ASSERT_TRUE(status.has_value());
      EXPECT_TRUE(status->Success()) << status->ToString() << ": " << p->StderrText();
    }
    auto list = RunBmas({"user", "list", "--json"}, env);
    ASSERT_TRUE(list) << list.error().message;
    rapidjson::Document users;
    users.Parse(list->out.c_str());
    ASSERT_TRUE(users.IsArray()) << list->out << list->err;
    EXPECT_EQ(users.Size(), 3u) << list->out;
  }
}

// A student (a non-root account made here) finds the cluster's state dir through the system
// config with nothing set, is told plainly that managing users and keys needs root (not
// SQLite's "readonly database"), and never gets a private store by accident (issue 15).
TEST(UserCliAsAStudentTest, TheClustersStoreIsRootsAndSaysSo) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a user";
  const std::string student = "bmastest1";
  if (getpwnam(student.c_str()) == nullptr) {
    auto r = RunCommand({"useradd", "--create-home", student});
    ASSERT_TRUE(r && r->exit_code == 0);
  }
  TempDir dir;
  namespace fs = std::filesystem;
  const auto shared = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec;
  fs::permissions(dir.path(), shared);
  const std::string state = dir.path() + "/state";
  auto added = RunBmas({"user", "add", "alice"}, {{"BMAS_STATE_DIR", state}});
  ASSERT_TRUE(added && added->status.Success());
  const std::string bin = dir.path() + "/bmas";
  fs::copy_file(std::getenv("BMAS_BINARY"), bin);
  fs::permissions(bin, shared);
  const std::string config = dir.WriteFile("bmas.toml", "state_dir = \"" + state + "\"\n");
  fs::permissions(config, fs::perms::owner_read | fs::perms::owner_write |
                              fs::perms::group_read | fs::perms::others_read);
  auto as_student = [&](std::vector<std::string> env, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"setpriv", "--reuid=" + student, "--regid=" + student,
                                     "--init-groups", "env", "-u", "BMAS_STATE_DIR"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.push_back(bin);
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  };
  // The state dir comes from the config (BMAS_CONFIG stands in for /etc/bmas/bmas.toml).
  // Another user's key: only root (a student's own keys go through the agent).
  CommandOutput others_key = as_student({"BMAS_CONFIG=" + config}, {"key", "create", "alice"});
  EXPECT_EQ(others_key.exit_code, 2);
  EXPECT_THAT(others_key.err, HasSubstr("only root manages other users' keys (the store is root's)"));
  for (const auto& args : std::vector<std::vector<std::string>>{{"user", "list"},
                                                                {"user", "add", "mallory"}}) {
    CommandOutput r = as_student({"BMAS_CONFIG=" + config}, args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << args[1];
    EXPECT_THAT(r.err, HasSubstr("needs root: the cluster's store in " + state + " is root's"));
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("readonly")));
  }
  const std::string home = getpwnam(student.c_str())->pw_dir;
  EXPECT_FALSE(fs::exists(home + "/.local/state/bmas"));
  auto users = RunBmas({"user", "list", "--json"}, {{"BMAS_STATE_DIR", state}});
  ASSERT_TRUE(users);
  EXPECT_THAT(users->out, ::testing::Not(HasSubstr("mallory")));
  // A state dir of the student's own, given on purpose, gets its own store.
  const std::string own = dir.path() + "/own";
  fs::create_directory(own);
  chown(own.c_str(), getpwnam(student.c_str())->pw_uid, getpwnam(student.c_str())->pw_gid);
  CommandOutput mine = as_student({"BMAS_CONFIG=", "BMAS_STATE_DIR=" + own}, {"user", "add", "bob"});
  EXPECT_EQ(mine.exit_code, 0) << mine.err;
}

}  // namespace
}  // namespace bmas::testing
