#include "core/cluster.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "common/config_table.h"
#include "core/hostlist.h"
#include "core/mig_relayout.h"

namespace bmas {
namespace {

// Characters Slurm takes in a name that appears unquoted in slurm.conf or a GRES string.
bool IsSlurmName(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '_' || c == '.';
  });
}

std::string RequiredString(ConfigTable& t, std::string_view key) {
  if (!t.Has(key)) t.Invalid(key, "required");
  std::string v = t.String(key, "");
  if (v.empty()) t.Invalid(key, "must not be empty");
  return v;
}

std::string SlurmName(ConfigTable& t, std::string_view key) {
  std::string v = RequiredString(t, key);
  if (!IsSlurmName(v)) t.Invalid(key, fmt::format("'{}': use letters, digits, '-', '_', '.'", v));
  return v;
}

int64_t RequiredInt(ConfigTable& t, std::string_view key, int64_t min, int64_t max) {
  if (!t.Has(key)) t.Invalid(key, "required");
  return t.Int(key, 0, min, max);
}

std::vector<std::string> Hostlist(ConfigTable& t, std::string_view key) {
  auto names = ExpandHostlist(RequiredString(t, key));
  if (!names) t.Invalid(key, names.error().message);
  for (const std::string& n : *names) {
    if (!IsSlurmName(n)) t.Invalid(key, fmt::format("'{}': use letters, digits, '-', '_', '.'", n));
  }
  return *names;
}

// Slurm reads these paths on several hosts and from daemons with other working directories.
std::string AbsolutePath(ConfigTable& t, std::string_view key, const std::string& fallback,
                         bool may_be_empty) {
  std::string v = t.String(key, fallback);
  if (v.empty() ? !may_be_empty : v[0] != '/') t.Invalid(key, "expected an absolute path");
  if (v.find_first_of(" \t\n,") != v.npos) t.Invalid(key, "Slurm takes no spaces or commas here");
  return v;
}

int Int32(ConfigTable& t, std::string_view key, int fallback, int min, int max) {
  return static_cast<int>(t.Int(key, fallback, min, max));
}

int64_t Minutes(ConfigTable& t, std::string_view key, int64_t fallback) {
  if (!t.Has(key)) return fallback;
  std::string text = t.String(key, "");
  auto minutes = ParseSlurmMinutes(text);
  if (!minutes) t.Invalid(key, minutes.error().message);
  if (*minutes == 0) t.Invalid(key, "must be at least one minute, or \"UNLIMITED\"");
  return *minutes;
}

Controller ReadController(ConfigTable& t) {
  Controller c;
  c.name = SlurmName(t, "name");
  c.address = RequiredString(t, "address");
  c.line = t.line();
  t.RejectUnknownKeys();
  return c;
}

