#pragma once

// The cluster inventory: the machines bmas runs on, read from the [cluster] table of a TOML
// file. examples/cluster-12x4.toml documents every key. Slurm's config, job shapes and the
// NCCL environment all derive from it, so it is checked hard when read.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bmas {

class ConfigTable;

enum class Fabric { kEthernet, kRoce, kInfiniband };

// One network interface of a node.
struct Nic {
  std::string name;  // interface name, e.g. "ens1f0np0" (NCCL_SOCKET_IFNAME)
  Fabric fabric = Fabric::kEthernet;
  int speed_gbps = 0;
  std::string hca;     // RDMA device, e.g. "mlx5_0" (NCCL_IB_HCA); "" on plain Ethernet
  int gid_index = -1;  // RoCE GID index (NCCL_IB_GID_INDEX); -1 = NCCL's default
};

// `count` NVLinks between GPUs `a` and `b` of one node (indices from 0).
struct GpuLink {
  int a = 0;
  int b = 0;
  int count = 0;
  int line = 0;  // where it was declared, for errors
};

// GPUs of one node split into MIG instances: each of `gpus` holds `profiles` (core/mig.h
// checks them against the model's tables).
struct MigLayout {
  std::vector<int> gpus;              // indices from 0
  std::vector<std::string> profiles;  // e.g. {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}
  int line = 0;
};

// GPUs of one node shared by several jobs at once, as Slurm's `shard` gres: each of `gpus` is
// `shards` shards, and a job takes some of one GPU's. Nothing fences a shard's memory or
// compute (Slurm's shards, like MPS without limits, only count), so this is for GPUs without
// MIG, or for light work on ones with it. Slurm lists such a GPU as a gpu of a type of its own
// (SharedGpuType), so that whole-GPU jobs, which ask for the node's type, never land on it
// (docs/slurm-shards.md).
struct SharedGpus {
  std::vector<int> gpus;  // indices from 0
  int shards = 0;         // per GPU
  int line = 0;
};

// GPUs of one node whose MIG layout follows demand (core/mig_relayout.h). Each of `gpus` becomes
// a group of Slurm nodes, one per layout: "<node>-gpu<N>-<k>" holds the GPU in layouts[k]. Only
// the group's active node runs a slurmd; the others are DOWN ("standby"), so Slurm accepts jobs
// for any of the layouts' profiles and they wait until the policy makes a layout active.
// Changing a layout stops one slurmd and starts another: no other node's gres, indexes or jobs
// are touched, and slurmctld never restarts (docs/mig-relayout-slurm.md). They must be the
// node's last GPUs. The first layout is the one it starts in; an empty layout ("whole" in the
// file) is the whole GPU, MIG off; at most 8 layouts.
struct FlexibleGpus {
  std::vector<int> gpus;
  std::vector<std::vector<std::string>> layouts;
  int line = 0;
};

// The GPUs of one node; all of one type.
struct GpuSpec {
  int count = 0;
  std::string type;  // Slurm's GRES type, e.g. "h100"
  int memory_gb = 0;
  bool mig = false;  // the GPUs can be split into MIG instances
  std::vector<GpuLink> nvlinks;
  std::vector<MigLayout> mig_layouts;  // GPUs in none of them stay whole
  std::vector<SharedGpus> shared;      // GPUs shared as shards (in no MIG layout)
  // As read; ReadCluster splits these GPUs off into layout nodes and clears it.
  std::vector<FlexibleGpus> flexible;
  // The host's index of the first of these GPUs: 0, except on a layout node, whose one GPU
  // keeps its host's number (device files and NVML name it so).
  int first_index = 0;
};

// The MIG profiles GPU `index` is split into, or nullptr when it is whole.
const std::vector<std::string>* MigLayoutOf(const GpuSpec& gpus, int index);

// The GPUs a whole-GPU job can get: in no MIG layout and not shared as shards.
int WholeGpuCount(const GpuSpec& gpus);

// How many shards GPU `index` is shared as; 0 when it is not shared.
int ShardsOf(const GpuSpec& gpus, int index);

// The GPUs shared as shards.
int SharedGpuCount(const GpuSpec& gpus);

// The gpu gres type of the node's shared GPUs: "<type>-shared" ("h100-shared").
std::string SharedGpuType(const GpuSpec& gpus);

