#include "core/job_shape.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace bmas {
namespace {

const Partition* FindPartition(const Cluster& cluster, const std::string& name) {
  for (const Partition& p : cluster.partitions) {
    if (name.empty() ? p.is_default : p.name == name) return &p;
  }
  return nullptr;
}

std::vector<const Node*> NodesOf(const Cluster& cluster, const Partition& p) {
  std::vector<const Node*> nodes;
  for (const std::string& name : p.nodes) {
    if (const Node* n = cluster.FindNode(name)) nodes.push_back(n);
  }
  return nodes;
}

// A job on MIG slices: all of them on one node of the partition that has that many.
Result<JobShape> PlanSliceShape(const Partition& p, const std::vector<const Node*>& nodes,
                                const ShapeRequest& r) {
  if (r.nodes > 0 || r.gpus_per_node > 0) {
    return InvalidArgument(fmt::format(
        "MIG slices run on one node: give --gpus {}x{} without --nodes or --gpus-per-node",
        std::max(1, r.gpus), r.mig_profile));
  }
  int most = 0;
  std::set<std::string> profiles;
  for (const Node* n : nodes) {
    most = std::max(most, MigSliceCount(n->gpus, r.mig_profile));
    for (const MigLayout& layout : n->gpus.mig_layouts) {
      profiles.insert(layout.profiles.begin(), layout.profiles.end());
    }
  }
  if (most == 0) {
    return InvalidArgument(
        profiles.empty()
            ? fmt::format("partition {} has no MIG slices (the inventory's mig_layouts split "
                          "GPUs): ask for whole GPUs, --gpus N",
                          p.name)
            : fmt::format("partition {} has no {} slices; it has {}", p.name, r.mig_profile,
                          fmt::join(profiles, ", ")),
        "gpus");
  }
  const int want = std::max(1, r.gpus);
  if (want > most) {
    return InvalidArgument(fmt::format("a node of partition {} has at most {} {} slices, not {}",
                                       p.name, most, r.mig_profile, want),
                           "gpus");
  }
  JobShape shape;
  shape.partition = p.name;
  shape.nodes = 1;
  shape.gpus_per_node = want;
  shape.gpu_type = r.mig_profile;
  shape.gres_type = r.mig_profile;
  shape.mig = true;
  shape.launcher = r.launcher;
  shape.tasks_per_node = r.launcher == Launcher::kMpi ? want : 1;
  return shape;
}

// A share of one shared GPU: shards_per_gpu / share of its shards, on a node that has one.
Result<JobShape> PlanShareShape(const Cluster& cluster, const Partition& p,
                                const std::vector<const Node*>& nodes, const ShapeRequest& r) {
  if (!r.mig_profile.empty() || r.gpus > 1 || r.nodes > 1 || r.gpus_per_node > 1) {
    return InvalidArgument(
        "--share N gives a share of one GPU: give --gpus 1 --share N (for more, ask for whole "
        "GPUs or MIG slices)",
        "share");
  }
  const int per_gpu = ClusterShardsPerGpu(cluster);
  const Node* shared = nullptr;
  for (const Node* n : nodes) {
    if (SharedGpuCount(n->gpus) > 0 && shared == nullptr) shared = n;
  }
  if (shared == nullptr) {
    return InvalidArgument(
        per_gpu == 0 ? "the cluster shares no GPU (the inventory's [[cluster.nodes.gpus.shared]] "
                       "does): ask for a whole GPU or a MIG slice"
                     : fmt::format("partition {} has no shared GPU: give --partition of one that "
                                   "has, or ask for a whole GPU",
                                   p.name),
        "share");
  }
  if (r.share < 1 || r.share > per_gpu || per_gpu % r.share != 0) {
    std::vector<int> fits;
    for (int k = 1; k <= per_gpu; ++k) {
      if (per_gpu % k == 0) fits.push_back(k);
    }
    return InvalidArgument(fmt::format("shared GPUs are cut into {} shards, so --share {} is not "
                                       "a whole number of them; --share takes {}",
                                       per_gpu, r.share, fmt::join(fits, ", ")),
                           "share");
  }
  JobShape shape;
  shape.partition = p.name;
  shape.nodes = 1;
  shape.gpus_per_node = 1;
  shape.gpu_type = SharedGpuType(shared->gpus);
  shape.shards = per_gpu / r.share;
  shape.launcher = r.launcher;
  shape.tasks_per_node = 1;
  return shape;
}

}  // namespace

