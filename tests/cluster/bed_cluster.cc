#include "bed_cluster.h"

#include <fmt/format.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "daemon/secret.h"
#include "slurm/local_cluster.h"
#include "slurm/local_cluster_internal.h"
#include "store/store.h"
#include "test_helpers.h"

namespace bmas::testbed {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMungeSocket = "/run/munge/munge.socket.2";
constexpr int kJoinPort = 6830;
constexpr const char* kBackendSecret = "bed-backend-secret-0123456789abcdef";

// Whether something listens on `port` in `host`.
bool Listening(const NetBed& bed, const std::string& host, int port) {
  auto ss = bed.Run(host, {"ss", "-Hltn", fmt::format("sport = :{}", port)});
  return ss && ss->out.find(std::to_string(port)) != std::string::npos;
}

}  // namespace

std::string BedCluster::WriteInventory(const BedClusterOptions& options) {
  options_ = options;
  node_ = bed_.dir() + "/node";
  const std::string shared = bed_.dir() + "/shared";
  fs::create_directories(shared);
  // The bed's directory is root's; users need to pass through it to what is shared.
  fs::permissions(bed_.dir(), fs::perms::others_exec | fs::perms::group_exec,
                  fs::perm_options::add);
  fs::permissions(shared, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
  const auto& hosts = bed_.hosts();
  std::string toml = fmt::format(
      "[cluster]\ncontroller = {{ name = \"{}\", address = \"{}\" }}\n"
      "[cluster.slurm]\ncluster_name = \"{}\"\nslurm_user = \"root\"\n"
      "state_save_dir = \"{n}/state\"\nspool_dir = \"{n}/spool\"\nlog_dir = \"{n}/log\"\n"
      "run_dir = \"{n}/run\"\ntmpfs = \"{n}/tmp\"\ncred_expire_s = 10\nkill_wait_s = 5\n"
      "prolog = \"{n}/hooks/prolog\"\nepilog = \"{n}/hooks/epilog\"\ntask_prolog = \"\"\n",
      hosts.front().name, hosts.front().address, options.cluster_name, fmt::arg("n", node_));
  if (options.gpus_per_node > 0) toml += fmt::format("gpu_device_dir = \"{}\"\n", node_);
  if (options.slurmrestd_port > 0) {
    toml += fmt::format("jwt_key = \"{}/jwt.key\"\nslurmrestd = \"127.0.0.1:{}\"\n", node_,
                        options.slurmrestd_port);
  }
  for (size_t i = 1; i < hosts.size(); ++i) {
    toml += fmt::format(
        "[[cluster.nodes]]\nnames = \"{}\"\naddress = \"{}\"\ncpus = {}\nmemory_mib = 1024\n",
        hosts[i].name, hosts[i].address, sysconf(_SC_NPROCESSORS_ONLN));
    if (options.gpus_per_node > 0) {
      toml += fmt::format("[cluster.nodes.gpus]\ncount = {}\ntype = \"h100\"\nmemory_gb = 80\n",
                          options.gpus_per_node);
    }
  }
  toml += fmt::format("[[cluster.partitions]]\nname = \"{}\"\nnodes = \"ALL\"\ndefault = true\n",
                      options.partition);
  toml += options.extra_toml;
  inventory_ = shared + "/cluster.toml";
  std::ofstream(inventory_) << toml;
  ::chmod(inventory_.c_str(), 0644);
  student_bmas = bmas::testing::SharedBinaryIn(shared);
  return inventory_;
}

Result<CommandOutput> BedCluster::Bmas(const std::string& host,
                                       const std::vector<std::string>& args,
                                       const std::string& user,
                                       const std::vector<std::string>& env) const {
  std::vector<std::string> argv;
  if (!env.empty()) {
    argv.push_back("env");
    argv.insert(argv.end(), env.begin(), env.end());
  }
  argv.insert(argv.end(), {user.empty() ? bmas_ : student_bmas, "--state-dir",
                           node_ + "/bmas-state"});
  argv.insert(argv.end(), args.begin(), args.end());
  return bed_.Run(host, argv, user, std::chrono::seconds(120));
}

Result<CommandOutput> BedCluster::Init(bool dynamic_nodes) {
  std::vector<std::string> args = {
      "cluster",    "init",        "--cluster",          inventory_,  "--slurm-dir",
      "/etc/slurm", "--munge-key", node_ + "/munge.key", "--jwt-key", node_ + "/jwt.key"};
  if (dynamic_nodes) args.push_back("--dynamic-nodes");
  auto init = Bmas(NetBed::kController, args);
  if (!init) return init.error();
  if (init->exit_code != 0 || Token(*init).empty()) {
    return Internal("bmas cluster init failed: " + init->err + init->out);
  }
  if (options_.gpus_per_node > 0) {
    // The nodes' devices, where the inventory's gres.conf points: the bed's stand-in for real
    // GPUs (<bed>/nodes/<node>/nvidiaN, each node's <node>/nvidiaN).
    Cluster devices = LoadCluster(inventory_);
    devices.slurm.local = true;
    devices.slurm.gpu_device_dir = bed_.dir() + "/nodes";
    if (auto made = slurm::internal::MakeFakeGpus(devices, bed_.dir() + "/nodes"); !made) {
      return made.error();
    }
  }
  return init;
}

std::string BedCluster::Token(const CommandOutput& init) {
  const std::string prefix = "bmas node join ";
  const size_t at = init.out.find(prefix);
  if (at == std::string::npos) return "";
  std::string token = init.out.substr(at + prefix.size());
  return token.substr(0, token.find('\n'));
}

Result<void> BedCluster::StartMungeAndSlurmctld() {
  auto munge = slurm::internal::LookUp("munge");
  if (!munge) return munge.error();
  auto mk = bed_.Run(NetBed::kController,
                     {"install", "-d", "-m", "755", "-o", "munge", "-g", "munge", "/run/munge"});
  if (!mk || mk->exit_code != 0) return Internal("cannot make /run/munge in mgs1");
  auto munged = bed_.StartDaemon(
      NetBed::kController, "munged mgs1", "munged",
      slurm::internal::MungedCommand(*munge, kMungeSocket, node_ + "/munge.key", "/run/munge"));
  if (!munged) return munged.error();
  auto ctld = bed_.StartDaemon(NetBed::kController, "slurmctld", "slurmctld",
                               {"/usr/sbin/slurmctld", "-D"});
  if (!ctld) return ctld.error();
  std::string pinged;
  const bool up = WaitFor(
      [&] {
        auto ping = bed_.Run(NetBed::kController, {"scontrol", "ping"}, "", std::chrono::seconds(5));
        pinged = ping ? ping->out + ping->err : ping.error().message;
        return ping && ping->out.find("is UP") != std::string::npos;
      },
      ctld->pid, std::chrono::seconds(20));
  if (!up) {
    return Internal(fmt::format("slurmctld in mgs1 did not answer `scontrol ping` ({}):\n{}{}",
                                pinged, bed_.LogTail("slurmctld"), bed_.LogTail("munged mgs1")));
  }
  return {};
}

Result<void> BedCluster::StartControllerDaemons(bool join_service) {
  if (auto r = StartMungeAndSlurmctld(); !r) return r;
  if (options_.slurmrestd_port > 0) {
    // As Debian's unit runs it: not root, JWT auth.
    auto rest = bed_.StartDaemon(
        NetBed::kController, "slurmrestd", "slurmrestd",
        {"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/sbin/slurmrestd",
         "-a", "rest_auth/jwt", "-s", "openapi/v0.0.38",
         fmt::format("127.0.0.1:{}", options_.slurmrestd_port)},
        {"SLURM_JWT=daemon"});
    if (!rest) return rest.error();
    if (!WaitFor([&] { return Listening(bed_, NetBed::kController, options_.slurmrestd_port); },
                 rest->pid, std::chrono::seconds(10))) {
      return Internal("slurmrestd in mgs1 did not listen:\n" + bed_.LogTail("slurmrestd"));
    }
  }
  if (!join_service) return {};
  return StartJoinService();
}

Result<void> BedCluster::StartJoinService() {
  auto serve = bed_.StartDaemon(NetBed::kController, "join service", "bmas",
                                {bmas_, "--state-dir", node_ + "/bmas-state", "cluster", "serve",
                                 "--cluster", inventory_, "--munge-key", node_ + "/munge.key"});
  if (!serve) return serve.error();
  if (!WaitFor([&] { return Listening(bed_, NetBed::kController, kJoinPort); }, serve->pid,
               std::chrono::seconds(10))) {
    return Internal("the join service did not listen:\n" + bed_.LogTail("join service"));
  }
  return {};
}

Result<CommandOutput> BedCluster::Join(const std::string& host, const std::string& token,
                                       bool dynamic, const std::vector<std::string>& env) {
  std::vector<std::string> args = {"node",         "join", token, "--config-dir",
                                   node_ + "/etc-bmas", "--munge-key", node_ + "/munge.key"};
  if (dynamic) args.push_back("--dynamic");
  return Bmas(host, args, "", env);
}

Result<void> BedCluster::EnsureServiceAccount() {
  if (getpwnam("bmas") != nullptr) return {};
  auto made = RunCommand({"useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
                          "/nonexistent", "--shell", "/usr/sbin/nologin", "bmas"});
  if (!made) return made.error();
  if (made->exit_code != 0) return Internal("useradd bmas: " + made->err);
  return {};
}

std::string BedClusterSkipReason(std::string* bmas) {
  if (geteuid() != 0) return "the test bed needs root";
  const char* binary = std::getenv("BMAS_BINARY");
  if (binary == nullptr) return "BMAS_BINARY is not set";
  if (std::string why = slurm::LocalClusterPrerequisites(); !why.empty()) return why;
  *bmas = binary;
  return "";
}

Result<std::string> WriteFakeNvmlValues(const NetBed& bed, int gpus, const std::string& prefix,
                                        int mib, int util) {
  std::string text;
  for (int i = 0; i < gpus; ++i) {
    text += fmt::format(
        "uuid=GPU-{}-{} name=NVIDIA_H100_80GB_HBM3 util={} mem_used_mib=0 mem_total_mib={} "
        "power_mw=70000 temp=30 mig=0 nvlinks=18 nvlinks_up=18 cc=9.0\n",
        prefix, i, util, mib);
  }
  const std::string path = bed.dir() + "/shared/nvml.txt";
  if (auto ok = slurm::internal::WriteFile(path, text, 0644); !ok) return ok.error();
  return path;
}

std::string TelemetryToml(const std::string& nvml_library, const std::string& node_dir) {
  return fmt::format("[telemetry]\nnvml_library = \"{}\"\ninterval_s = 0.2\n[agent]\nca = \"{}\"\n",
                     nvml_library, node_dir + "/bmas-state/cluster/ca.crt");
}

Result<std::vector<std::string>> BedCluster::AsUnit(const std::string& unit,
                                                    const std::vector<std::string>& args) {
  std::ifstream in(unit);
  if (!in) return NotFound("cannot read the unit file " + unit);
  std::string restart, seconds = "0.1";
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("Restart=")) restart = line.substr(8);
    if (line.starts_with("RestartSec=")) seconds = line.substr(11);
  }
  if (restart != "on-failure" && restart != "always") {
    return InvalidArgument(unit + " has no Restart=on-failure or Restart=always");
  }
  // `wait` returns early when the trapped SIGTERM comes; the second one reaps the child.
  const std::string script = fmt::format(
      "stopping=0; trap 'stopping=1; kill -TERM \"$child\" 2>/dev/null' TERM INT\n"
      "while :; do\n"
      "  \"$@\" & child=$!\n"
      "  wait \"$child\"; rc=$?\n"
      "  if [ \"$stopping\" = 1 ]; then wait \"$child\"; exit 0; fi\n"
      "  case {}:$rc in on-failure:0|on-failure:129|on-failure:130|on-failure:141|"
      "on-failure:143) exit $rc;; esac\n"
      "  echo \"unit {}: its process ended ($rc); starting it again in {} s\"\n"
      "  sleep {}\n"
      "done\n",
      restart, std::filesystem::path(unit).filename().string(), seconds, seconds);
  std::vector<std::string> argv = {"sh", "-c", script, "unit"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

Result<BedCluster::Inference> BedCluster::StartInference(
    const std::vector<std::string>& gateway_flags,
    const std::vector<std::string>& controller_flags, const std::string& gateway_unit) {
  const passwd* service = getpwnam("bmas");
  if (service == nullptr) return NotFound("no `bmas` account: EnsureServiceAccount() first");
  const std::string state = bed_.dir() + "/nodes/" + NetBed::kController + "/bmas-state";
  if (auto r = HandStoreTo(state, service->pw_uid, service->pw_gid); !r) return r.error();
  if (auto r = HandOperatorSecretTo(state, service->pw_uid, service->pw_gid); !r) {
    return r.error();
  }
  auto dir = bed_.Run(NetBed::kController, {"install", "-d", "-m", "0700", "-o", "bmas", "-g",
                                            "bmas", node_ + "/bmas-state/replicas"});
  if (!dir || dir->exit_code != 0) return Internal("cannot make mgs1's replicas directory");
  const std::vector<std::string> as_bmas = {
      "setpriv", "--reuid=bmas", "--regid=bmas", "--clear-groups", student_bmas, "--config",
      inventory_, "--state-dir", node_ + "/bmas-state"};
  const std::vector<std::string> env = {std::string("BMAS_BACKEND_API_KEY=") + kBackendSecret};
  Inference started;
  std::vector<std::string> gateway = as_bmas;
  gateway.insert(gateway.end(),
                 {"gateway", "--host", bed_.hosts().front().address, "--port",
                  std::to_string(kGatewayPort), "--metrics-listen",
                  fmt::format("127.0.0.1:{}", kGatewayPort + 1)});
  gateway.insert(gateway.end(), gateway_flags.begin(), gateway_flags.end());
  if (!gateway_unit.empty()) {
    auto unit = AsUnit(gateway_unit, gateway);
    if (!unit) return unit.error();
    gateway = std::move(*unit);
  }
  auto g = bed_.StartDaemon(NetBed::kController, "gateway", gateway_unit.empty() ? "bmas" : "sh",
                            gateway, env);
  if (!g) return g.error();
  started.gateway = *g;
  if (!WaitFor([&] { return Listening(bed_, NetBed::kController, kGatewayPort + 1); }, g->pid,
               std::chrono::seconds(10))) {
    return Internal("the gateway did not listen:\n" + bed_.LogTail("gateway"));
  }
  std::vector<std::string> controller = as_bmas;
  controller.insert(controller.end(),
                    {"inference", "controller", "--gateway",
                     fmt::format("127.0.0.1:{}", kGatewayPort + 1), "--replica-tls",
                     node_ + "/etc-bmas", "--cancel-on-exit"});
  controller.insert(controller.end(), controller_flags.begin(), controller_flags.end());
  auto c = bed_.StartDaemon(NetBed::kController, "inference controller", "bmas", controller, env);
  if (!c) return c.error();
  started.controller = *c;
  return started;
}

std::string BedCluster::WaitState(const std::string& node, const std::string& state,
                                  std::chrono::seconds timeout) const {
  std::string last;
  const bool ok = WaitFor(
      [&] {
        auto r = bed_.Run(NetBed::kController, {"sinfo", "-h", "-N", "-n", node, "-o", "%N %T"});
        last = r ? r->out : "";
        return last.find(node + " " + state) != std::string::npos;
      },
      0, timeout);
  return ok ? "" : last;
}

}  // namespace bmas::testbed