GpuSpec ReadGpus(ConfigTable& t) {
  GpuSpec g;
  g.count = Int32(t, "count", 0, 0, 64);
  g.type = t.String("type", "");
  if (g.count > 0 && !IsSlurmName(g.type)) {
    t.Invalid("type", "a GRES type such as \"h100\" is required when count > 0");
  }
  g.memory_gb = Int32(t, "memory_gb", 0, 0, 1 << 20);
  g.mig = t.Bool("mig", false);
  int all_pairs = Int32(t, "nvlinks_all_pairs", 0, 0, 1024);
  std::vector<ConfigTable> links = t.TableArray("nvlinks");
  if (all_pairs > 0 && !links.empty()) {
    t.Invalid("nvlinks", "give nvlinks or nvlinks_all_pairs, not both");
  }
  for (int a = 0; all_pairs > 0 && a < g.count; ++a) {
    for (int b = a + 1; b < g.count; ++b) g.nvlinks.push_back({a, b, all_pairs, t.line()});
  }
  for (ConfigTable& l : links) {
    std::vector<int64_t> pair = l.IntArray("gpus", 0, 1023);
    if (pair.size() != 2) l.Invalid("gpus", "expected two GPU indices, e.g. [0, 1]");
    int count = Int32(l, "count", 1, 1, 1024);
    l.RejectUnknownKeys();
    g.nvlinks.push_back({static_cast<int>(pair[0]), static_cast<int>(pair[1]), count, l.line()});
  }
  for (ConfigTable& m : t.TableArray("mig_layouts")) {
    MigLayout layout;
    for (int64_t gpu : m.IntArray("gpus", 0, 1023)) layout.gpus.push_back(static_cast<int>(gpu));
    if (layout.gpus.empty()) m.Invalid("gpus", "list the GPUs this layout splits, e.g. [2, 3]");
    layout.profiles = m.StringArray("profiles");
    if (layout.profiles.empty()) {
      m.Invalid("profiles", "list MIG profiles, e.g. [\"3g.40gb\", \"2g.20gb\", \"1g.10gb\"]");
    }
    layout.line = m.line();
    m.RejectUnknownKeys();
    g.mig_layouts.push_back(std::move(layout));
  }
  for (ConfigTable& m : t.TableArray("shared")) {
    SharedGpus shared;
    for (int64_t gpu : m.IntArray("gpus", 0, 1023)) shared.gpus.push_back(static_cast<int>(gpu));
    if (shared.gpus.empty()) m.Invalid("gpus", "list the GPUs to share, e.g. [0]");
    if (!m.Has("shards")) m.Invalid("shards", "give how many shards each GPU is cut into, e.g. 4");
    shared.shards = Int32(m, "shards", 2, 2, 128);
    shared.line = m.line();
    m.RejectUnknownKeys();
    g.shared.push_back(std::move(shared));
  }
  std::set<int> flexible;
  for (ConfigTable& m : t.TableArray("flexible")) {
    FlexibleGpus f;
    for (int64_t gpu : m.IntArray("gpus", 0, 1023)) {
      f.gpus.push_back(static_cast<int>(gpu));
      flexible.insert(static_cast<int>(gpu));
    }
    if (f.gpus.empty()) m.Invalid("gpus", "list the GPUs whose layout follows demand, e.g. [3]");
    for (const std::string& text : m.StringArray("layouts")) {
      auto layout = ParseLayoutText(text);
      if (!layout) m.Invalid("layouts", layout.error().message);
      f.layouts.push_back(std::move(*layout));
    }
    if (f.layouts.size() > 8) m.Invalid("layouts", "at most 8 layouts per GPU");
    if (f.layouts.size() < 2) {
      m.Invalid("layouts", "give at least two layouts to choose from, the first the one it "
                           "starts in, e.g. [\"whole\", \"7x1g.10gb\", \"3g.40gb + 3g.40gb\"]");
    }
    f.line = m.line();
    m.RejectUnknownKeys();
    g.flexible.push_back(std::move(f));
  }
  if (!flexible.empty()) {
    if (!g.mig) t.Invalid("flexible", "GPUs whose MIG layout changes need mig = true");
    // Split off as GPU nodes, the host keeps GPUs 0..k-1 under their own numbers.
    const int first = g.count - static_cast<int>(flexible.size());
    if (*flexible.begin() != first || *flexible.rbegin() != g.count - 1) {
      t.Invalid("flexible", fmt::format("the GPUs whose layout changes must be the node's last ones "
                                        "(of {}: {}-{}), each listed once",
                                        g.count, std::max(first, 0), g.count - 1));
    }
    for (int gpu : flexible) {
      if (MigLayoutOf(g, gpu) != nullptr || ShardsOf(g, gpu) > 0) {
        t.Invalid("flexible", fmt::format("GPU {} also has a fixed MIG layout or is shared; a "
                                          "GPU whose layout follows demand has only its layouts",
                                          gpu));
      }
    }
  }
  t.RejectUnknownKeys();
  return g;
}

Nic ReadNic(ConfigTable& t) {
  Nic n;
  n.name = SlurmName(t, "name");
  std::string fabric = t.String("fabric", "ethernet", {"ethernet", "roce", "infiniband"});
  n.fabric = fabric == "roce"         ? Fabric::kRoce
             : fabric == "infiniband" ? Fabric::kInfiniband
                                      : Fabric::kEthernet;
  n.speed_gbps = Int32(t, "speed_gbps", 0, 0, 100000);
  n.hca = t.String("hca", "");
  if (n.fabric != Fabric::kEthernet && n.hca.empty()) {
    t.Invalid("hca",
              fmt::format("required for fabric {} (the RDMA device, e.g. \"mlx5_0\")", fabric));
  }
  n.gid_index = Int32(t, "gid_index", -1, -1, 255);
  t.RejectUnknownKeys();
  return n;
}