Result<void> ParseGpusOption(std::string_view text, ShapeRequest& request) {
  const auto bad = [&] {
    return InvalidArgument(
        fmt::format("'{}' is not a number of GPUs (4), a MIG profile (1g.10gb) or a number of "
                    "slices of one (2x3g.40gb)",
                    text),
        "gpus");
  };
  const auto number = [](std::string_view digits, int& out) {
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
    return ec == std::errc() && end == digits.data() + digits.size() && out >= 0 &&
           out <= 1 << 20;
  };
  if (text.empty()) return bad();
  int n = 0;
  if (number(text, n)) {
    request.gpus = n;
    request.mig_profile.clear();
    return {};
  }
  // A profile is "<compute>g.<memory>gb", perhaps "+me": a digit, 'g', '.', ...
  const size_t g = text.find('g');
  const size_t x = text.find('x');
  std::string_view profile = text;
  n = 1;
  if (x != std::string_view::npos && x < g) {
    if (!number(text.substr(0, x), n) || n == 0) return bad();
    profile = text.substr(x + 1);
  }
  if (profile.size() < 4 || !std::isdigit(static_cast<unsigned char>(profile[0])) ||
      profile.find("g.") == std::string_view::npos || profile.find("gb") == std::string_view::npos) {
    return bad();
  }
  request.gpus = n;
  request.mig_profile = std::string(profile);
  return {};
}

Result<Launcher> ParseLauncher(std::string_view name) {
  if (name == "none") return Launcher::kNone;
  if (name == "torchrun") return Launcher::kTorchrun;
  if (name == "mpi") return Launcher::kMpi;
  return InvalidArgument(fmt::format("launcher '{}' is not none, torchrun or mpi", name),
                         "launcher");
}

std::string_view LauncherName(Launcher launcher) {
  switch (launcher) {
    case Launcher::kNone: return "none";
    case Launcher::kTorchrun: return "torchrun";
    case Launcher::kMpi: return "mpi";
  }
  return "none";
}

