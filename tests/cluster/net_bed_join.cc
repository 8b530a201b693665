// A cluster brought up on the test bed with `bmas cluster init` and `bmas node join`.

#include "net_bed_join.h"

#include <fmt/format.h>
#include <unistd.h>

#include <utility>

#include "slurm/local_cluster_internal.h"

namespace bmas::testbed {
namespace {

constexpr const char* kMungeSocket = "/run/munge/munge.socket.2";

}  // namespace

BedJoin::BedJoin(NetBed& bed, JoinOptions options)
    : bed_(bed),
      options_(std::move(options)),
      node_(bed.dir() + "/node"),
      inventory_(bed.dir() + "/inventory.toml") {}

Result<void> BedJoin::WriteInventory() {
  const auto& hosts = bed_.hosts();
  std::string toml = fmt::format(
      "[cluster]\ncontroller = {{ name = \"{}\", address = \"{}\" }}\n"
      "[cluster.slurm]\ncluster_name = \"joinbed\"\nslurm_user = \"root\"\n"
      "state_save_dir = \"{n}/state\"\nspool_dir = \"{n}/spool\"\nlog_dir = \"{n}/log\"\n"
      "run_dir = \"{n}/run\"\ntmpfs = \"{n}/tmp\"\ngpu_device_dir = \"{n}\"\n"
      "cred_expire_s = 10\nkill_wait_s = 5\n"
      "prolog = \"{n}/hooks/prolog\"\nepilog = \"{n}/hooks/epilog\"\ntask_prolog = \"\"\n",
      hosts.front().name, hosts.front().address, fmt::arg("n", node_));
  for (size_t i = 1; i < hosts.size(); ++i) {
    toml += fmt::format(
        "[[cluster.nodes]]\nnames = \"{}\"\naddress = \"{}\"\ncpus = {}\n"
        "memory_mib = 1024\n",
        hosts[i].name, hosts[i].address, sysconf(_SC_NPROCESSORS_ONLN));
    if (options_.gpus_per_node > 0) {
      toml += fmt::format("[cluster.nodes.gpus]\ncount = {}\ntype = \"h100\"\nmemory_gb = 80\n",
                          options_.gpus_per_node);
    }
  }
  toml += "[[cluster.partitions]]\nname = \"batch\"\nnodes = \"ALL\"\ndefault = true\n";
  if (auto r = slurm::internal::WriteFile(inventory_, toml, 0644); !r) return r;
  if (options_.gpus_per_node == 0) return {};
  try {
    return bed_.MakeFakeGpus(ParseCluster(toml, inventory_));
  } catch (const std::exception& e) {
    return Internal(fmt::format("the bed's inventory {}: {}", inventory_, e.what()));
  }
}

Result<CommandOutput> BedJoin::Bmas(const std::string& host, std::vector<std::string> args,
                                    const std::string& user) const {
  args.insert(args.begin(), {options_.bmas, "--state-dir", node_ + "/bmas-state"});
  return bed_.Run(host, args, user, std::chrono::seconds(90));
}

std::string BedJoin::Token(const std::string& init_output) {
  const std::string prefix = "bmas node join ";
  const size_t at = init_output.find(prefix);
  if (at == std::string::npos) return "";
  const std::string token = init_output.substr(at + prefix.size());
  return token.substr(0, token.find('\n'));
}

Result<CommandOutput> BedJoin::InitController() {
  std::vector<std::string> args = {
      "cluster",    "init",        "--cluster",          inventory_,  "--slurm-dir",
      "/etc/slurm", "--munge-key", node_ + "/munge.key", "--jwt-key", node_ + "/jwt.key"};
  if (options_.dynamic) args.push_back("--dynamic-nodes");
  auto init = Bmas(NetBed::kController, args);
  if (!init) return init.error();
  if (init->exit_code != 0) {
    return Internal(fmt::format("`bmas cluster init` in mgs1 failed ({}): {}", init->exit_code,
                                init->err + init->out));
  }
  auto munge = slurm::internal::LookUp("munge");
  if (!munge) return munge.error();
  auto mk = bed_.Run(NetBed::kController,
                     {"install", "-d", "-m", "755", "-o", "munge", "-g", "munge", "/run/munge"});
  if (!mk) return mk.error();
  auto munged = bed_.StartDaemon(
      NetBed::kController, "munged mgs1", "munged",
      slurm::internal::MungedCommand(*munge, kMungeSocket, node_ + "/munge.key", "/run/munge"));
  if (!munged) return munged.error();
  auto ctld =
      bed_.StartDaemon(NetBed::kController, "slurmctld", "slurmctld", {"/usr/sbin/slurmctld", "-D"});
  if (!ctld) return ctld.error();
  std::string pinged;
  if (!WaitFor(
          [&] {
            auto ping = bed_.Run(NetBed::kController, {"scontrol", "ping"}, "",
                                 std::chrono::seconds(5));
            pinged = ping ? ping->out + ping->err : ping.error().message;
            return ping && ping->out.find("is UP") != std::string::npos;
          },
          ctld->pid, std::chrono::seconds(20))) {
    return Internal(fmt::format("slurmctld in mgs1 did not answer `scontrol ping` ({}):\n{}{}",
                                pinged, bed_.LogTail("slurmctld"), bed_.LogTail("munged mgs1")));
  }
  return init;
}

Result<void> BedJoin::StartJoinService() {
  auto serve = bed_.StartDaemon(NetBed::kController, "join service", "bmas",
                                {options_.bmas, "--state-dir", node_ + "/bmas-state", "cluster",
                                 "serve", "--cluster", inventory_, "--munge-key",
                                 node_ + "/munge.key"});
  if (!serve) return serve.error();
  if (!WaitFor(
          [&] {
            auto ss = bed_.Run(NetBed::kController, {"ss", "-Hltn", "sport = :6830"});
            return ss && ss->out.find("6830") != std::string::npos;
          },
          serve->pid, std::chrono::seconds(10))) {
    return Internal("`bmas cluster serve` in mgs1 did not listen on port 6830:\n" +
                    bed_.LogTail("join service"));
  }
  return {};
}

Result<CommandOutput> BedJoin::Join(const std::string& host, const std::string& token) const {
  std::vector<std::string> args = {
      "node", "join", token, "--config-dir", node_ + "/etc-bmas", "--munge-key",
      node_ + "/munge.key"};
  if (options_.dynamic) args.push_back("--dynamic");
  return Bmas(host, args);
}

std::string BedJoin::WaitIdle(const std::string& node, std::chrono::seconds timeout) const {
  std::string last;
  const bool idle = WaitFor(
      [&] {
        auto r = bed_.Run(NetBed::kController, {"sinfo", "-h", "-N", "-o", "%N %T"});
        last = r ? r->out : "";
        return last.find(node + " idle") != std::string::npos;
      },
      0, timeout);
  return idle ? "" : last;
}

}  // namespace bmas::testbed
