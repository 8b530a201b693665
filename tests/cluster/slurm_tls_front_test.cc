// Issue 25: Slurm's REST API across the bed's network, over TLS. slurmrestd runs on mgs1's
// loopback with JWT auth, and `bmas slurm tls-front` serves it on mgs1's bridge address with a
// certificate from the cluster CA (`bmas cluster init`). bmas on oss01, configured with
// slurmrestd = "https://mgs1:6821", lists jobs and submits one for a user through it. An
// impostor front on oss02 (another CA's certificate; the cluster CA's certificate for another
// host) is refused by the client before any request, and so before any token, reaches it; a
// plain http slurmrestd off loopback is refused before anything is dialled.

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "net_bed.h"
#include "test_helpers.h"

namespace bmas::testbed {
namespace {

using bmas::testing::Eventually;
using bmas::testing::EnsureUnixUser;

constexpr const char* kUser = "bmas-tlsfront-user";
constexpr const char* kFrontPort = "6821";

void WriteFile(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

class SlurmTlsFrontTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the test bed needs root";
    const char* bmas = std::getenv("BMAS_BINARY");
    if (bmas == nullptr) GTEST_SKIP() << "BMAS_BINARY is not set";
    bmas_ = bmas;
    BedOptions o;
    o.name = "tlsfront";
    o.nodes = 2;
    auto started = bed_.Start(o);
    ASSERT_TRUE(started) << started.error().message;
    auto slurm = bed_.StartSlurm(std::chrono::seconds(30));
    ASSERT_TRUE(slurm) << slurm.error().message;
    dir_ = bed_.dir();
    key_ = dir_ + "/etc/jwt.key";
  }

  // The fronts, slurmrestd and the second slurmctld go with the bed, and nothing is left.
  void TearDown() override {
    if (bmas_.empty()) return;
    bed_.Stop();
    EXPECT_EQ(bed_.Leftovers(), std::vector<std::string>{});
  }