// One [[cluster.nodes]] entry: one node, or a group of identical ones named by a host list.
void ReadNodeGroup(ConfigTable& t, std::vector<Node>& out) {
  std::vector<std::string> names = Hostlist(t, "names");
  std::string address = RequiredString(t, "address");
  std::vector<std::string> addresses{address};
  if (address.find(':') == address.npos) {  // IPv6 literals hold no host lists
    auto expanded = ExpandHostlist(address);
    if (!expanded) t.Invalid("address", expanded.error().message);
    addresses = *expanded;
  }
  if (addresses.size() != 1 && addresses.size() != names.size()) {
    t.Invalid("address", fmt::format("{} addresses for {} names: give one address for all, or "
                                     "one per name",
                                     addresses.size(), names.size()));
  }
  Node node;
  node.line = t.line();
  node.hostname = t.String("hostname", "");
  node.port = Int32(t, "port", 0, 0, 65535);
  node.cpus = static_cast<int>(RequiredInt(t, "cpus", 1, 1 << 16));
  node.sockets = Int32(t, "sockets", 0, 0, 1024);
  node.cores_per_socket = Int32(t, "cores_per_socket", 0, 0, 1 << 16);
  node.threads_per_core = Int32(t, "threads_per_core", 0, 0, 64);
  if (t.Has("memory_gb") == t.Has("memory_mib")) {
    t.Invalid("memory_gb", "give memory_gb or memory_mib (one of them)");
  }
  node.memory_mib = t.Has("memory_gb") ? t.Int("memory_gb", 0, 1, int64_t{1} << 30) * 1024
                                       : t.Int("memory_mib", 0, 1, int64_t{1} << 40);
  node.features = t.StringArray("features");
  for (const std::string& f : node.features) {
    if (!IsSlurmName(f)) t.Invalid("features", fmt::format("'{}' is not a plain word", f));
  }
  if (auto g = t.Table("gpus")) node.gpus = ReadGpus(*g);
  for (ConfigTable& n : t.TableArray("nics")) node.nics.push_back(ReadNic(n));
  t.RejectUnknownKeys();
  for (size_t i = 0; i < names.size(); ++i) {
    node.name = names[i];
    node.address = addresses.size() == 1 ? addresses[0] : addresses[i];
    out.push_back(node);
  }
}

// Each flexible GPU of a node becomes a group of layout nodes "<node>-gpu<N>-<k>" right after
// it, each with its share of the node's CPUs and memory, its layout, and its host's address,
// NICs and features; the host keeps its other GPUs.
void SplitOffGpuNodes(std::vector<Node>& nodes) {
  std::vector<Node> out;
  for (Node& host : nodes) {
    std::vector<Node> layout_nodes;
    const int count = host.gpus.count;
    int split = 0;
    const int cpus = std::max(1, host.cpus / std::max(1, count));
    const int64_t memory = host.memory_mib / std::max(1, count);
    for (const FlexibleGpus& f : host.gpus.flexible) {
      for (int gpu : f.gpus) {
        ++split;
        for (size_t k = 0; k < f.layouts.size(); ++k) {
          Node n = host;
          n.name = fmt::format("{}-gpu{}-{}", host.name, gpu, k);
          n.host = host.name;
          n.gpu_group = fmt::format("{}-gpu{}", host.name, gpu);
          n.layout_index = static_cast<int>(k);
          n.port = 0;
          n.sockets = n.cores_per_socket = n.threads_per_core = 0;
          n.cpus = cpus;
          n.memory_mib = memory;
          n.gpus = GpuSpec{.count = 1, .type = host.gpus.type, .memory_gb = host.gpus.memory_gb,
                           .mig = true, .first_index = gpu};
          if (!f.layouts[k].empty()) n.gpus.mig_layouts = {{{0}, f.layouts[k], f.line}};
          n.line = f.line;
          layout_nodes.push_back(std::move(n));
        }
      }
    }
    if (split > 0) {
      host.gpus.count -= split;
      host.cpus = std::max(1, host.cpus - split * cpus);
      host.memory_mib -= split * memory;
      host.sockets = host.cores_per_socket = host.threads_per_core = 0;
      std::erase_if(host.gpus.nvlinks, [&](const GpuLink& l) {
        return l.a >= host.gpus.count || l.b >= host.gpus.count;
      });
    }
    host.gpus.flexible.clear();
    out.push_back(std::move(host));
    for (Node& n : layout_nodes) out.push_back(std::move(n));
  }
  nodes = std::move(out);
}

