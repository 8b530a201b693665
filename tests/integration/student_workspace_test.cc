// The default workspace image as a student meets it: `bmas image build` with no base (Debian 12
// with python3, venv, pip, git and build-essential), imported from /var/cache/bmas/images when
// it is there; a workspace for a user the fixture creates, in which, as that user, a venv is
// made in the home, a local wheel installed with pip (--no-index: there is no package index
// here) and imported, and git and a C compiler found; then the same through the agent and a
// Python script run as a Slurm job with `bmas run`. Needs root and LXD (and Slurm for the job),
// and the image in the cache, or BMAS_BUILD_IMAGE=1 to let the test build it (debootstrap from
// apt's mirror, minutes; then cached for every later run).

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "default_image.h"
#include "lxd_workspace_fixture.h"

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Writes a wheel by hand (a zip with its dist-info and a RECORD of hashes), so that pip installs
// it with nothing to fetch and nothing to build.
constexpr const char* kMakeWheel = R"(import base64, hashlib, zipfile
files = {
    "bmas_hello/__init__.py": "def greet():\n    return 'hello from a local wheel'\n",
    "bmas_hello-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: bmas-hello\nVersion: 1.0\n",
    "bmas_hello-1.0.dist-info/WHEEL":
        "Wheel-Version: 1.0\nGenerator: bmas-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
with zipfile.ZipFile("bmas_hello-1.0-py3-none-any.whl", "w") as z:
    for name, text in files.items():
        data = text.encode()
        z.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("bmas_hello-1.0.dist-info/RECORD,,")
    z.writestr("bmas_hello-1.0.dist-info/RECORD", "\n".join(record) + "\n")
)";

constexpr const char* kTrain = R"(import sys
import bmas_hello
print(bmas_hello.greet(), "in a job, python", sys.version.split()[0])
)";

// Base's fixture (LXD; with WorkspaceJobsTest also Slurm and the agent) with the default image.
template <class Base>
class WithDefaultImage : public Base {
 protected:
  WithDefaultImage() {
    this->image_args_ = {};  // the default image
    this->image_timeout_ = std::chrono::seconds(1500);
  }

  void SetUp() override {
    cached_ = CachedDefaultImage();
    cached_before_ = fs::exists(cached_);
    if (const std::string why = WhyNoDefaultImage(); !why.empty()) GTEST_SKIP() << why;
    Base::SetUp();
  }

  // `text` as `name` in the user's home, theirs.
  void WriteInHome(const std::string& user, const std::string& name, const std::string& text) {
    const std::string path = this->Home(user) + "/" + name;
    std::ofstream(path) << text;
    const passwd* pw = getpwnam(user.c_str());
    ASSERT_EQ(chown(path.c_str(), pw->pw_uid, pw->pw_gid), 0);
  }

  // Makes a venv in the user's home and installs the local wheel into it.
  static constexpr const char* kVenvScript =
      "set -e; rm -rf ~/venv; python3 make_wheel.py; python3 -m venv ~/venv; "
      "~/venv/bin/pip --version; "
      "~/venv/bin/pip install --no-index --disable-pip-version-check "
      "./bmas_hello-1.0-py3-none-any.whl; "
      "~/venv/bin/python3 -c 'import bmas_hello; print(bmas_hello.greet())'; ";

  std::string cached_;
  bool cached_before_ = false;
};

using StudentWorkspaceTest = WithDefaultImage<LxdWorkspaceTest>;
using StudentJobTest = WithDefaultImage<WorkspaceJobsTest>;

TEST_F(StudentWorkspaceTest, AStudentMakesAVenvInstallsALocalPackageAndFindsGitAndCc) {
  // From the cache when it held the image; kept there when it did not.
  if (cached_before_) {
    EXPECT_THAT(image_out_, HasSubstr("imported from " + cached_));
  }
  EXPECT_TRUE(fs::exists(cached_)) << image_out_;
  const std::string user = "bmastest1";
  Create(user);
  // The workspace got the default image without being told (the newest built).
  EXPECT_THAT(Bmas({"workspace", "list"}).out, HasSubstr("bmas Debian 12 (python3"));
  WriteInHome(user, "make_wheel.py", kMakeWheel);
  // Root's exec runs as the user (their uid and gid, HOME, the home as working directory).
  CommandOutput r = Bmas({"workspace", "exec", user, "--", "sh", "-c",
                          std::string(kVenvScript) + "git --version; cc --version | head -n 1; "
                                                     "id -un"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // pip --version: the venv's, in the home (the README's walk-through).
  EXPECT_THAT(r.out, HasSubstr(fmt::format("from {}/venv/lib/python3.11", Home(user))));
  EXPECT_THAT(r.out, HasSubstr("Successfully installed bmas-hello-1.0"));
  EXPECT_THAT(r.out, HasSubstr("hello from a local wheel\n"));
  EXPECT_THAT(r.out, HasSubstr("git version 2."));
  EXPECT_THAT(r.out, HasSubstr("cc (Debian 12"));
  EXPECT_THAT(r.out, HasSubstr("\n" + user + "\n"));
}

// The same as the student does it, through the agent, and then in a Slurm job: it runs in the
// workspace, in the home it was submitted from.
TEST_F(StudentJobTest, AStudentsVenvRunsAPythonScriptInAJob) {
  const std::string user = "bmastest1";
  WriteInHome(user, "make_wheel.py", kMakeWheel);
  WriteInHome(user, "train.py", kTrain);
  CommandOutput r = InHome(user, {"workspace", "exec", user, "--", "sh", "-c", kVenvScript});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("hello from a local wheel\n"));
  CommandOutput job =
      InHome(user, {"run", "--wait", "--", Home(user) + "/venv/bin/python3", "train.py"});
  EXPECT_EQ(job.exit_code, 0) << job.out << job.err;
  EXPECT_THAT(job.out, HasSubstr("hello from a local wheel in a job, python 3.11"));
}

}  // namespace
}  // namespace bmas::testing
