// `bmas node join` across the test bed (docs/cluster-join.md): `bmas cluster init` and the join
// service in mgs1; a node that runs the printed line ends up in Slurm with its files in place,
// and a second run changes nothing. A wrong secret, an expired token and an impostor on the
// join port are each refused with a clear error and leave nothing on the node. `bmas node
// leave` refuses while jobs run there, then takes the node out (a dynamic one out of Slurm too),
// and the node joins again.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "cluster/join_token.h"
#include "common/process.h"
#include "net_bed.h"
#include "net_bed_join.h"

namespace bmas::testbed {
namespace {

namespace fs = std::filesystem;

class NodeJoinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the test bed needs root";
    const char* bmas = std::getenv("BMAS_BINARY");
    if (bmas == nullptr) GTEST_SKIP() << "BMAS_BINARY is not set";
    bmas_ = bmas;
    BedOptions options;
    options.name = "node-join";
    options.nodes = 3;
    auto started = bed_.Start(options);
    ASSERT_TRUE(started) << started.error().message;
    node_ = bed_.dir() + "/node";
  }

  void TearDown() override {
    bed_.Stop();
    EXPECT_TRUE(bed_.Leftovers().empty()) << ::testing::PrintToString(bed_.Leftovers());
  }

  // The bed's hosts without GPUs, in an inventory; with `dynamic`, dynamic nodes.
  BedJoin& MakeCluster(bool dynamic = false) {
    join_.emplace(bed_, JoinOptions{bmas_, 0, dynamic});
    auto written = join_->WriteInventory();
    EXPECT_TRUE(written) << written.error().message;
    return *join_;
  }