Switch ReadSwitch(ConfigTable& t) {
  Switch s;
  s.name = SlurmName(t, "name");
  s.line = t.line();
  if (t.Has("nodes") == t.Has("switches")) {
    t.Invalid("nodes", "a switch lists nodes (a leaf) or switches (above the leaves), one of them");
  }
  if (t.Has("nodes")) s.nodes = Hostlist(t, "nodes");
  if (t.Has("switches")) s.switches = Hostlist(t, "switches");
  t.RejectUnknownKeys();
  return s;
}

Partition ReadPartition(ConfigTable& t, const std::vector<Node>& nodes) {
  Partition p;
  p.name = SlurmName(t, "name");
  p.line = t.line();
  if (std::string list = t.String("nodes", "ALL"); list == "ALL") {
    for (const Node& n : nodes) p.nodes.push_back(n.name);
  } else {
    p.nodes = Hostlist(t, "nodes");
  }
  p.is_default = t.Bool("default", false);
  p.default_time_min = Minutes(t, "default_time", p.default_time_min);
  p.max_time_min = Minutes(t, "max_time", p.max_time_min);
  p.priority_tier = Int32(t, "priority_tier", p.priority_tier, 0, 65533);
  std::string mode = t.String("preempt_mode", "off", {"off", "requeue", "cancel"});
  p.preempt_mode = mode == "requeue"  ? PreemptMode::kRequeue
                   : mode == "cancel" ? PreemptMode::kCancel
                                      : PreemptMode::kOff;
  p.qos = t.String("qos", "");
  if (!p.qos.empty() && !IsSlurmName(p.qos)) t.Invalid("qos", "not a QOS name");
  p.max_nodes = Int32(t, "max_nodes", 0, 0, 1 << 20);
  p.max_gpus_per_user = Int32(t, "max_gpus_per_user", 0, 0, 1 << 20);
  p.grace_time_s = Int32(t, "grace_time_s", 0, 0, 3600);
  t.RejectUnknownKeys();
  return p;
}

}  // namespace

std::string Partition::EffectiveQos() const {
  if (!qos.empty()) return qos;
  return max_gpus_per_user > 0 ? "bmas_" + name : "";
}

