#pragma once

// A multi-host test bed on one machine (docs/cluster-testbed.md): one private network
// namespace (the bed), and in it a bridge and one namespace per host (the controller `mgs1`
// and the nodes oss01, oss02, ...), each with its own network (an address on the bridge), host
// name and mount namespace. In a host's mount namespace the bed's per-host directory is
// bind-mounted over <dir>/node (spool, logs, tmp, fake GPUs), its own directory over
// /etc/slurm, and a tmpfs over /run (munge's socket); /etc/hosts names every host. Nothing
// reaches outside the bed: it has no route and no link to this host's network.
//
// StartSlurm runs munged in every host (one shared key), slurmctld in mgs1 in configless mode,
// and in each node `slurmd --conf-server mgs1` (a dynamic node, `-Z`, when asked), with fake
// GPUs. Stop (and the destructor) ends every process in the bed's namespaces, which takes
// their mounts with them, and removes the bed's directory. What was started is recorded in
// <dir>/bed.json, so that a bed left by a killed run is cleaned up by the next Start.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/daemon_process.h"
#include "common/process.h"
#include "common/result.h"
#include "core/cluster.h"

namespace bmas::testbed {

struct BedOptions {
  // With the current directory, names the bed's directory, /tmp/bmas-netbed-<hash>: two
  // checkouts (or two tests) running beds side by side never share one.
  std::string name = "netbed";
  int nodes = 3;  // oss01 .. ossNN, at 10.200.0.11, .12, ...
  int gpus_per_node = 4;
  // Nodes not in slurm.conf that register themselves: `slurmd -Z --conf ...` (Slurm's dynamic
  // nodes; MaxNodeCount in slurm.conf).
  bool dynamic_nodes = false;
  // slurm.conf's SlurmdTimeout: how long a node may be silent before slurmctld marks it DOWN.
  // Short on the bed, so that a test that cuts a node's link sees it go down in seconds.
  int slurmd_timeout_s = 300;
  // Slurm's REST API in mgs1: slurmctld takes JWTs signed with <dir>/etc/jwt.key, and
  // slurmrestd serves as `nobody` on mgs1's loopback, 127.0.0.1:6820, where root's bmas in mgs1
  // reaches it (`bmas node list`).
  bool slurmrestd = false;
};

// Which end of a host's link CutLink takes down: its veth on the bed's bridge (a cable pulled
// at the switch), or the host's own eth0 (its interface down).
enum class LinkEnd { kBridge, kHost };

struct BedHost {
  std::string name;      // "mgs1", "oss01", ...
  std::string address;   // on the bed's bridge: 10.200.0.1, 10.200.0.11, ...
  std::string bridge_link;  // its veth's end on the bridge, in the bed: vb0, vb1, ...
  DaemonProcess holder;  // `sleep infinity` holding the host's namespaces
};

class NetBed {
 public:
  // The bridge's network and the controller's address.
  static constexpr const char* kSubnet = "10.200.0.0/24";
  static constexpr const char* kController = "mgs1";

  NetBed() = default;
  NetBed(const NetBed&) = delete;
  NetBed& operator=(const NetBed&) = delete;
  ~NetBed() { Stop(); }

  // Cleans up a bed a killed run left in the same directory, then builds the namespaces,
  // bridge, addresses, host names and mounts. Needs root, `ip` (iproute2), unshare and nsenter.
  Result<void> Start(const BedOptions& options);

  // munged in every host, slurmctld in mgs1 (configless), slurmd in every node; waits up to
  // `timeout` until every node is idle. Needs Slurm's and munge's packages.
  Result<void> StartSlurm(std::chrono::seconds timeout = std::chrono::seconds(30));

  // LXD in a node (docs/cluster-testbed.md, "LXD in each node"). The [lxd] table of a bmas.toml
  // that gives each node an LXD of its own: LXD_DIR <dir>/node/lxd (each host sees its own
  // there), a small btrfs pool in it, its API on port 8443 of the node's address, and
  // `node_dir` (where `bmas node join` leaves the node's certificates). Every node can share
  // one such table, as they share one bmas.toml on a real cluster.
  std::string LxdToml(const std::string& node_dir) const;
  // LXD_DIR as host sees it.
  std::string LxdDir() const { return dir_ + "/node/lxd"; }
  // Runs `bmas --config CONFIG --state-dir <dir>/node/bmas-state lxd up` in `host` (`bmas` is
  // the binary), for tests that start LXD without `bmas node join`. Stop stops every instance
  // of each node's LXD before it ends the bed's processes (an instance's processes live in
  // namespaces of their own, which the bed's kill would not reach).
  Result<CommandOutput> StartLxd(const std::string& host, const std::string& bmas,
                                 const std::string& config) const;
  // Takes host `host` off the bed's network at `end` (its processes run on, and reach nothing
  // beyond the host), and puts it back. Cutting a cut link, or restoring a whole one, is a no-op.
  Result<void> CutLink(const std::string& host, LinkEnd end = LinkEnd::kBridge);
  Result<void> RestoreLink(const std::string& host, LinkEnd end = LinkEnd::kBridge);