  CommandOutput In(const std::string& host, const std::vector<std::string>& args,
                   const std::string& user = "") {
    auto r = bed_.Run(host, args, user, std::chrono::seconds(60));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  // The cluster's JWT key, which root on a node mints its tokens with.
  void WriteJwtKey() {
    std::string key(32, '\0');
    std::ifstream("/dev/urandom", std::ios::binary).read(key.data(), key.size());
    WriteFile(key_, key);
  }

  // The bed's slurmctld again, now accepting Slurm JWTs signed with key_ (the bed starts it
  // without), and slurmrestd on mgs1's loopback.
  void StartSlurmrestd() {
    WriteJwtKey();
    const std::string conf = dir_ + "/nodes/mgs1/etc-slurm/slurm.conf";
    std::ofstream(conf, std::ios::app)
        << "AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key=" << key_ << "\n";
    In("mgs1", {"scontrol", "shutdown", "slurmctld"});
    ASSERT_TRUE(Eventually(
        [&] { return In("mgs1", {"scontrol", "ping"}).out.find("is UP") == std::string::npos; },
        std::chrono::seconds(20)));
    auto ctld = bed_.StartDaemon("mgs1", "slurmctld jwt", "slurmctld",
                                 {"/usr/sbin/slurmctld", "-D"});
    ASSERT_TRUE(ctld) << ctld.error().message;
    ASSERT_TRUE(Eventually(
        [&] { return In("mgs1", {"scontrol", "ping"}).out.find("is UP") != std::string::npos; },
        std::chrono::seconds(20)))
        << bed_.LogTail("slurmctld jwt");
    auto rest = bed_.StartDaemon(
        "mgs1", "slurmrestd", "slurmrestd",
        {"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/sbin/slurmrestd",
         "-a", "rest_auth/jwt", "-s", "openapi/v0.0.38", "127.0.0.1:6820"},
        {"SLURM_JWT=daemon", "SLURM_CONF=/etc/slurm/slurm.conf"});
    ASSERT_TRUE(rest) << rest.error().message;
  }

  // An inventory of the bed as bmas on a node reads it, with `slurmrestd` and the CA given.
  std::string NodeConfig(const std::string& slurmrestd, const std::string& ca) {
    const std::string path = fmt::format("{}/node-{}.toml", dir_, ++configs_);
    std::string toml = fmt::format(
        "[cluster]\ncontroller = {{ name = \"mgs1\", address = \"10.200.0.1\" }}\n"
        "[cluster.slurm]\ncluster_name = \"netbed\"\nslurm_user = \"root\"\n"
        "jwt_key = \"{}\"\nslurmrestd = \"{}\"\nslurmrestd_ca = \"{}\"\n"
        "prolog = \"\"\nepilog = \"\"\ntask_prolog = \"\"\n",
        key_, slurmrestd, ca);
    for (const BedHost& h : bed_.hosts()) {
      if (h.name == "mgs1") continue;
      toml += fmt::format(
          "[[cluster.nodes]]\nnames = \"{}\"\naddress = \"{}\"\ncpus = {}\nmemory_mib = 1024\n"
          "[cluster.nodes.gpus]\ncount = 4\ntype = \"h100\"\nmemory_gb = 80\n",
          h.name, h.address, sysconf(_SC_NPROCESSORS_ONLN));
    }
    toml += "[[cluster.partitions]]\nname = \"batch\"\nnodes = \"ALL\"\ndefault = true\n";
    WriteFile(path, toml, 0644);
    return path;
  }

  // bmas on `host` with `config` and a state dir of that host's own (no local cluster there).
  CommandOutput Bmas(const std::string& host, const std::string& config,
                     const std::vector<std::string>& args) {
    std::vector<std::string> argv = {bmas_, "--config", config, "--state-dir",
                                     dir_ + "/nodes/" + host + "/bmas-state"};
    argv.insert(argv.end(), args.begin(), args.end());
    return In(host, argv);
  }

  // `bmas slurm tls-front` in `host` as a daemon of the bed, up once its log says so.
  void StartFront(const std::string& host, const std::string& name, const std::string& state,
                  const std::vector<std::string>& args) {
    std::vector<std::string> argv = {bmas_, "--state-dir", state, "slurm", "tls-front"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto d = bed_.StartDaemon(host, name, "bmas", argv);
    ASSERT_TRUE(d) << d.error().message;
    ASSERT_TRUE(Eventually(
        [&] { return bed_.LogTail(name).find("bmas slurm tls-front: https://") != std::string::npos; },
        std::chrono::seconds(20)))
        << bed_.LogTail(name);
  }

  // The cluster CA in `state` (made by `bmas cluster init` in mgs1), and a copy for nodes.
  std::string InitCa(const std::string& state, const std::string& cluster) {
    const std::string inventory = NodeConfig("https://mgs1:6821", "/nonexistent");
    std::string text;
    {
      std::ifstream in(inventory);
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    text.replace(text.find("cluster_name = \"netbed\""), 23,
                 fmt::format("cluster_name = \"{}\"", cluster));
    WriteFile(inventory, text, 0644);
    const CommandOutput init =
        In("mgs1", {bmas_, "--state-dir", state, "cluster", "init", "--cluster", inventory});
    EXPECT_EQ(init.exit_code, 0) << init.err << init.out;
    const std::string copy = state + "-ca.crt";
    std::filesystem::copy_file(state + "/cluster/ca.crt", copy,
                               std::filesystem::copy_options::overwrite_existing);
    return copy;
  }

  NetBed bed_;
  std::string bmas_;
  std::string dir_;
  std::string key_;
  int configs_ = 0;
};

TEST_F(SlurmTlsFrontTest, ANodeReachesSlurmrestdOnTheControllerThroughTheTlsFront) {
  StartSlurmrestd();
  const std::string state = dir_ + "/nodes/mgs1/bmas-state";
  const std::string ca = InitCa(state, "netbed");
  StartFront("mgs1", "tls-front", state,
             {"--listen", fmt::format("10.200.0.1:{}", kFrontPort), "--name", "mgs1"});
  const std::string config = NodeConfig(fmt::format("https://mgs1:{}", kFrontPort), ca);

  // Root on oss01 lists the cluster's jobs through mgs1's front...
  const CommandOutput before = Bmas("oss01", config, {"jobs", "--all", "--json"});
  ASSERT_EQ(before.exit_code, 0) << before.err << before.out;
  EXPECT_EQ(before.out.substr(0, 1), "[") << before.out;
  // ...and submits a job for a user, which slurmctld records as that user's.
  const std::string user = EnsureUnixUser(kUser);
  const CommandOutput run =
      Bmas("oss01", config, {"run", "--user", user, "--name", "tls-front", "--", "/bin/true"});
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  const std::string id = run.out.substr(0, run.out.find_first_not_of("0123456789"));
  ASSERT_FALSE(id.empty()) << run.out;
  const CommandOutput show = In("mgs1", {"scontrol", "show", "job", id});
  EXPECT_NE(show.out.find("UserId=" + user + "("), std::string::npos) << show.out;
  const CommandOutput after = Bmas("oss01", config, {"jobs", "--all", "--json"});
  EXPECT_NE(after.out.find(id), std::string::npos) << after.out;
  // It serves as nobody, not root.
  EXPECT_NE(bed_.LogTail("tls-front").find(fmt::format("as uid {}", getpwnam("nobody")->pw_uid)),
            std::string::npos)
      << bed_.LogTail("tls-front");
  // The front logged the requests, never a token.
  const std::string log = bed_.LogTail("tls-front", 200);
  EXPECT_NE(log.find("POST /slurm/v0.0.38/job/submit 200"), std::string::npos) << log;
  EXPECT_EQ(log.find("eyJ"), std::string::npos) << log;
}

TEST_F(SlurmTlsFrontTest, ImpostorFrontsAreRefusedBeforeAnyTokenIsSent) {
  WriteJwtKey();  // the client has a token to lose
  const std::string state = dir_ + "/nodes/mgs1/bmas-state";
  const std::string ca = InitCa(state, "netbed");
  const std::string other_state = dir_ + "/nodes/oss02/impostor-state";
  InitCa(other_state, "impostor");
  // Another CA's certificate, for the very name and address dialled. Its backend is a closed
  // port: a request that reached it would be logged with a 502.
  StartFront("oss02", "impostor", other_state,
             {"--listen", "10.200.0.12:6821", "--name", "oss02", "--backend", "127.0.0.1:9"});
  // The cluster CA's own certificate, but for another host (no address in it).
  StartFront("oss02", "wrong-name", state,
             {"--listen", "0.0.0.0:6822", "--name", "oss09", "--backend", "127.0.0.1:9"});

  for (const auto& [url, why] :
       {std::pair<std::string, std::string>{"https://oss02:6821", "unable to get local issuer"},
        {"https://10.200.0.12:6822", "mismatch"}}) {
    const CommandOutput r = Bmas("oss01", NodeConfig(url, ca), {"jobs", "--all"});
    EXPECT_NE(r.exit_code, 0) << url << r.out;
    EXPECT_NE(r.err.find("nothing was sent"), std::string::npos) << url << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << url << r.err;
  }
  for (const char* front : {"impostor", "wrong-name"}) {
    const std::string log = bed_.LogTail(front, 200);
    EXPECT_EQ(log.find("/slurm/"), std::string::npos) << front << ": " << log;
  }
}

TEST_F(SlurmTlsFrontTest, PlainHttpToTheControllerIsStillRefused) {
  for (const char* plain : {"mgs1:6820", "10.200.0.1:6820", "http://mgs1:6820"}) {
    const CommandOutput r = Bmas("oss01", NodeConfig(plain, "/nonexistent"), {"jobs", "--all"});
    EXPECT_NE(r.exit_code, 0) << plain << r.out;
    EXPECT_NE(r.err.find("https://HOST:PORT"), std::string::npos) << plain << r.err;
  }
}

}  // namespace
}  // namespace bmas::testbed