Result<JobShape> PlanJobShape(const Cluster& cluster, const ShapeRequest& r) {
  const Partition* p = FindPartition(cluster, r.partition);
  if (p == nullptr) {
    std::vector<std::string> names;
    for (const Partition& q : cluster.partitions) names.push_back(q.name);
    return InvalidArgument(
        r.partition.empty()
            ? "the cluster has no default partition: give --partition"
            : fmt::format("there is no partition '{}'; there are: {}", r.partition,
                          fmt::join(names, ", ")),
        "partition");
  }
  if (r.gpus < 0 || r.nodes < 0 || r.gpus_per_node < 0) {
    return InvalidArgument("GPU and node counts cannot be negative");
  }
  const std::vector<const Node*> nodes = NodesOf(cluster, *p);
  if (r.share != 0) return PlanShareShape(cluster, *p, nodes, r);
  if (!r.mig_profile.empty()) return PlanSliceShape(*p, nodes, r);
  // Whole-node placement assumes the partition's GPU nodes are alike: the largest ones count.
  int per_node = 0;
  std::string type;
  bool any_split = false;
  for (const Node* n : nodes) {
    any_split = any_split || HasSplitGpus(n->gpus);
    if (WholeGpuCount(n->gpus) > per_node) {
      per_node = WholeGpuCount(n->gpus);
      type = n->gpus.type;
    }
  }
  const int full_nodes = static_cast<int>(std::count_if(nodes.begin(), nodes.end(), [&](const Node* n) {
    return WholeGpuCount(n->gpus) == per_node;
  }));
  const int total = per_node * full_nodes;

  JobShape shape;
  shape.partition = p->name;
  shape.gpu_type = type;
  if (any_split) shape.gres_type = type;
  const bool explicit_layout = r.nodes > 0 || r.gpus_per_node > 0;
  if (explicit_layout) {
    shape.nodes = std::max(1, r.nodes);
    shape.gpus_per_node = r.gpus_per_node;
    if (r.gpus > 0 && shape.gpus_per_node == 0) {
      if (r.gpus % shape.nodes != 0) {
        return InvalidArgument(fmt::format(
            "{} GPUs do not split evenly over {} nodes: give --gpus-per-node, or a multiple of "
            "{} GPUs",
            r.gpus, shape.nodes, shape.nodes));
      }
      shape.gpus_per_node = r.gpus / shape.nodes;
    } else if (r.gpus > 0 && r.gpus != shape.nodes * shape.gpus_per_node) {
      return InvalidArgument(fmt::format("--gpus {} is not --nodes {} x --gpus-per-node {}",
                                         r.gpus, shape.nodes, shape.gpus_per_node));
    }
    if (shape.gpus_per_node > per_node) {
      return InvalidArgument(fmt::format(
          "a node of partition {} has {} GPUs, not {}; what fits: --nodes {} --gpus-per-node {}",
          p->name, per_node, shape.gpus_per_node,
          per_node > 0 ? (shape.nodes * shape.gpus_per_node + per_node - 1) / per_node : 0,
          per_node));
    }
    const int usable = shape.gpus_per_node > 0 ? full_nodes : static_cast<int>(nodes.size());
    if (shape.nodes > usable) {
      return InvalidArgument(fmt::format("partition {} has {} such nodes, not {}", p->name,
                                         usable, shape.nodes));
    }
  } else if (r.gpus > 0) {
    if (r.gpus > total) {
      return InvalidArgument(fmt::format(
          "partition {} has {} GPUs in all ({} nodes x {}); ask for at most {}", p->name, total,
          full_nodes, per_node, total));
    }
    if (r.gpus <= per_node) {
      shape.gpus_per_node = r.gpus;  // one node: one NVLink island
    } else if (r.gpus % per_node == 0) {
      shape.nodes = r.gpus / per_node;
      shape.gpus_per_node = per_node;
    } else {
      const int below = r.gpus / per_node * per_node;
      return InvalidArgument(fmt::format(
          "{} GPUs are more than one node's {} and not whole nodes: ask for {} or {} GPUs, or "
          "lay it out yourself with --nodes N --gpus-per-node M",
          r.gpus, per_node, below, below + per_node));
    }
  }
  shape.launcher = r.launcher;
  shape.tasks_per_node = r.launcher == Launcher::kMpi ? std::max(1, shape.gpus_per_node) : 1;
  return shape;
}

