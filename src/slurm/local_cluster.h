#pragma once

// A real Slurm cluster on this one machine, for development, tests and demos: munged,
// slurmctld, one slurmd per inventory node (each in its own UTS namespace, so jobs see their
// node's host name) and slurmrestd with JWT, all under <state_dir>/slurm, with fake GPU
// character devices under /dev/bmas-<id>/<node>/. Ports come from the state dir's path, so
// two state dirs give two clusters that never collide. The daemons run detached; what was
// started is recorded in <state_dir>/slurm/local.json, and StopLocalCluster stops exactly that.

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/daemon_process.h"
#include "common/result.h"
#include "core/cluster.h"

namespace bmas::slurm {

struct LocalCluster {
  std::string state_dir;
  std::string inventory;   // the inventory file it runs; "" = BuiltinLocalCluster()
  std::string root;        // <state_dir>/slurm
  std::string id;          // 8 hex digits derived from the state dir's path
  std::string conf;        // <root>/etc/slurm.conf: SLURM_CONF for Slurm's own commands
  std::string device_dir;  // /dev/bmas-<id>
  std::string jwt_key;     // HS256 key slurmctld checks slurmrestd's tokens with
  int slurmctld_port = 0;
  int rest_port = 0;
  std::vector<std::string> nodes;    // those whose slurmd runs
  // Layout nodes of GPUs whose layout follows demand that are not active: in Slurm's config,
  // DOWN, no slurmd (core/cluster.h's FlexibleGpus).
  std::vector<std::string> standby;
  int gpus_per_node = 0;
  bool accounting = false;  // slurmdbd (and MariaDB) run too; slurmrestd serves dbv0.0.38
  std::vector<DaemonProcess> daemons;  // in start order
  // Set by StartLocalCluster when the cluster was up but some daemons had died: the names of
  // those it started again (the others ran on, with their jobs).
  std::vector<std::string> restarted;

  std::string rest_url() const { return "http://127.0.0.1:" + std::to_string(rest_port); }
};

// The inventory `bmas slurm up` runs when given none (examples/cluster-local.toml).
Cluster BuiltinLocalCluster();

// 8 hex digits of a hash of the state dir's absolute path.
std::string LocalClusterId(const std::string& state_dir);

// `inventory` rewritten to run on this host under `root`: loopback addresses, the given
// ports (slurmctld at base_port, node i's slurmd at base_port + 1 + i), paths under root,
// devices under device_dir.
Cluster Localize(Cluster inventory, const std::string& root, const std::string& device_dir,
                 int base_port);

// Starts the cluster and waits (up to `timeout`) until every node is idle. Needs root and
// Slurm's packages; says which are missing and how to install them.
// `inventory_file` ("" for the built-in one) is recorded for `bmas run`.
Result<LocalCluster> StartLocalCluster(const Cluster& inventory, const std::string& inventory_file,
                                       const std::string& state_dir, std::chrono::seconds timeout);

// What local.json records, or NotFound when no local cluster was started in `state_dir`.
Result<LocalCluster> ReadLocalCluster(const std::string& state_dir);

// Cancels the cluster's jobs, stops its daemons (last started first) and removes its devices.
Result<void> StopLocalCluster(const std::string& state_dir);

// The local cluster of `state_dir` when its slurmctld runs (DaemonProcess::Runs); NotFound when none was
// started there or it no longer runs (after a reboot, say).
Result<LocalCluster> RunningLocalCluster(const std::string& state_dir);

// Node name -> Slurm's state for it ("idle", "mixed", "down*", ...), from sinfo.
Result<std::vector<std::pair<std::string, std::string>>> NodeStates(const LocalCluster& c);

// Gives GPU `group` of the local cluster in `state_dir` ("oss01-gpu3") the layout `layout`
// (empty = whole), one of its layouts (core/cluster.h's FlexibleGpus), while every other node's
// jobs run on: its active layout node is drained so that nothing starts there, checked for jobs,
// its slurmd stopped and the node marked DOWN (standby); the layout's node's slurmd starts, and
// once slurmctld has it idle and responding, its slices (or whole GPU) are schedulable. The
// layout is saved in <root>/etc/gpu-layouts. AlreadyExists (a conflict), changing nothing, when a
// job holds the GPU. What each step took comes back.
struct RelayoutSteps {
  double check_s = 0;     // drained and checked for jobs
  double nvml_s = 0;      // the layout applied through NVML (0 without it)
  double stop_s = 0;      // the old layout's slurmd stopped, its node DOWN
  double start_s = 0;     // the new layout's slurmd started
  double register_s = 0;  // until slurmctld has the new node idle and responding
  double total_s = 0;     // from the call: slices (or the whole GPU) schedulable
};
// With `nvml_library`, the layout is applied to the GPU through that NVML (gpu/mig_apply.h)
// after the check and before the slurmds switch; a refusal there (a process on the GPU) resumes
// the old layout's node and changes nothing. "" skips it: the local cluster's GPUs are device
// files.
Result<RelayoutSteps> RelayoutLocalGpu(const std::string& state_dir, const std::string& group,
                                       const std::vector<std::string>& layout,
                                       std::chrono::seconds timeout,
                                       const std::string& nvml_library = "");

// Why a local cluster cannot start here ("" when it can): not root, or packages missing.
std::string LocalClusterPrerequisites();

}  // namespace bmas::slurm