namespace {

// Without [[cluster.partitions]]: lab for everyone, training above the preemptible inference,
// and the inference floor: replicas (a deployment's --min) that nothing preempts.
std::vector<Partition> DefaultPartitions(const std::vector<Node>& nodes) {
  std::vector<std::string> all;
  for (const Node& n : nodes) all.push_back(n.name);
  return {
      Partition{.name = "lab",
                .nodes = all,
                .is_default = true,
                .max_time_min = 24 * 60,
                .priority_tier = 10},
      Partition{.name = "training", .nodes = all, .max_time_min = 7 * 24 * 60, .priority_tier = 10},
      Partition{.name = "inference",
                .nodes = all,
                .default_time_min = kUnlimitedMinutes,
                .priority_tier = 1,
                .preempt_mode = PreemptMode::kRequeue},
      Partition{.name = "inference_floor",
                .nodes = all,
                .default_time_min = kUnlimitedMinutes,
                .priority_tier = 1,
                .preempt_mode = PreemptMode::kOff},
  };
}

void ReadSlurm(ConfigTable& t, SlurmSettings& s) {
  s.cluster_name = t.String("cluster_name", s.cluster_name);
  // slurmdbd keys its tables by the cluster name, which Slurm lower-cases.
  if (s.cluster_name.empty() ||
      !std::all_of(s.cluster_name.begin(), s.cluster_name.end(), [](char ch) {
        return std::islower(static_cast<unsigned char>(ch)) ||
               std::isdigit(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
      })) {
    t.Invalid("cluster_name", "use lower-case letters, digits, '-' and '_'");
  }
  s.local = t.Bool("local", s.local);
  s.slurm_user = t.String("slurm_user", s.slurm_user);
  if (!IsSlurmName(s.slurm_user)) t.Invalid("slurm_user", "not a user name");
  s.slurmctld_port = Int32(t, "slurmctld_port", s.slurmctld_port, 1, 65535);
  s.slurmd_port = Int32(t, "slurmd_port", s.slurmd_port, 1, 65535);
  s.state_save_dir = AbsolutePath(t, "state_save_dir", s.state_save_dir, false);
  s.spool_dir = AbsolutePath(t, "spool_dir", s.spool_dir, false);
  s.log_dir = AbsolutePath(t, "log_dir", s.log_dir, false);
  s.run_dir = AbsolutePath(t, "run_dir", s.run_dir, false);
  s.tmpfs = AbsolutePath(t, "tmpfs", s.tmpfs, false);
  s.gpu_device_dir = AbsolutePath(t, "gpu_device_dir", s.gpu_device_dir, false);
  s.munge_socket = AbsolutePath(t, "munge_socket", s.munge_socket, true);
  s.cred_expire_s = Int32(t, "cred_expire_s", s.cred_expire_s, 0, 86400);
  s.jwt_key = AbsolutePath(t, "jwt_key", s.jwt_key, true);
  s.slurmrestd = t.String("slurmrestd", s.slurmrestd);
  s.slurmrestd_ca = AbsolutePath(t, "slurmrestd_ca", s.slurmrestd_ca, true);
  s.prolog = AbsolutePath(t, "prolog", s.prolog, true);
  s.epilog = AbsolutePath(t, "epilog", s.epilog, true);
  s.task_prolog = AbsolutePath(t, "task_prolog", s.task_prolog, true);
  s.kill_wait_s = Int32(t, "kill_wait_s", s.kill_wait_s, 0, 65533);
  s.def_mem_per_cpu_mib = t.Int("def_mem_per_cpu_mib", s.def_mem_per_cpu_mib, 0, int64_t{1} << 40);
  s.accounting = t.Bool("accounting", s.accounting);
  s.slurmdbd_host = t.String("slurmdbd_host", s.slurmdbd_host);
  s.slurmdbd_port = Int32(t, "slurmdbd_port", s.slurmdbd_port, 1, 65535);
  t.RejectUnknownKeys();
}

toml::table ParseToml(const std::function<toml::table()>& parse, const std::string& source) {
  try {
    return parse();
  } catch (const toml::parse_error& e) {
    if (e.source().begin.line == 0) {
      throw ConfigError(fmt::format("{}: cannot read the file: {}", source, e.description()));
    }
    throw ConfigError(fmt::format("{}:{}: {}", source, e.source().begin.line, e.description()));
  }
}

Cluster ReadRoot(const toml::table& root, const std::string& source) {
  ConfigTable top(root, source, "");
  std::optional<ConfigTable> cluster = top.Table("cluster");
  if (!cluster) throw ConfigError(fmt::format("{}: no [cluster] table", source));
  return ReadCluster(*cluster);
}

}  // namespace

const std::vector<std::string>* MigLayoutOf(const GpuSpec& gpus, int index) {
  for (const MigLayout& layout : gpus.mig_layouts) {
    if (std::find(layout.gpus.begin(), layout.gpus.end(), index) != layout.gpus.end()) {
      return &layout.profiles;
    }
  }
  return nullptr;
}

int WholeGpuCount(const GpuSpec& gpus) {
  int whole = 0;
  for (int g = 0; g < gpus.count; ++g) {
    whole += MigLayoutOf(gpus, g) == nullptr && ShardsOf(gpus, g) == 0 ? 1 : 0;
  }
  return whole;
}

int ShardsOf(const GpuSpec& gpus, int index) {
  for (const SharedGpus& s : gpus.shared) {
    if (std::find(s.gpus.begin(), s.gpus.end(), index) != s.gpus.end()) return s.shards;
  }
  return 0;
}

int SharedGpuCount(const GpuSpec& gpus) {
  int n = 0;
  for (int g = 0; g < gpus.count; ++g) n += ShardsOf(gpus, g) > 0 ? 1 : 0;
  return n;
}

std::string SharedGpuType(const GpuSpec& gpus) { return gpus.type + "-shared"; }

bool HasSplitGpus(const GpuSpec& gpus) {
  return !gpus.mig_layouts.empty() || !gpus.shared.empty();
}

std::vector<std::string> GpuGroups(const Cluster& cluster) {
  std::vector<std::string> groups;
  for (const Node& n : cluster.nodes) {
    if (!n.gpu_group.empty() &&
        std::find(groups.begin(), groups.end(), n.gpu_group) == groups.end()) {
      groups.push_back(n.gpu_group);
    }
  }
  return groups;
}

std::vector<const Node*> LayoutNodesOf(const Cluster& cluster, std::string_view group) {
  std::vector<const Node*> nodes;
  for (const Node& n : cluster.nodes) {
    if (!group.empty() && n.gpu_group == group) nodes.push_back(&n);
  }
  return nodes;
}

Result<const Node*> LayoutNodeOf(const Cluster& cluster, std::string_view group,
                                 const std::vector<std::string>& layout) {
  const std::vector<const Node*> nodes = LayoutNodesOf(cluster, group);
  if (nodes.empty()) {
    const std::vector<std::string> groups = GpuGroups(cluster);
    return NotFound(fmt::format(
        "{} is not a GPU whose layout follows demand; {}", group,
        groups.empty() ? "the inventory has none ([[cluster.nodes.gpus.flexible]] makes them)"
                       : fmt::format("those are {}", fmt::join(groups, ", "))));
  }
  std::vector<std::string> names;
  for (const Node* n : nodes) {
    if (GpuNodeLayout(*n) == layout) return n;
    names.push_back(LayoutText(GpuNodeLayout(*n)));
  }
  return InvalidArgument(fmt::format("{} is not one of {}'s layouts: {}", LayoutText(layout),
                                     group, fmt::join(names, "; ")));
}

bool IsLayoutNodeOf(std::string_view node, std::string_view host) {
  if (host.empty() || !node.starts_with(host) || !node.substr(host.size()).starts_with("-gpu")) {
    return false;
  }
  const std::string_view rest = node.substr(host.size() + 4);  // "<N>-<k>"
  const size_t dash = rest.find('-');
  auto digits = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return dash != std::string_view::npos && digits(rest.substr(0, dash)) &&
         digits(rest.substr(dash + 1));
}

int PhysicalGpuCount(const Cluster& cluster) {
  int gpus = 0;
  for (const Node& n : cluster.nodes) gpus += n.layout_index > 0 ? 0 : n.gpus.count;
  return gpus;
}

int HostCount(const Cluster& cluster) {
  std::set<std::string> hosts;
  for (const Node& n : cluster.nodes) hosts.insert(n.host.empty() ? n.name : n.host);
  return static_cast<int>(hosts.size());
}

std::vector<std::string> GpuNodeLayout(const Node& node) {
  const std::vector<std::string>* layout = MigLayoutOf(node.gpus, 0);
  return layout == nullptr ? std::vector<std::string>{} : *layout;
}

int ClusterShardsPerGpu(const Cluster& cluster) {
  for (const Node& n : cluster.nodes) {
    for (const SharedGpus& s : n.gpus.shared) return s.shards;
  }
  return 0;
}

int MigSliceCount(const GpuSpec& gpus, std::string_view profile) {
  int n = 0;
  for (const MigLayout& layout : gpus.mig_layouts) {
    const auto per_gpu = std::count(layout.profiles.begin(), layout.profiles.end(), profile);
    n += static_cast<int>(per_gpu * static_cast<int64_t>(layout.gpus.size()));
  }
  return n;
}

std::vector<std::vector<int>> LinkMatrix(const GpuSpec& gpus) {
  std::vector<std::vector<int>> m(gpus.count, std::vector<int>(gpus.count, 0));
  for (const GpuLink& l : gpus.nvlinks) {
    m[l.a][l.b] = l.count;
    m[l.b][l.a] = l.count;
  }
  return m;
}

const Node* Cluster::FindNode(std::string_view name) const {
  auto it = std::find_if(nodes.begin(), nodes.end(), [&](const Node& n) { return n.name == name; });
  return it == nodes.end() ? nullptr : &*it;
}

int SlurmdPortOf(const Cluster& cluster, size_t index) {
  const Node& n = cluster.nodes[index];
  if (n.port != 0) return n.port;
  if (cluster.slurm.local) return cluster.slurm.slurmd_port + static_cast<int>(index);
  if (n.gpu_group.empty()) return cluster.slurm.slurmd_port;
  return cluster.slurm.slurmd_port + 10 + 8 * n.gpus.first_index + n.layout_index;
}

Cluster ReadCluster(ConfigTable& t) {
  Cluster c;
  c.source = t.source();
  std::optional<ConfigTable> controller = t.Table("controller");
  if (!controller) t.Invalid("controller", "required: { name = \"...\", address = \"...\" }");
  c.controller = ReadController(*controller);
  std::vector<ConfigTable> groups = t.TableArray("nodes");
  if (groups.empty()) t.Invalid("nodes", "required: at least one [[cluster.nodes]] entry");
  for (ConfigTable& g : groups) ReadNodeGroup(g, c.nodes);
  SplitOffGpuNodes(c.nodes);
  for (ConfigTable& s : t.TableArray("switches")) c.switches.push_back(ReadSwitch(s));
  for (ConfigTable& p : t.TableArray("partitions"))
    c.partitions.push_back(ReadPartition(p, c.nodes));
  // A host's GPU nodes go where the host goes.
  const auto with_gpu_nodes = [&](std::vector<std::string>& names) {
    std::vector<std::string> out;
    for (const std::string& name : names) {
      out.push_back(name);
      for (const Node& n : c.nodes) {
        if (n.host == name && std::find(names.begin(), names.end(), n.name) == names.end()) {
          out.push_back(n.name);
        }
      }
    }
    names = std::move(out);
  };
  for (Switch& s : c.switches) with_gpu_nodes(s.nodes);
  for (Partition& p : c.partitions) with_gpu_nodes(p.nodes);
  if (c.partitions.empty()) c.partitions = DefaultPartitions(c.nodes);
  if (auto s = t.Table("slurm")) ReadSlurm(*s, c.slurm);
  t.RejectUnknownKeys();
  if (auto valid = ValidateCluster(c); !valid) throw ConfigError(valid.error().message);
  return c;
}

Cluster ParseCluster(std::string_view toml_text, const std::string& source) {
  toml::table root =
      ParseToml([&] { return toml::parse(toml_text, std::string_view(source)); }, source);
  return ReadRoot(root, source);
}

Cluster LoadCluster(const std::string& path) {
  toml::table root = ParseToml([&] { return toml::parse_file(path); }, path);
  return ReadRoot(root, path);
}

Result<int64_t> ParseSlurmMinutes(std::string_view text) {
  auto bad = [&] {
    return InvalidArgument(
        fmt::format("'{}' is not a Slurm time: give minutes, HH:MM:SS, "
                    "D-HH:MM:SS or UNLIMITED",
                    text));
  };
  std::string upper(text);
  std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
  if (upper == "UNLIMITED" || upper == "INFINITE") return kUnlimitedMinutes;
  int64_t days = 0;
  std::string_view rest = text;
  if (size_t dash = text.find('-'); dash != text.npos) {
    std::string_view d = text.substr(0, dash);
    if (d.empty() || d.size() > 5 || d.find_first_not_of("0123456789") != d.npos) return bad();
    days = std::stoll(std::string(d));
    rest = text.substr(dash + 1);
  }
  std::vector<int64_t> fields;
  size_t start = 0;
  while (true) {
    size_t colon = rest.find(':', start);
    std::string_view f = rest.substr(start, colon == rest.npos ? rest.npos : colon - start);
    if (f.empty() || f.size() > 6 || f.find_first_not_of("0123456789") != f.npos) return bad();
    fields.push_back(std::stoll(std::string(f)));
    if (colon == rest.npos) break;
    start = colon + 1;
  }
  if (fields.size() > 3) return bad();
  // Without days: M, M:S, H:M:S. With days: D-H, D-H:M, D-H:M:S.
  int64_t seconds = 0;
  if (text.find('-') != text.npos) {
    int64_t weights[] = {3600, 60, 1};
    for (size_t i = 0; i < fields.size(); ++i) seconds += fields[i] * weights[i];
  } else if (fields.size() == 3) {
    seconds = fields[0] * 3600 + fields[1] * 60 + fields[2];
  } else {
    seconds = fields[0] * 60 + (fields.size() == 2 ? fields[1] : 0);
  }
  seconds += days * 86400;
  return (seconds + 59) / 60;
}

std::string FormatSlurmMinutes(int64_t minutes) {
  if (minutes == kUnlimitedMinutes) return "UNLIMITED";
  int64_t days = minutes / 1440;
  int64_t hh = minutes % 1440 / 60;
  int64_t mm = minutes % 60;
  if (days > 0) return fmt::format("{}-{:02}:{:02}:00", days, hh, mm);
  return fmt::format("{:02}:{:02}:00", hh, mm);
}

std::string_view FabricName(Fabric fabric) {
  switch (fabric) {
    case Fabric::kRoce:
      return "roce";
    case Fabric::kInfiniband:
      return "infiniband";
    case Fabric::kEthernet:
      break;
  }
  return "ethernet";
}

}  // namespace bmas