// Whether some GPU of the node is not a plain whole GPU (split by MIG, or shared): then a
// whole-GPU job must name the whole GPUs' type, or Slurm may give it a slice or a shared GPU.
bool HasSplitGpus(const GpuSpec& gpus);

// The shards every shared GPU of the cluster is cut into (validation keeps them equal, so that
// `bmas run --share N` means one fraction everywhere); 0 when no GPU is shared.
int ClusterShardsPerGpu(const struct Cluster& cluster);

// How many MIG slices of `profile` the layouts of `gpus` hold.
int MigSliceCount(const GpuSpec& gpus, std::string_view profile);

// count x count matrix of NVLink counts between the GPUs of `gpus`, 0 on the diagonal.
// REQUIRES: ValidateCluster accepted the links.
std::vector<std::vector<int>> LinkMatrix(const GpuSpec& gpus);

struct Node {
  std::string name;
  std::string address;   // where slurmd listens (NodeAddr)
  std::string hostname;  // NodeHostname; "" = Slurm's default (the node's name)
  int port = 0;          // slurmd's port; 0 = SlurmdPortOf
  int cpus = 0;
  int sockets = 0;  // CPU layout; 0 = not given (all three or none)
  int cores_per_socket = 0;
  int threads_per_core = 0;
  int64_t memory_mib = 0;  // memory Slurm may hand to jobs (RealMemory)
  GpuSpec gpus;
  std::vector<Nic> nics;
  std::vector<std::string> features;  // Slurm node features, for --constraint
  int line = 0;                       // the line of its [[cluster.nodes]] entry
  // A layout node (one layout of a GPU whose layout follows demand): its host's name, its GPU's
  // group ("oss01-gpu3") and its layout's index; "" and -1 for other nodes. When active it runs
  // its own slurmd on the host (`slurmd -N <name>`), on its own port.
  std::string host;
  std::string gpu_group;
  int layout_index = -1;
};


struct Controller {
  std::string name;
  std::string address;
  int line = 0;
};

// A network switch for Slurm's topology/tree: leaves list nodes, upper levels list switches.
struct Switch {
  std::string name;
  std::vector<std::string> nodes;
  std::vector<std::string> switches;
  int line = 0;
};

enum class PreemptMode { kOff, kRequeue, kCancel };

inline constexpr int64_t kUnlimitedMinutes = -1;

struct Partition {
  std::string name;
  std::vector<std::string> nodes;  // expanded names
  bool is_default = false;
  int64_t default_time_min = 60;  // kUnlimitedMinutes = no limit
  int64_t max_time_min = kUnlimitedMinutes;
  int priority_tier = 1;  // higher tiers preempt lower ones (preempt/partition_prio)
  PreemptMode preempt_mode = PreemptMode::kOff;  // what happens to this partition's jobs
  std::string qos;                               // partition QOS; "" = none
  int max_nodes = 0;                             // per job; 0 = unlimited
  // GPUs one user may hold at once in this partition; 0 = no cap. Slurm enforces it through
  // the partition's QOS (MaxTRESPerUser=gres/gpu=N), which needs accounting (slurmdbd).
  int max_gpus_per_user = 0;
  // Seconds a preempted job of this partition may run on after its SIGTERM (GraceTime); 0:
  // SIGTERM at once, SIGKILL KillWait later.
  int grace_time_s = 0;
  int line = 0;

  // The partition's QOS: `qos`, else "bmas_<name>" when it has a GPU cap, else "".
  std::string EffectiveQos() const;
};