  // The REST address of the bed's slurmrestd in mgs1 and the JWT key it takes (with
  // BedOptions::slurmrestd).
  static constexpr const char* kSlurmrestd = "127.0.0.1:6820";
  std::string JwtKey() const { return dir_ + "/etc/jwt.key"; }
  // The bed's inventory (StartSlurm writes it), which bmas in mgs1 takes as its --config: with
  // BedOptions::slurmrestd it names the bed's slurmrestd and JWT key.
  std::string InventoryPath() const { return dir_ + "/etc/inventory.toml"; }

  // Fake GPUs for the nodes of `inventory` (character devices, major 195): each node sees its
  // own at <dir>/node/nvidiaN, which an inventory's gpu_device_dir = "<dir>/node" names.
  Result<void> MakeFakeGpus(const Cluster& inventory);

  // Slurm's view from mgs1, for tests and benchmarks. The node's state as sinfo prints it
  // ("idle", "down*", "alloc"); "" when sinfo fails or has no such node.
  std::string NodeState(const std::string& node) const;
  // `sbatch --parsable ARGS` in mgs1 as `user` (root when ""); the job's id.
  Result<std::string> Submit(const std::vector<std::string>& args,
                             const std::string& user = "") const;
  // `scontrol show job -o ID` in mgs1 as fields: JobState, NodeList, Restarts, ...; empty when
  // Slurm does not know it.
  std::map<std::string, std::string> Job(const std::string& id) const;

  // Runs `args` in host `host`'s namespaces (network, mount, UTS), in /tmp, as `user` when
  // given (its groups too) or root.
  Result<CommandOutput> Run(const std::string& host, const std::vector<std::string>& args,
                            const std::string& user = "",
                            std::chrono::seconds timeout = std::chrono::seconds(30)) const;

  // Starts `args` detached in host `host`'s namespaces, recorded as a daemon of the bed (so
  // that Stop ends it); `comm` is its process name once it runs. Its output goes to
  // <dir>/log/<name>.out.
  Result<DaemonProcess> StartDaemon(const std::string& host, const std::string& name,
                                    const std::string& comm, const std::vector<std::string>& args,
                                    const std::vector<std::string>& env = {});

  // Ends every process in the bed's namespaces (daemons with SIGTERM first, in reverse start
  // order, then SIGKILL to whatever is left: job steps, holders), then removes the bed's
  // directory. Idempotent; what it could not end is in Leftovers().
  void Stop();

  // What of the bed is left: processes in its namespaces (after Stop: those it found there
  // last, while it still held them), mounts in this namespace under its directory, the
  // directory itself. Empty after a clean Stop.
  std::vector<std::string> Leftovers() const;

  const std::string& dir() const { return dir_; }
  const std::vector<BedHost>& hosts() const { return hosts_; }  // mgs1 first, then the nodes
  std::vector<std::string> NodeNames() const;
  const BedHost* Host(const std::string& name) const;
  // The namespaces of the bed ("net:[4026532178]" ...), as /proc/PID/ns/net reads them.
  const std::vector<std::string>& namespaces() const { return namespaces_; }
  // The end of the log of the daemon called `name` (its output file), for failure messages.
  std::string LogTail(const std::string& name, size_t lines = 20) const;

 private:
  Result<void> MakeHost(const std::string& name, const std::string& address, int index);
  Result<void> InRoot(const std::vector<std::string>& args) const;
  Result<void> InHost(const BedHost& h, const std::string& ns,
                      const std::vector<std::string>& args) const;
  Result<void> WriteSlurmConfig();
  // Stops every instance of each node's LXD; what it could not stop.
  std::vector<std::string> StopLxdInstances() const;
  Result<void> SetLink(const std::string& host, LinkEnd end, bool up);
  Result<void> Save() const;

  BedOptions options_;
  std::string dir_;
  DaemonProcess root_;  // `sleep infinity` holding the bed's network and mount namespaces
  std::vector<BedHost> hosts_;
  std::vector<DaemonProcess> daemons_;  // in start order
  std::vector<std::string> namespaces_;
  bool stopped_ = false;
  std::vector<std::string> left_;  // what Stop could not end or remove
};

// Ends what a bed recorded in `dir`/bed.json left running (processes in the namespaces of the
// recorded processes that still run) and removes `dir`. What could not be ended comes back.
std::vector<std::string> CleanBed(const std::string& dir);

}  // namespace bmas::testbed
