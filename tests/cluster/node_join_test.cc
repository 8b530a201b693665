// `bmas node join` across the test bed (docs/cluster-join.md): `bmas cluster init` and the join
// service in mgs1; a node that runs the printed line ends up in Slurm with its files in place,
// and a second run changes nothing. A wrong secret, an expired token and an impostor on the
// join port are each refused with a clear error and leave nothing on the node. `bmas node
// leave` refuses while jobs run there, then takes the node out (a dynamic one out of Slurm too),
// and the node joins again. Two nodes that join with LXD trust each other's node certificates,
// and a workspace is copied between them.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>

#include "cluster/join_token.h"
#include "common/process.h"
#include "bed_cluster.h"
#include "net_bed.h"

#include <toml++/toml.h>

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
    cluster_ = std::make_unique<BedCluster>(bed_, bmas_);
    WriteInventory();
  }

  void TearDown() override {
    bed_.Stop();
    EXPECT_TRUE(bed_.Leftovers().empty()) << ::testing::PrintToString(bed_.Leftovers());
  }

  // The bed's hosts without GPUs. With `lxd`, each node serves an LXD of its own to its peers
  // (the bed's [lxd] table).
  void WriteInventory(bool lxd = false) {
    BedClusterOptions o;
    o.cluster_name = "joinbed";
    if (lxd) o.extra_toml = bed_.LxdToml(node_ + "/etc-bmas");
    cluster_->WriteInventory(o);
  }

  CommandOutput Bmas(const std::string& host, const std::vector<std::string>& args) {
    auto r = cluster_->Bmas(host, args);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }

  // `bmas cluster init` in mgs1, then munged and slurmctld there; returns the join token.
  std::string InitController(bool dynamic = false) {
    auto init = cluster_->Init(dynamic);
    EXPECT_TRUE(init) << init.error().message;
    if (!init) return "";
    const std::string mgs1 = bed_.dir() + "/nodes/mgs1";
    EXPECT_TRUE(fs::exists(mgs1 + "/etc-slurm/slurm.conf"));
    std::ifstream conf(mgs1 + "/etc-slurm/slurm.conf");
    const std::string text((std::istreambuf_iterator<char>(conf)), {});
    EXPECT_NE(text.find("SlurmctldParameters=enable_configless"), std::string::npos);
    EXPECT_EQ(fs::status(mgs1 + "/munge.key").permissions(), fs::perms::owner_read);
    EXPECT_EQ(fs::status(mgs1 + "/jwt.key").permissions(), fs::perms::owner_read);
    return BedCluster::Token(*init);
  }

  // munged and slurmctld, as the controller's system would run them.
  void StartSlurmctld() {
    auto r = cluster_->StartControllerDaemons(/*join_service=*/false);
    ASSERT_TRUE(r) << r.error().message;
  }

  void StartJoinService() {
    auto r = cluster_->StartJoinService();
    ASSERT_TRUE(r) << r.error().message;
  }

  CommandOutput Join(const std::string& host, const std::string& token, bool dynamic = false,
                     const std::vector<std::string>& more = {}) {
    std::vector<std::string> args = {"node", "join", token, "--config-dir", node_ + "/etc-bmas",
                                     "--munge-key", node_ + "/munge.key"};
    if (dynamic) args.push_back("--dynamic");
    args.insert(args.end(), more.begin(), more.end());
    return Bmas(host, args);
  }

  // `bmas --config <node's bmas.toml> ARGS...` in `host`, with `env` before it.
  CommandOutput NodeBmas(const std::string& host, std::vector<std::string> args,
                         const std::vector<std::string>& env = {},
                         const std::string& config = "") {
    args.insert(args.begin(), {bmas_, "--config", config.empty() ? NodeToml() : config,
                               "--state-dir", node_ + "/bmas-state"});
    args.insert(args.begin(), env.begin(), env.end());
    args.insert(args.begin(), "env");
    auto r = bed_.Run(host, args, "", std::chrono::seconds(120));
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : CommandOutput{};
  }
  std::string NodeToml() const { return node_ + "/etc-bmas/bmas.toml"; }

  // "" once `node` is idle in sinfo (in mgs1), else sinfo's last answer.
  std::string WaitIdle(const std::string& node) { return cluster_->WaitState(node, "idle"); }

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
  std::unique_ptr<BedCluster> cluster_;
  std::string bmas_;
  std::string node_;
};