// How Slurm runs. A real cluster takes these from [cluster.slurm]; `bmas slurm up` replaces
// the paths and ports with ones under its state dir.
struct SlurmSettings {
  std::string cluster_name = "bmas";
  // Every node on this host (several slurmd, fake GPUs): per-node spool, tmp, ports and
  // device directories, and nodes may claim more CPUs and memory than the host has.
  bool local = false;
  std::string slurm_user = "slurm";
  int slurmctld_port = 6817;
  int slurmd_port = 6818;  // local: node i gets slurmd_port + i unless it names a port
  std::string state_save_dir = "/var/spool/slurmctld";
  std::string spool_dir = "/var/spool/slurmd";
  std::string log_dir = "/var/log/slurm";
  std::string run_dir = "/run";
  std::string tmpfs = "/tmp";
  std::string gpu_device_dir = "/dev";  // nvidiaN there; local: <dir>/<node>/nvidiaN
  std::string munge_socket;             // "" = munge's default
  int cred_expire_s = 0;                // munge credential lifetime; 0 = Slurm's (120 s)
  std::string jwt_key;                  // HS256 key for slurmrestd; "" = no JWT
  std::string slurmrestd;  // "host:port" of a loopback slurmrestd, "https://HOST:PORT" of a
                           // `bmas slurm tls-front`; "" = none
  std::string slurmrestd_ca;  // PEM CA for https; "" = <state dir>/cluster/ca.crt
  std::string prolog = "/usr/local/sbin/bmas-slurm-prolog";  // "" = none
  std::string epilog = "/usr/local/sbin/bmas-slurm-epilog";  // "" = none
  // As the job's user before each task, on a cluster with MIG layouts only: names the job's
  // slices by MIG UUID in CUDA_VISIBLE_DEVICES (`bmas slurm hook task-prolog`).
  std::string task_prolog = "/usr/local/sbin/bmas-slurm-task-prolog";  // "" = none
  int kill_wait_s = 30;             // SIGTERM to SIGKILL for preempted and cancelled jobs
  int64_t first_job_id = 0;         // FirstJobId; 0 = Slurm's (1)
  int64_t def_mem_per_cpu_mib = 0;  // 0 = the smallest node's memory per CPU
  bool accounting = false;          // slurmdbd
  std::string slurmdbd_host;        // "" = the controller
  int slurmdbd_port = 6819;
};

struct Cluster {
  std::string source;  // the file it was read from, for messages
  Controller controller;
  std::vector<Node> nodes;
  std::vector<Switch> switches;
  std::vector<Partition> partitions;
  SlurmSettings slurm;

  // The node called `name`, or nullptr.
  const Node* FindNode(std::string_view name) const;
};

// The GPUs whose layout follows demand, by group name ("oss01-gpu3"), in inventory order.
std::vector<std::string> GpuGroups(const Cluster& cluster);

// The layout nodes of `group`, in the order of its layouts.
std::vector<const Node*> LayoutNodesOf(const Cluster& cluster, std::string_view group);

// The node of `group` that holds its GPU in `layout`. NotFound naming the groups when there is
// no such group; InvalidArgument listing its layouts when `layout` is not one of them.
Result<const Node*> LayoutNodeOf(const Cluster& cluster, std::string_view group,
                                 const std::vector<std::string>& layout);

// The cluster's physical GPUs and machines: a GPU whose layout follows demand counts once, not
// once per layout node, and its layout nodes are on their host.
int PhysicalGpuCount(const Cluster& cluster);
int HostCount(const Cluster& cluster);

// Whether Slurm node `node` is a layout node of host `host` ("oss01-gpu3-1" of "oss01"): the
// name ReadCluster gives them, "<host>-gpu<N>-<k>".
bool IsLayoutNodeOf(std::string_view node, std::string_view host);

// A node's one GPU's layout: its MIG profiles, empty when whole.
std::vector<std::string> GpuNodeLayout(const Node& node);

// slurmd's port for nodes[index]: its own, else (local) slurm_port + index, else SlurmdPort
// (a layout node's: SlurmdPort + 10 + 8 x its GPU's index + its layout's, beside its host's).
int SlurmdPortOf(const Cluster& cluster, size_t index);

// Reads the [cluster] table of the TOML file `path` (other tables are left to their own
// readers) and validates it. Throws ConfigError naming the file, line and entry.
Cluster LoadCluster(const std::string& path);

// The same from TOML text; `source` names it in errors.
Cluster ParseCluster(std::string_view toml_text, const std::string& source);

// Reads an already parsed [cluster] table and validates it. Throws ConfigError.
Cluster ReadCluster(ConfigTable& table);

// What the types alone cannot check: unique names, NVLinks between GPUs that exist,
// partitions and switches naming known nodes, consistent times and ports. The error
// (InvalidArgument) reads "<file>:<line>: <entry>: <problem>".
Result<void> ValidateCluster(const Cluster& cluster);

// A Slurm time ("30", "1:00:00", "7-00:00:00", "UNLIMITED", ...) in minutes, rounded up;
// kUnlimitedMinutes for UNLIMITED/INFINITE.
Result<int64_t> ParseSlurmMinutes(std::string_view text);

// Minutes as Slurm writes them: "01:00:00", "7-00:00:00", "UNLIMITED".
std::string FormatSlurmMinutes(int64_t minutes);

std::string_view FabricName(Fabric fabric);

}  // namespace bmas