std::map<std::string, std::string> DistributedEnvironment(const Cluster& cluster,
                                                          const JobShape& shape) {
  std::map<std::string, std::string> env;
  env["NNODES"] = std::to_string(shape.nodes);
  env["GPUS_PER_NODE"] = std::to_string(shape.gpus_per_node);
  const int per_node = shape.launcher == Launcher::kTorchrun ? std::max(1, shape.gpus_per_node)
                                                              : shape.tasks_per_node;
  env["WORLD_SIZE"] = std::to_string(shape.nodes * per_node);
  // MIG slices have no NVLink and no peer-to-peer access between them: NCCL must not try.
  // (A share is one GPU: nothing to talk to.)
  if (shape.mig) env["NCCL_P2P_DISABLE"] = "1";
  // The network from the partition's first node: the same NICs on every node.
  const Node* node = nullptr;
  for (const Partition& p : cluster.partitions) {
    if (p.name == shape.partition && !p.nodes.empty()) node = cluster.FindNode(p.nodes[0]);
  }
  if (node == nullptr || node->nics.empty()) return env;
  std::vector<std::string> hcas;
  int gid = -1;
  for (const Nic& nic : node->nics) {
    if (nic.fabric != Fabric::kEthernet && !nic.hca.empty()) hcas.push_back(nic.hca);
    if (nic.fabric == Fabric::kRoce && nic.gid_index >= 0) gid = nic.gid_index;
  }
  const std::string& ifname = node->nics[0].name;
  env["NCCL_SOCKET_IFNAME"] = ifname;  // bootstrap and socket transport
  if (hcas.empty()) {
    env["NCCL_IB_DISABLE"] = "1";
  } else {
    env["NCCL_IB_HCA"] = fmt::format("{}", fmt::join(hcas, ","));
    if (gid >= 0) env["NCCL_IB_GID_INDEX"] = std::to_string(gid);
  }
  // OpenMPI: its TCP traffic on the same interface; on loopback-only clusters nothing else.
  env["OMPI_MCA_btl_tcp_if_include"] = ifname;
  env["OMPI_MCA_oob_tcp_if_include"] = ifname;
  if (ifname == "lo") env["OMPI_MCA_btl"] = "self,tcp";
  return env;
}

std::string ShellQuote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789_-.,/:=+@%") == std::string::npos) {
    return arg;
  }
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string BatchScript(const JobShape& shape, const std::vector<std::string>& command,
                        const std::vector<std::string>& wrapper) {
  std::string cmd;
  for (const std::string& a : command) cmd += (cmd.empty() ? "" : " ") + ShellQuote(a);
  // What each task execs first (MPI's tasks excepted): "" or "WRAPPER ARGS... ".
  std::string wrap;
  for (const std::string& a : wrapper) wrap += ShellQuote(a) + " ";
  std::string s =
      "#!/bin/bash\n"
      "# Written by bmas run. The first node hosts the rendezvous; the port comes from the\n"
      "# job id so that jobs sharing a node do not collide.\n"
      "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)\n"
      "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n";
  // Per-task variables are set by a small shell around the command, inside the step.
  const std::string per_node =
      "export NODE_RANK=$SLURM_NODEID RANK=$SLURM_NODEID LOCAL_RANK=0; exec \"$@\"";
  switch (shape.launcher) {
    case Launcher::kNone:
      if (shape.nodes == 1) {
        s += "export NODE_RANK=0 RANK=0 LOCAL_RANK=0\n" + wrap + cmd + "\n";
      } else {
        s += "srun --ntasks-per-node=1 --kill-on-bad-exit=1 " + wrap + "sh -c '" + per_node +
             "' bmas " + cmd + "\n";
      }
      break;
    case Launcher::kTorchrun:
      s += "srun --ntasks-per-node=1 --kill-on-bad-exit=1 " + wrap + "sh -c 'export "
           "NODE_RANK=$SLURM_NODEID; exec torchrun --nnodes=$NNODES "
           "--nproc-per-node=$GPUS_PER_NODE --node-rank=$SLURM_NODEID "
           "--master-addr=$MASTER_ADDR --master-port=$MASTER_PORT \"$@\"' bmas " +
           cmd + "\n";
      break;
    case Launcher::kMpi:
      s += "srun --mpi=pmix --kill-on-bad-exit=1 sh -c 'export RANK=$SLURM_PROCID "
           "LOCAL_RANK=$SLURM_LOCALID NODE_RANK=$SLURM_NODEID; exec \"$@\"' bmas " +
           cmd + "\n";
      break;
  }
  return s;
}

std::string PartitionThatAllows(const Cluster& cluster, const std::string& current, int gpus) {
  std::string found;
  for (const Partition& p : cluster.partitions) {
    if (p.name == current || p.name == "inference") continue;
    if (p.max_gpus_per_user > 0 && p.max_gpus_per_user < gpus) continue;
    if (p.name == "training") return p.name;
    if (found.empty()) found = p.name;
  }
  return found;
}

}  // namespace bmas
