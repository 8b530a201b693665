#pragma once

// A cluster on the test bed set up as an admin sets up a real one (README "Deploying on a real
// cluster"): the inventory of the bed's hosts, `bmas cluster init` in mgs1, the daemons the
// controller's system runs there (munged, slurmctld, and slurmrestd when asked), the join
// service, and `bmas node join` in a node. Every path of a host is under <dir>/node, which each
// host sees as its own. Each step returns an error naming what failed, with the daemon's log.

#include <chrono>
#include <string>
#include <vector>

#include "common/process.h"
#include "common/result.h"
#include "net_bed.h"

namespace bmas::testbed {

struct BedClusterOptions {
  std::string cluster_name = "bedcluster";
  std::string partition = "batch";  // the one partition, of every node, the default
  int gpus_per_node = 0;            // fake H100s per node, in the inventory's gres
  // slurmrestd on mgs1's loopback at this port (the inventory names it), as nobody with JWT
  // auth; 0 = none.
  int slurmrestd_port = 0;
  std::string extra_toml;  // appended to the inventory ([telemetry], [agent], ...)
};

// Why a cluster on the bed cannot run here, for GTEST_SKIP: not root, no $BMAS_BINARY, or no
// Slurm; "" when it can, with `*bmas` set to $BMAS_BINARY.
std::string BedClusterSkipReason(std::string* bmas);

// The fake NVML's values for `gpus` idle H100s of `mib` MiB, named GPU-<prefix>-N, at
// <bed>/shared/nvml.txt (every user may read it): a node's agent reads them with
// BMAS_FAKE_NVML=<path>. Returns the path.
Result<std::string> WriteFakeNvmlValues(const NetBed& bed, int gpus, const std::string& prefix,
                                        int mib = 81559, int util = 0);

// Inventory text: the partitions of the inference controller's replicas (examples/
// cluster-12x4.toml's), and the agents' telemetry from `nvml_library` checked against
// <node_dir>/bmas-state/cluster/ca.crt.
inline constexpr const char* kInferencePartitionsToml =
    "[[cluster.partitions]]\nname = \"inference\"\nnodes = \"ALL\"\n"
    "[[cluster.partitions]]\nname = \"inference_floor\"\nnodes = \"ALL\"\n";
std::string TelemetryToml(const std::string& nvml_library, const std::string& node_dir);

class BedCluster {
 public:
  BedCluster(NetBed& bed, std::string bmas) : bed_(bed), bmas_(std::move(bmas)) {}

  // Writes the inventory to <bed>/shared/cluster.toml (every user may read it) and returns its
  // path.
  std::string WriteInventory(const BedClusterOptions& options);

  // `bmas --state-dir <node>/bmas-state ARGS...` in `host`, as root or `user` (who runs
  // `student_bmas`, a copy every user can run, when given), with `env` ("NAME=value") first.
  Result<CommandOutput> Bmas(const std::string& host, const std::vector<std::string>& args,
                             const std::string& user = "",
                             const std::vector<std::string>& env = {}) const;

  // `bmas cluster init` in mgs1 with the inventory (munge and JWT keys under <node>); returns
  // its output, whose last line carries the join token (Token()).
  Result<CommandOutput> Init(bool dynamic_nodes = false);
  static std::string Token(const CommandOutput& init);

  // munged, slurmctld (answering `scontrol ping`), slurmrestd when the inventory has one, then
  // the join service on port 6830 unless told not to.
  Result<void> StartControllerDaemons(bool join_service = true);
  Result<void> StartJoinService();

  // `bmas node join TOKEN` in `host` (its files under <node>), with `env` for the daemons it
  // starts.
  Result<CommandOutput> Join(const std::string& host, const std::string& token,
                             bool dynamic = false, const std::vector<std::string>& env = {});

  // The `bmas` service account, made as the package's postinst makes it when absent (the bed's
  // hosts share /etc/passwd). Before the joins: a join gives it the node's replica key.
  static Result<void> EnsureServiceAccount();

  // mgs1's gateway (users on 10.200.0.1:kGatewayPort, operators on 127.0.0.1:kGatewayPort + 1)
  // and inference controller, as their systemd units run them: as the `bmas` account, with
  // mgs1's store and operator secret handed to it as `bmas up` hands them, a backend secret
  // shared by both, and the controller's replicas serving TLS with each node's replica
  // certificate (--replica-tls <node>/etc-bmas). `gateway_flags` and `controller_flags` are
  // added to each command.
  struct Inference {
    DaemonProcess gateway;
    DaemonProcess controller;
  };
  static constexpr int kGatewayPort = 8000;
  // With `gateway_unit`, the gateway runs under AsUnit with that unit file's restart policy.
  Result<Inference> StartInference(const std::vector<std::string>& gateway_flags = {},
                                   const std::vector<std::string>& controller_flags = {},
                                   const std::string& gateway_unit = "");

  // `args` under a shell that does what systemd does with `unit` (a .service file of
  // packaging/systemd/) when its process ends: with Restart=on-failure it starts it again after
  // RestartSec unless it exited 0 or of SIGHUP, SIGINT, SIGTERM or SIGPIPE; with Restart=always,
  // whatever the end. SIGTERM to the shell stops the process and the shell (`systemctl stop`).
  // The process is the shell's child: `pgrep -P SHELL`. Errors name a unit without Restart=.
  static Result<std::vector<std::string>> AsUnit(const std::string& unit,
                                                 const std::vector<std::string>& args);

  // "" once `node` is in Slurm state `state` (sinfo in mgs1), else sinfo's last answer.
  std::string WaitState(const std::string& node, const std::string& state,
                        std::chrono::seconds timeout = std::chrono::seconds(30)) const;

  const std::string& node_dir() const { return node_; }
  const std::string& inventory() const { return inventory_; }
  std::string student_bmas;  // set by WriteInventory: a copy of bmas every user can run

 private:
  Result<void> StartMungeAndSlurmctld();

  NetBed& bed_;
  std::string bmas_;
  std::string node_;
  std::string inventory_;
  BedClusterOptions options_;
};

}  // namespace bmas::testbed