TEST_F(NodeJoinTest, ANodeJoinsOverTlsAndImpostorsWrongSecretsAndOldTokensAreRefused) {
  const std::string token = InitController();
  ASSERT_FALSE(token.empty());
  StartSlurmctld();

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
  StartSlurmctld();
  StartJoinService();
  CommandOutput joined = Join("oss02", token, true);
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

  CommandOutput rejoined = Join("oss02", token, true);
  ASSERT_EQ(rejoined.exit_code, 0) << rejoined.err << rejoined.out;
  EXPECT_EQ(WaitIdle("oss02"), "");
}

// Issue 25's LXD peer trust, delivered by the join: oss01 and oss02 join, each starts an LXD of
// its own and trusts the other's node certificate (oss02 from its join answer, oss01 when it
// joins again); a workspace on oss01 is copied to oss02 over the bed's network with oss02's own
// certificate, and a third party's certificate in oss02's place is refused.
TEST_F(NodeJoinTest, JoinedNodesTrustEachOthersLxdAndCopyAWorkspaceBetweenThem) {
  if (access("/usr/bin/lxd", X_OK) != 0) GTEST_SKIP() << "needs LXD (scripts/install-deps.sh)";
  WriteInventory(/*lxd=*/true);
  const std::string token = InitController();
  ASSERT_FALSE(token.empty());
  StartSlurmctld();
  StartJoinService();
  // An unprivileged container's root (a high host uid) must get through to each LXD_DIR.
  for (const std::string& d : {bed_.dir(), bed_.dir() + "/nodes", bed_.dir() + "/nodes/oss01",
                               bed_.dir() + "/nodes/oss02"}) {
    fs::permissions(d, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  }

  // Each node's image cache is its own; oss01's is empty.
  const std::vector<std::string> cache = {"--image-cache", node_ + "/image-cache"};
  const auto t0 = std::chrono::steady_clock::now();
  CommandOutput one = Join("oss01", token, false, cache);
  ASSERT_EQ(one.exit_code, 0) << one.err << one.out;
  EXPECT_NE(one.out.find("lxd up: "), std::string::npos) << one.out;
  // No image in LXD nor in the cache: the join says so, and which file would do.
  std::smatch wanted_image;
  ASSERT_TRUE(std::regex_search(one.out, wanted_image,
                                std::regex("no default workspace image: (/[^ ]+) is not here")))
      << one.out;
  const std::string image_name = fs::path(wanted_image[1].str()).filename().string();
  std::printf("first join of oss01 took %.0f ms\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count());

  // oss01 builds the 1 MB busybox image; exported into oss02's cache under the default image's
  // name, it stands in for the Debian image a controller would hand over (228 MB).
  CommandOutput image = NodeBmas("oss01", {"image", "build", "--base", "busybox"});
  ASSERT_EQ(image.exit_code, 0) << image.out << image.err;
  const std::string export_dir = bed_.dir() + "/nodes/oss02/image-cache";
  fs::create_directories(export_dir);
  auto exported = bed_.Run("oss01", {"env", "LXD_DIR=" + bed_.LxdDir(), "lxc", "image", "export",
                                     "bmas-busybox", export_dir + "/"});
  ASSERT_TRUE(exported && exported->exit_code == 0) << (exported ? exported->err : "");
  for (const auto& e : fs::directory_iterator(export_dir)) {
    fs::rename(e.path(), export_dir + "/" + image_name);
  }

  const auto t1 = std::chrono::steady_clock::now();
  CommandOutput two = Join("oss02", token, false, cache);
  ASSERT_EQ(two.exit_code, 0) << two.err << two.out;
  const std::string peers = node_ + "/etc-bmas/lxd-peers/";
  EXPECT_NE(two.out.find("wrote " + peers + "oss01.crt"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("trusts 1 peer node (added oss01)"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("image: imported bmas-debian from " + node_ + "/image-cache/" +
                         image_name),
            std::string::npos)
      << two.out;
  // oss01 joined first: it learns oss02 when it joins again (with its certificate, no secret).
  CommandOutput again = Join("oss01", token, false, cache);
  ASSERT_EQ(again.exit_code, 0) << again.err << again.out;
  EXPECT_NE(again.out.find("already joined"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("wrote " + peers + "oss02.crt"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("trusts 1 peer node (added oss02)"), std::string::npos) << again.out;
  std::printf("oss02's join (its image imported) and oss01's second join took %.0f ms\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1)
                  .count());
  // Each node's LXD client certificate is its own.
  const std::string nodes = bed_.dir() + "/nodes/";
  std::ifstream c1(nodes + "oss01/etc-bmas/node.crt"), c2(nodes + "oss02/etc-bmas/node.crt");
  const std::string cert1((std::istreambuf_iterator<char>(c1)), {});
  const std::string cert2((std::istreambuf_iterator<char>(c2)), {});
  EXPECT_NE(cert1, cert2);
  EXPECT_FALSE(cert1.empty());

  // A workspace on oss01, of the busybox image (oss02 needs none: it gets the copy).
  if (getpwnam("bmastest1") == nullptr) {
    auto added = RunCommand({"useradd", "--create-home", "bmastest1"});
    ASSERT_TRUE(added && added->exit_code == 0);
  }
  CommandOutput created = NodeBmas("oss01", {"workspace", "create", "bmastest1"});
  ASSERT_EQ(created.exit_code, 0) << created.out << created.err;
  CommandOutput status = NodeBmas("oss01", {"lxd", "status", "--json"});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(status.out, m,
                                std::regex("\"certificate_fingerprint\":\"([0-9a-f]{64})\"")))
      << status.out;

  // oss02's prolog pulls it from oss01's LXD over the bed's network: its config names oss01's
  // LXD and the fingerprint it must show.
  auto toml = toml::parse_file(nodes + "oss02/etc-bmas/bmas.toml");
  toml::array list;
  list.push_back(toml::table{{"url", "https://10.200.0.11:8443"}, {"fingerprint", m[1].str()}});
  toml["lxd"].as_table()->insert_or_assign("peers", std::move(list));
  std::ofstream(nodes + "oss02/hook.toml") << toml;
  auto hook = [&](const std::string& phase, int job) {
    return NodeBmas("oss02", {"slurm", "hook", phase},
                    {fmt::format("SLURM_JOB_ID={}", job), "SLURM_JOB_USER=bmastest1",
                     "SLURMD_NODENAME=oss02", "SLURM_JOB_GPUS="},
                    node_ + "/hook.toml");
  };
  CommandOutput copied = hook("prolog", 7201);
  EXPECT_NE(copied.out.find("copied ws-bmastest1 from https://10.200.0.11:8443"),
            std::string::npos)
      << copied.out << copied.err;
  auto listed = bed_.Run("oss02", {"env", "LXD_DIR=" + bed_.LxdDir(), "lxc", "list", "-c", "ns",
                                   "--format", "csv"});
  ASSERT_TRUE(listed);
  EXPECT_NE(listed->out.find("ws-bmastest1,RUNNING"), std::string::npos) << listed->out;
  auto on_one = bed_.Run("oss01", {"env", "LXD_DIR=" + bed_.LxdDir(), "lxc", "list", "-c", "ns",
                                   "--format", "csv"});
  ASSERT_TRUE(on_one);
  EXPECT_NE(on_one->out.find("ws-bmastest1,RUNNING"), std::string::npos) << on_one->out;
  auto cgroups =
      RunCommand({"sh", "-c", "ls -d /sys/fs/cgroup/pids/lxc.payload.ws-bmastest1*"});
  if (cgroups) std::printf("cgroups of the two ws-bmastest1: %s\n", cgroups->out.c_str());
  CommandOutput released = hook("epilog", 7201);
  EXPECT_NE(released.out.find("deleted ws-bmastest1"), std::string::npos) << released.out;

  // A third party's certificate for oss02's very name (not from the cluster CA) in oss02's
  // place: oss01's LXD refuses it.
  const std::string etc2 = nodes + "oss02/etc-bmas/";
  fs::copy_file(etc2 + "node.crt", etc2 + "node.crt.real");
  fs::copy_file(etc2 + "node.key", etc2 + "node.key.real");
  auto forged = bed_.Run(
      "oss02", {"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-nodes", "-days", "1", "-subj", "/CN=oss02", "-addext",
                "subjectAltName=DNS:oss02,IP:10.200.0.12", "-keyout",
                node_ + "/etc-bmas/node.key", "-out", node_ + "/etc-bmas/node.crt"});
  ASSERT_TRUE(forged && forged->exit_code == 0) << (forged ? forged->err : "");
  CommandOutput refused = hook("prolog", 7202);
  EXPECT_NE(refused.out.find("does not trust this node's client certificate"), std::string::npos)
      << refused.out << refused.err;
  EXPECT_EQ(refused.out.find("copied"), std::string::npos) << refused.out;
  fs::rename(etc2 + "node.crt.real", etc2 + "node.crt");
  fs::rename(etc2 + "node.key.real", etc2 + "node.key");
}

}  // namespace
}  // namespace bmas::testbed
