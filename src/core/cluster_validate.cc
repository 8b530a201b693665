// ValidateCluster: the checks that span entries. Each error names the file, the line of the
// entry at fault and the entry itself, so an administrator can go straight to it.

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/cluster.h"
#include "core/mig.h"

namespace bmas {
namespace {

class Checker {
 public:
  explicit Checker(const Cluster& c) : c_(c) {}

  Result<void> Run() {
    if (c_.nodes.empty()) return Fail(0, "cluster.nodes", "no nodes");
    if (auto r = Nodes(); !r) return r;
    if (auto r = Switches(); !r) return r;
    return Partitions();
  }

 private:
  Error Fail(int line, const std::string& entry, const std::string& what) const {
    std::string where = line > 0 ? fmt::format("{}:{}", c_.source, line) : c_.source;
    return InvalidArgument(fmt::format("{}: {}: {}", where, entry, what));
  }

  Result<void> Nodes() {
    std::map<std::string, int> lines;
    std::map<std::pair<std::string, int>, std::string> endpoints;
    for (size_t i = 0; i < c_.nodes.size(); ++i) {
      const Node& n = c_.nodes[i];
      std::string entry = "node " + n.name;
      if (auto [it, fresh] = lines.emplace(n.name, n.line); !fresh) {
        return Fail(n.line, entry, fmt::format("duplicate name (also at line {})", it->second));
      }
      int layout[] = {n.sockets, n.cores_per_socket, n.threads_per_core};
      int given = (n.sockets > 0) + (n.cores_per_socket > 0) + (n.threads_per_core > 0);
      if (given != 0 && given != 3) {
        return Fail(n.line, entry, "give sockets, cores_per_socket and threads_per_core together");
      }
      if (given == 3 && layout[0] * layout[1] * layout[2] != n.cpus) {
        return Fail(n.line, entry,
                    fmt::format("sockets x cores_per_socket x threads_per_core = {}, but cpus = {}",
                                layout[0] * layout[1] * layout[2], n.cpus));
      }
      if (auto r = Gpus(n); !r) return r;
      std::set<std::string> nics;
      for (const Nic& nic : n.nics) {
        if (!nics.insert(nic.name).second) {
          return Fail(n.line, entry, fmt::format("NIC {} is listed twice", nic.name));
        }
      }
      int port = SlurmdPortOf(c_, i);
      if (port > 65535) return Fail(n.line, entry, fmt::format("slurmd port {} > 65535", port));
      auto [it, fresh] = endpoints.emplace(std::pair(n.address, port), n.name);
      if (!fresh) {
        return Fail(n.line, entry,
                    fmt::format("slurmd at {}:{} is already node {}'s; give each node on one "
                                "address its own port (or set slurm.local)",
                                n.address, port, it->second));
      }
    }
    return {};
  }

  Result<void> Gpus(const Node& n) {
    std::set<std::pair<int, int>> seen;
    for (const GpuLink& l : n.gpus.nvlinks) {
      std::string entry = fmt::format("node {}: NVLink {}-{}", n.name, l.a, l.b);
      for (int g : {l.a, l.b}) {
        if (g >= n.gpus.count) {
          return Fail(l.line, entry,
                      fmt::format("GPU {} does not exist (the node has {} GPUs{})", g, n.gpus.count,
                                  n.gpus.count > 0 ? fmt::format(", 0-{}", n.gpus.count - 1) : ""));
        }
      }
      if (l.a == l.b) return Fail(l.line, entry, "a GPU cannot link to itself");
      if (!seen.insert(std::minmax(l.a, l.b)).second) return Fail(l.line, entry, "listed twice");
    }
    if (auto mig = MigLayouts(n); !mig) return mig;
    return Shared(n);
  }

  // Shared GPUs that exist, each listed once, in no MIG layout, and cut into as many shards as
  // every other shared GPU of the cluster (so that `bmas run --share N` is one fraction).
  Result<void> Shared(const Node& n) {
    std::map<int, int> shared_line;  // GPU -> the line that shares it
    for (const SharedGpus& s : n.gpus.shared) {
      std::string entry = fmt::format("node {}: shared", n.name);
      for (int g : s.gpus) {
        if (g >= n.gpus.count) {
          return Fail(s.line, entry,
                      fmt::format("GPU {} does not exist (the node has {} GPUs)", g, n.gpus.count));
        }
        if (auto [it, fresh] = shared_line.emplace(g, s.line); !fresh) {
          return Fail(s.line, entry, fmt::format("GPU {} is already shared (line {})", g, it->second));
        }
        if (MigLayoutOf(n.gpus, g) != nullptr) {
          return Fail(s.line, entry,
                      fmt::format("GPU {} is split by a MIG layout; a GPU is either split into "
                                  "slices or shared as shards, not both",
                                  g));
        }
      }
      if (first_shards_ == nullptr) first_shards_ = &s;
      if (s.shards != first_shards_->shards) {
        return Fail(s.line, entry,
                    fmt::format("{} shards per GPU, but line {} shares GPUs as {}: every shared "
                                "GPU of a cluster is cut into the same number of shards, so that "
                                "`bmas run --share N` means one fraction everywhere",
                                s.shards, first_shards_->line, first_shards_->shards));
      }
    }
    return {};
  }