  CommandOutput Bmas(const std::string& host, std::vector<std::string> args) {
    auto r = join_->Bmas(host, std::move(args));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  // `bmas cluster init` in mgs1, then munged and slurmctld there; returns the join token.
  std::string InitController(bool dynamic = false) {
    auto init = MakeCluster(dynamic).InitController();
    EXPECT_TRUE(init) << init.error().message;
    if (!init) return "";
    const std::string token = BedJoin::Token(init->out);
    EXPECT_FALSE(token.empty()) << init->out;

    const std::string mgs1 = bed_.dir() + "/nodes/mgs1";
    EXPECT_TRUE(fs::exists(mgs1 + "/etc-slurm/slurm.conf"));
    std::ifstream conf(mgs1 + "/etc-slurm/slurm.conf");
    const std::string text((std::istreambuf_iterator<char>(conf)), {});
    EXPECT_NE(text.find("SlurmctldParameters=enable_configless"), std::string::npos);
    EXPECT_EQ(fs::status(mgs1 + "/munge.key").permissions(), fs::perms::owner_read);
    EXPECT_EQ(fs::status(mgs1 + "/jwt.key").permissions(), fs::perms::owner_read);
    return token;
  }

  void StartJoinService() {
    auto serve = join_->StartJoinService();
    ASSERT_TRUE(serve) << serve.error().message;
  }

  CommandOutput Join(const std::string& host, const std::string& token) {
    auto r = join_->Join(host, token);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  std::string WaitIdle(const std::string& node) { return join_->WaitIdle(node); }

  // What a join leaves on `host`: nothing after a refused one.
  void ExpectNothingOn(const std::string& host) {
    const std::string dir = bed_.dir() + "/nodes/" + host;
    EXPECT_FALSE(fs::exists(dir + "/etc-bmas")) << host;
    EXPECT_FALSE(fs::exists(dir + "/munge.key")) << host;
    EXPECT_FALSE(fs::exists(dir + "/hooks")) << host;
  }

  CommandOutput Leave(const std::string& host, bool force = false) {
    std::vector<std::string> args = {"node", "leave", "--config-dir", node_ + "/etc-bmas",
                                     "--munge-key", node_ + "/munge.key"};
    if (force) args.push_back("--force");
    return Bmas(host, args);
  }

  // What a leave removes of a join's; what it keeps.
  void ExpectLeft(const std::string& host) {
    const std::string dir = bed_.dir() + "/nodes/" + host;
    for (const char* f : {"/etc-bmas/node.crt", "/etc-bmas/node.key", "/etc-bmas/ca.crt",
                          "/etc-bmas/bmas.toml", "/munge.key", "/hooks/prolog", "/hooks/epilog",
                          "/spool/conf-cache"}) {
      EXPECT_FALSE(fs::exists(dir + f)) << host << f;
    }
  }

  // Waits until squeue in mgs1 shows no job; its last output when one stays.
  std::string WaitNoJobs() {
    std::string last;
    const bool empty = WaitFor(
        [&] {
          auto r = bed_.Run("mgs1", {"squeue", "-h", "-o", "%i %T %N"});
          last = r ? r->out : "squeue failed";
          return r && r->exit_code == 0 && r->out.empty();
        },
        0, std::chrono::seconds(60));
    return empty ? "" : last;
  }

  // A token like `token` with another secret or expiry.
  std::string Altered(const std::string& token, bool wrong_secret, bool expired) {
    auto t = cluster::ParseJoinToken(token, static_cast<int64_t>(std::time(nullptr)));
    EXPECT_TRUE(t);
    if (wrong_secret) t->secret = std::string(cluster::kJoinSecretBytes, 'w');
    if (expired) t->expires_at = static_cast<int64_t>(std::time(nullptr)) - 60;
    return cluster::FormatJoinToken(*t);
  }

  NetBed bed_;
  std::optional<BedJoin> join_;
  std::string bmas_;
  std::string node_;
};

TEST_F(NodeJoinTest, ANodeJoinsOverTlsAndImpostorsWrongSecretsAndOldTokensAreRefused) {
  const std::string token = InitController();
  ASSERT_FALSE(token.empty());

  // An impostor on the join port before the service holds it: an unprivileged account's TLS
  // server with a self-signed certificate for the controller's name and address.
  const std::string imp = bed_.dir() + "/impostor";
  fs::create_directories(imp);
  auto made = bed_.Run("mgs1", {"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                                "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj",
                                "/CN=mgs1", "-addext", "subjectAltName=DNS:mgs1,IP:10.200.0.1",
                                "-keyout", imp + "/key.pem", "-out", imp + "/cert.pem"});
  ASSERT_TRUE(made && made->exit_code == 0) << (made ? made->err : made.error().message);
  fs::permissions(imp, fs::perms::all);
  fs::permissions(imp + "/key.pem", fs::perms::all);
  auto impostor =
      bed_.StartDaemon("mgs1", "impostor", "openssl",
                       {"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "openssl",
                        "s_server", "-quiet", "-accept", "10.200.0.1:6830", "-cert",
                        imp + "/cert.pem", "-key", imp + "/key.pem"});
  ASSERT_TRUE(impostor) << impostor.error().message;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto ss = bed_.Run("mgs1", {"ss", "-Hltn", "sport = :6830"});
        return ss && ss->out.find("6830") != std::string::npos;
      },
      impostor->pid, std::chrono::seconds(10)));
  CommandOutput fooled = Join("oss02", token);
  EXPECT_NE(fooled.exit_code, 0);
  EXPECT_NE(fooled.err.find("not this cluster's controller"), std::string::npos) << fooled.err;
  EXPECT_NE(fooled.err.find("Nothing secret was sent"), std::string::npos) << fooled.err;
  ExpectNothingOn("oss02");
  ASSERT_TRUE(StopProcess(impostor->pid, "openssl", std::chrono::seconds(5)));

  StartJoinService();

  CommandOutput wrong = Join("oss02", Altered(token, true, false));
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err.find("refused the join"), std::string::npos) << wrong.err;
  ExpectNothingOn("oss02");

  // Not root: refused before anything (the command installs keys and starts daemons).
  auto user = bed_.Run("oss03",
                       {bmas_, "--state-dir", node_ + "/bmas-state", "node", "join", token,
                        "--config-dir", node_ + "/etc-bmas"},
                       "nobody");
  ASSERT_TRUE(user) << user.error().message;
  EXPECT_NE(user->exit_code, 0);
  EXPECT_NE(user->err.find("only root"), std::string::npos) << user->err;
  ExpectNothingOn("oss03");

  CommandOutput old = Join("oss03", Altered(token, false, true));
  EXPECT_NE(old.exit_code, 0);
  EXPECT_NE(old.err.find("expired"), std::string::npos) << old.err;
  ExpectNothingOn("oss03");

  const auto t0 = std::chrono::steady_clock::now();
  CommandOutput joined = Join("oss01", token);
  const auto took = std::chrono::steady_clock::now() - t0;
  std::printf(
      "bmas node join in oss01 took %.0f ms (doctor checks, TLS, files, munged, slurmd "
      "with its configuration)\n",
      std::chrono::duration<double, std::milli>(took).count());
  ASSERT_EQ(joined.exit_code, 0) << joined.err << joined.out;
  EXPECT_NE(joined.out.find("oss01 joined"), std::string::npos) << joined.out;
  const std::string oss01 = bed_.dir() + "/nodes/oss01";
  for (const char* f : {"/etc-bmas/node.crt", "/etc-bmas/node.key", "/etc-bmas/ca.crt",
                        "/etc-bmas/bmas.toml", "/munge.key", "/hooks/prolog", "/hooks/epilog"}) {
    EXPECT_TRUE(fs::exists(oss01 + f)) << f;
  }
  EXPECT_EQ(fs::status(oss01 + "/etc-bmas/node.key").permissions(),
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(WaitIdle("oss01"), "");

  EXPECT_NE(joined.out.find("started agent"), std::string::npos) << joined.out;

  CommandOutput again = Join("oss01", token);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("already joined"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("nothing to do"), std::string::npos) << again.out;

  // A user on the node reads the CA that the node's bmas.toml names; not the node's key.
  auto ca = bed_.Run("oss01", {"cat", node_ + "/etc-bmas/ca.crt"}, "nobody");
  ASSERT_TRUE(ca);
  EXPECT_EQ(ca->exit_code, 0) << ca->err;
  EXPECT_NE(ca->out.find("BEGIN CERTIFICATE"), std::string::npos);
  auto key = bed_.Run("oss01", {"cat", node_ + "/etc-bmas/node.key"}, "nobody");
  ASSERT_TRUE(key);
  EXPECT_NE(key->exit_code, 0);
  std::ifstream toml(oss01 + "/etc-bmas/bmas.toml");
  const std::string toml_text((std::istreambuf_iterator<char>(toml)), {});
  EXPECT_NE(toml_text.find(node_ + "/etc-bmas/ca.crt"), std::string::npos) << toml_text;

  // oss01 runs nothing: it leaves (a node in slurm.conf: the admin is told what stays), a
  // second leave finds nothing, and the token joins it again.
  CommandOutput left = Leave("oss01");
  ASSERT_EQ(left.exit_code, 0) << left.err << left.out;
  EXPECT_NE(left.out.find("oss01 left its cluster"), std::string::npos) << left.out;
  for (const char* d : {"stopped agent", "stopped slurmd", "stopped munged"}) {
    EXPECT_NE(left.out.find(d), std::string::npos) << left.out;
  }
  EXPECT_NE(left.out.find("stays in the controller's slurm.conf"), std::string::npos) << left.out;
  ExpectLeft("oss01");
  CommandOutput left_again = Leave("oss01");
  EXPECT_EQ(left_again.exit_code, 0) << left_again.err;
  EXPECT_NE(left_again.out.find("nothing to do"), std::string::npos) << left_again.out;
  CommandOutput rejoined = Join("oss01", token);
  ASSERT_EQ(rejoined.exit_code, 0) << rejoined.err << rejoined.out;
  EXPECT_NE(rejoined.out.find("oss01 joined"), std::string::npos) << rejoined.out;
  EXPECT_NE(rejoined.out.find("started slurmd"), std::string::npos) << rejoined.out;
  EXPECT_EQ(WaitIdle("oss01"), "");
}

