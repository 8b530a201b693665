// Slurm on the test bed: its config (bmas's own rendering of an inventory of the bed's hosts,
// in configless mode), fake GPUs, munged in every host, slurmctld in mgs1 and a configless
// slurmd in every node.

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "cluster/controller_files.h"
#include "core/cluster.h"
#include "net_bed.h"
#include "slurm/local_cluster_internal.h"
#include "slurm/slurm_config.h"

namespace bmas::testbed {
namespace {

namespace fs = std::filesystem;

constexpr const char* kGpuType = "h100";
constexpr int kNodeMemoryMib = 1024;  // what each node offers jobs (the host has more)
constexpr const char* kMungeSocket = "/run/munge/munge.socket.2";  // munge's default

// The bed's inventory: mgs1 and its nodes, every path of a node under <dir>/node, where each
// host sees its own directory.
std::string Inventory(const std::string& dir, const std::vector<BedHost>& hosts,
                      const BedOptions& options, const std::string& jwt_key) {
  const std::string node = dir + "/node";
  const int gpus = options.gpus_per_node;
  std::string toml = fmt::format(
      "[cluster]\ncontroller = {{ name = \"{}\", address = \"{}\" }}\n"
      "[cluster.slurm]\ncluster_name = \"netbed\"\nslurm_user = \"root\"\n"
      "state_save_dir = \"{}/state\"\nspool_dir = \"{}/spool\"\nlog_dir = \"{}/log\"\n"
      "run_dir = \"{}/run\"\ntmpfs = \"{}/tmp\"\ngpu_device_dir = \"{}\"\n"
      "cred_expire_s = 10\nkill_wait_s = 5\njwt_key = \"{}\"\n"
      "prolog = \"\"\nepilog = \"\"\ntask_prolog = \"\"\n",
      hosts.front().name, hosts.front().address, node, node, node, node, node, node, jwt_key);
  if (!jwt_key.empty()) toml += fmt::format("slurmrestd = \"{}\"\n", NetBed::kSlurmrestd);
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  for (size_t i = 1; i < hosts.size(); ++i) {
    toml += fmt::format(
        "[[cluster.nodes]]\nnames = \"{}\"\naddress = \"{}\"\ncpus = {}\nmemory_mib = {}\n"
        "[cluster.nodes.gpus]\ncount = {}\ntype = \"{}\"\nmemory_gb = 80\n",
        hosts[i].name, hosts[i].address, cpus, kNodeMemoryMib, gpus, kGpuType);
  }
  toml += "[[cluster.partitions]]\nname = \"batch\"\nnodes = \"ALL\"\ndefault = true\n";
  return toml;
}

}  // namespace

Result<void> NetBed::WriteSlurmConfig() {
  Cluster cluster;
  const std::string inventory =
      Inventory(dir_, hosts_, options_, options_.slurmrestd ? JwtKey() : std::string());
  if (auto r = slurm::internal::WriteFile(InventoryPath(), inventory, 0644); !r) return r;
  try {
    cluster = ParseCluster(inventory, "netbed.toml");
  } catch (const std::exception& e) {
    return Internal(std::string("the test bed's inventory: ") + e.what());
  }
  // Job ids of their own: the bed's nodes share this host's cgroup tree with any local cluster
  // and any other bed (their nodes are called oss01... too), and cgroup paths name the node and
  // the job. A block of 10000 from the bed's hash, above the local clusters' blocks (below
  // 8000001) and below Slurm's MaxJobId (67043328).
  const unsigned long hash = std::stoul(dir_.substr(dir_.size() - 8), nullptr, 16);
  cluster.slurm.first_job_id = 60000001 + static_cast<int64_t>(hash % 600) * 10000;
  std::map<std::string, std::string> files;
  for (auto& [name, text] : slurm::RenderSlurmConfig(cluster)) files[name] = text;
  // Configless, as `bmas cluster init` writes it; with dynamic nodes, slurm.conf lists none and
  // the partition takes whichever register (slurmd -Z).
  files["slurm.conf"] = cluster::ConfiglessSlurmConf(cluster, options_.dynamic_nodes);
  // A short SlurmdTimeout, for tests that cut a node's link (bmas writes Slurm's 300 s).
  std::string& conf = files["slurm.conf"];
  const size_t at = conf.find("SlurmdTimeout=");
  if (at == std::string::npos) return Internal("bmas's slurm.conf has no SlurmdTimeout= line");
  conf.replace(at, conf.find('\n', at) - at,
               fmt::format("SlurmdTimeout={}", options_.slurmd_timeout_s));
  const std::string etc = dir_ + "/nodes/" + kController + "/etc-slurm";
  for (const auto& [name, text] : files) {
    if (auto r = slurm::internal::WriteFile(etc + "/" + name, text, 0644); !r) return r;
  }
  return MakeFakeGpus(cluster);
}

Result<void> NetBed::MakeFakeGpus(const Cluster& inventory) {
  // The local cluster's, one directory per node (<dir>/nodes/<node>/nvidiaN), which each node
  // sees at <dir>/node/nvidiaN.
  Cluster devices = inventory;
  devices.slurm.local = true;
  devices.slurm.gpu_device_dir = dir_ + "/nodes";
  return slurm::internal::MakeFakeGpus(devices, dir_ + "/nodes");
}

Result<void> NetBed::StartSlurm(std::chrono::seconds timeout) {
  if (std::string why = slurm::LocalClusterPrerequisites(); !why.empty()) {
    return Error{ErrorCode::kUnavailable, why};
  }
  auto munge = slurm::internal::LookUp("munge");
  if (!munge) return munge.error();
  const std::string key = dir_ + "/etc/munge.key";
  if (auto r = slurm::internal::MakeKey(key, 1024, munge->uid, munge->gid); !r) return r;
  if (options_.slurmrestd) {
    if (auto r = slurm::internal::MakeKey(JwtKey(), 32, 0, 0); !r) return r;
  }
  if (auto r = WriteSlurmConfig(); !r) return r;

  // One munged per host, on munge's default socket in the host's own /run: slurmd must reach
  // it before it has a slurm.conf to say otherwise.
  for (const BedHost& h : hosts_) {
    const std::string run = "/run/munge";
    if (auto r =
            InHost(h, "--mount", {"install", "-d", "-m", "755", "-o", "munge", "-g", "munge", run});
        !r) {
      return r;
    }
    auto d = StartDaemon(h.name, "munged " + h.name, "munged",
                         slurm::internal::MungedCommand(*munge, kMungeSocket, key, run));
    if (!d) return d.error();
    const std::string socket = fmt::format("/proc/{}/root{}", h.holder.pid, kMungeSocket);
    if (!WaitFor([&] { return fs::exists(socket); }, d->pid, std::chrono::seconds(10))) {
      return Internal(fmt::format("munged in {} did not create {}:\n{}", h.name, kMungeSocket,
                                  LogTail(d->name)));
    }
  }

  auto ctld = StartDaemon(kController, "slurmctld", "slurmctld", {"/usr/sbin/slurmctld", "-D"});
  if (!ctld) return ctld.error();
  const std::string ctld_log = dir_ + "/nodes/" + kController + "/log/slurmctld.log";
  if (!WaitFor(
          [&] {
            auto ping = Run(kController, {"scontrol", "ping"}, "", std::chrono::seconds(5));
            return ping && ping->exit_code == 0 && ping->out.find("is UP") != std::string::npos;
          },
          ctld->pid, std::chrono::seconds(15))) {
    return Internal(fmt::format("slurmctld in {} did not answer `scontrol ping`; {} says:\n{}",
                                kController, ctld_log, LogTail(ctld->name)));
  }

  if (options_.slurmrestd) {
    // As in a real controller: slurmrestd as an unprivileged account, on loopback only.
    auto rest = StartDaemon(
        kController, "slurmrestd", "slurmrestd",
        {"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/sbin/slurmrestd",
         "-a", "rest_auth/jwt", "-s", "openapi/v0.0.38", kSlurmrestd},
        {"SLURM_JWT=daemon", "SLURM_CONF=/etc/slurm/slurm.conf"});
    if (!rest) return rest.error();
  }

  for (const std::string& node : NodeNames()) {
    std::vector<std::string> args = {"/usr/sbin/slurmd", "-D", "--conf-server", kController};
    if (options_.dynamic_nodes) {
      args.insert(args.end(), {"-Z", "--conf",
                               fmt::format("CPUs={} RealMemory={} Gres=gpu:{}:{}",
                                           sysconf(_SC_NPROCESSORS_ONLN), kNodeMemoryMib, kGpuType,
                                           options_.gpus_per_node)});
    }
    if (auto d = StartDaemon(node, "slurmd " + node, "slurmd", args); !d) return d.error();
  }

  std::string last;
  const bool idle = WaitFor(
      [&] {
        auto r =
            Run(kController, {"sinfo", "-h", "-N", "-o", "%N %T"}, "", std::chrono::seconds(5));
        if (!r || r->exit_code != 0) return false;
        std::map<std::string, std::string> state;
        std::istringstream lines(r->out);
        for (std::string node, s; lines >> node >> s;) state[node] = s;
        last.clear();
        bool all = true;
        for (const std::string& node : NodeNames()) {
          const std::string s = state.contains(node) ? state[node] : "missing";
          last += fmt::format("{}{} {}", last.empty() ? "" : ", ", node, s);
          all = all && s == "idle";
        }
        return all;
      },
      0, timeout);
  if (!idle) {
    std::string tails;
    for (const std::string& node : NodeNames()) {
      tails += fmt::format("slurmd {}:\n{}", node, LogTail("slurmd " + node, 8));
    }
    return Error{ErrorCode::kUnavailable,
                 fmt::format("the bed's nodes were not all idle within {} s ({}); the slurmd "
                             "logs end with:\n{}",
                             timeout.count(), last, tails)};
  }
  return {};
}

std::string NetBed::NodeState(const std::string& node) const {
  auto r = Run(kController, {"sinfo", "-h", "-N", "-n", node, "-o", "%T"}, "",
               std::chrono::seconds(10));
  if (!r || r->exit_code != 0) return "";
  std::string state = r->out.substr(0, r->out.find('\n'));
  return state;
}

Result<std::string> NetBed::Submit(const std::vector<std::string>& args,
                                   const std::string& user) const {
  std::vector<std::string> argv = {"sbatch", "--parsable"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = Run(kController, argv, user, std::chrono::seconds(30));
  if (!r) return r.error();
  if (r->exit_code != 0) {
    return Internal(fmt::format("sbatch in {} failed ({}): {}", kController, r->exit_code,
                                r->err + r->out));
  }
  std::string id = r->out.substr(0, r->out.find_first_of(";\n"));
  return id;
}

std::map<std::string, std::string> NetBed::Job(const std::string& id) const {
  std::map<std::string, std::string> fields;
  auto r = Run(kController, {"scontrol", "show", "job", "-o", id}, "", std::chrono::seconds(10));
  if (!r || r->exit_code != 0) return fields;
  std::istringstream words(r->out);
  for (std::string word; words >> word;) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) fields.emplace(word.substr(0, eq), word.substr(eq + 1));
  }
  return fields;
}

}  // namespace bmas::testbed