  // Each layout on GPUs that exist, each GPU in one layout at most, on GPUs that can take MIG,
  // and placeable on the model's tables.
  Result<void> MigLayouts(const Node& n) {
    std::map<int, int> layout_line;  // GPU -> the line of its layout
    for (const MigLayout& m : n.gpus.mig_layouts) {
      std::string entry = fmt::format("node {}: mig_layouts", n.name);
      if (!n.gpus.mig) {
        return Fail(m.line, entry, "the node's GPUs have mig = false; set mig = true to split them");
      }
      for (int g : m.gpus) {
        if (g >= n.gpus.count) {
          return Fail(m.line, entry,
                      fmt::format("GPU {} does not exist (the node has {} GPUs)", g, n.gpus.count));
        }
        if (auto [it, fresh] = layout_line.emplace(g, m.line); !fresh) {
          return Fail(m.line, entry,
                      fmt::format("GPU {} already has a layout (line {})", g, it->second));
        }
      }
      auto model = FindMigGpuModel(n.gpus.type, n.gpus.memory_gb);
      if (!model) return Fail(m.line, entry, model.error().message);
      if (auto placed = PlaceMigLayout(**model, m.profiles); !placed) {
        return Fail(m.line, entry, placed.error().message);
      }
    }
    return {};
  }

  Result<void> Switches() {
    std::map<std::string, const Switch*> by_name;
    for (const Switch& s : c_.switches) {
      if (auto [it, fresh] = by_name.emplace(s.name, &s); !fresh) {
        return Fail(s.line, "switch " + s.name,
                    fmt::format("duplicate name (also at line {})", it->second->line));
      }
    }
    std::map<std::string, std::string> leaf_of;    // node -> its switch
    std::map<std::string, std::string> parent_of;  // switch -> the switch above it
    for (const Switch& s : c_.switches) {
      std::string entry = "switch " + s.name;
      for (const std::string& n : s.nodes) {
        if (c_.FindNode(n) == nullptr) {
          return Fail(s.line, entry, fmt::format("node {} is not in cluster.nodes", n));
        }
        if (auto [it, fresh] = leaf_of.emplace(n, s.name); !fresh) {
          return Fail(s.line, entry,
                      fmt::format("node {} is already under switch {}", n, it->second));
        }
      }
      for (const std::string& child : s.switches) {
        if (by_name.count(child) == 0) {
          return Fail(s.line, entry, fmt::format("switch {} is not in cluster.switches", child));
        }
        if (auto [it, fresh] = parent_of.emplace(child, s.name); !fresh) {
          return Fail(s.line, entry,
                      fmt::format("switch {} is already under switch {}", child, it->second));
        }
      }
    }
    // With a single parent each, a walk up that takes more steps than there are switches loops.
    for (const Switch& s : c_.switches) {
      std::string at = s.name;
      for (size_t steps = 0; parent_of.count(at) > 0; ++steps) {
        if (steps > c_.switches.size())
          return Fail(s.line, "switch " + s.name, "switches form a loop");
        at = parent_of[at];
      }
    }
    if (!c_.switches.empty()) {
      for (const Node& n : c_.nodes) {
        // Slurm's topology/tree never puts a job across a node under no switch and the rest.
        if (leaf_of.count(n.name) == 0) {
          return Fail(n.line, "node " + n.name, "is under no switch in cluster.switches");
        }
      }
    }
    return {};
  }

  Result<void> Partitions() {
    std::map<std::string, int> lines;
    const Partition* default_partition = nullptr;
    for (const Partition& p : c_.partitions) {
      std::string entry = "partition " + p.name;
      if (auto [it, fresh] = lines.emplace(p.name, p.line); !fresh) {
        return Fail(p.line, entry, fmt::format("duplicate name (also at line {})", it->second));
      }
      if (p.nodes.empty()) return Fail(p.line, entry, "has no nodes");
      for (const std::string& n : p.nodes) {
        if (c_.FindNode(n) == nullptr) {
          return Fail(p.line, entry, fmt::format("node {} is not in cluster.nodes", n));
        }
      }
      if (p.is_default) {
        if (default_partition != nullptr) {
          return Fail(p.line, entry,
                      fmt::format("partition {} is the default already", default_partition->name));
        }
        default_partition = &p;
      }
      if (p.max_gpus_per_user > 0 && !c_.slurm.accounting) {
        return Fail(p.line, entry,
                    "max_gpus_per_user needs [cluster.slurm] accounting = true: Slurm enforces "
                    "it through a partition QOS, and QOS limits need slurmdbd");
      }
      if (p.max_time_min != kUnlimitedMinutes &&
          (p.default_time_min == kUnlimitedMinutes || p.default_time_min > p.max_time_min)) {
        return Fail(p.line, entry,
                    fmt::format("default_time {} is longer than max_time {}",
                                FormatSlurmMinutes(p.default_time_min),
                                FormatSlurmMinutes(p.max_time_min)));
      }
    }
    return {};
  }

  const Cluster& c_;
  const SharedGpus* first_shards_ = nullptr;  // the first shared GPUs seen
};

}  // namespace

Result<void> ValidateCluster(const Cluster& cluster) { return Checker(cluster).Run(); }

}  // namespace bmas