TEST_F(NodeJoinTest, ADynamicNodeRegistersItselfWhenItJoins) {
  const std::string token = InitController(true);
  ASSERT_FALSE(token.empty());
  StartJoinService();
  CommandOutput joined = Join("oss02", token);
  ASSERT_EQ(joined.exit_code, 0) << joined.err << joined.out;
  EXPECT_EQ(WaitIdle("oss02"), "");
  auto show = bed_.Run("mgs1", {"scontrol", "show", "node", "oss02"});
  ASSERT_TRUE(show);
  EXPECT_NE(show->out.find("DYNAMIC"), std::string::npos) << show->out;
  EXPECT_NE(show->out.find("NodeAddr=10.200.0.12"), std::string::npos) << show->out;

  // A job there: leave refuses, drained or not, until it is gone.
  auto job = bed_.Run("mgs1", {"sbatch", "-w", "oss02", "--chdir=/tmp", "-o", "/dev/null",
                               "--wrap", "sleep 600"});
  ASSERT_TRUE(job && job->exit_code == 0) << (job ? job->err : job.error().message);
  const std::string id = job->out.substr(job->out.rfind(' ') + 1, std::string::npos);
  std::string queue;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto r = bed_.Run("mgs1", {"squeue", "-h", "-t", "R", "-w", "oss02", "-o", "%i"});
        queue = r ? r->out : "";
        return !queue.empty();
      },
      0, std::chrono::seconds(30)))
      << bed_.LogTail("slurmctld");
  CommandOutput busy = Leave("oss02");
  EXPECT_NE(busy.exit_code, 0);
  EXPECT_NE(busy.err.find("run `bmas node drain oss02` on the controller"), std::string::npos)
      << busy.err;
  auto drain = bed_.Run("mgs1", {"scontrol", "update", "nodename=oss02", "state=drain",
                                 "reason=leaving"});
  ASSERT_TRUE(drain && drain->exit_code == 0);
  CommandOutput draining = Leave("oss02");
  EXPECT_NE(draining.exit_code, 0);
  EXPECT_NE(draining.err.find("is drained but still runs 1 job(s)"), std::string::npos)
      << draining.err;
  EXPECT_TRUE(fs::exists(bed_.dir() + "/nodes/oss02/etc-bmas/node.key"));  // refused: kept
  auto cancel = bed_.Run("mgs1", {"scancel", id.substr(0, id.find('\n'))});
  ASSERT_TRUE(cancel && cancel->exit_code == 0);
  ASSERT_EQ(WaitNoJobs(), "");

  CommandOutput left = Leave("oss02");
  ASSERT_EQ(left.exit_code, 0) << left.err << left.out;
  EXPECT_NE(left.out.find("deleted oss02 from Slurm"), std::string::npos) << left.out;
  ExpectLeft("oss02");
  auto gone = bed_.Run("mgs1", {"scontrol", "show", "node", "oss02"});
  ASSERT_TRUE(gone);
  EXPECT_NE(gone->exit_code, 0) << gone->out;

  CommandOutput rejoined = Join("oss02", token);
  ASSERT_EQ(rejoined.exit_code, 0) << rejoined.err << rejoined.out;
  EXPECT_EQ(WaitIdle("oss02"), "");
}

}  // namespace
}  // namespace bmas::testbed
