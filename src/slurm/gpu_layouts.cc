#include "slurm/gpu_layouts.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/mig_relayout.h"

namespace bmas::slurm {

Result<std::map<std::string, SavedLayout>> ReadGpuLayouts(const std::string& path) {
  std::map<std::string, SavedLayout> saved;
  std::ifstream in(path);
  if (!in) return saved;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string node;
    int64_t changed_at = 0;
    std::string rest;
    words >> node >> changed_at;
    std::getline(words, rest);
    auto layout = ParseLayoutText(rest);
    if (node.empty() || words.bad() || !layout) {
      return InvalidArgument(fmt::format(
          "{}:{}: expected \"<node> <unix seconds> <layout>\"{}", path, number,
          layout ? "" : ": " + layout.error().message));
    }
    saved[node] = SavedLayout{std::move(*layout), changed_at};
  }
  return saved;
}

Result<void> WriteGpuLayouts(const std::string& path,
                             const std::map<std::string, SavedLayout>& saved) {
  std::string text =
      "# The present MIG layouts of GPUs whose layout follows demand; written by bmas.\n";
  for (const auto& [node, s] : saved) {
    text += fmt::format("{} {} {}\n", node, s.changed_at, LayoutText(s.layout));
  }
  const std::string temp = path + ".new";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << text;
    if (!out.flush()) return Internal(fmt::format("cannot write {}", temp));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return Internal(fmt::format("cannot replace {}", path));
  }
  return {};
}

Result<std::map<std::string, std::string>> ActiveLayoutNodes(
    const Cluster& cluster, const std::map<std::string, SavedLayout>& saved,
    const std::string& path) {
  std::map<std::string, std::string> active;
  for (const std::string& group : GpuGroups(cluster)) {
    active[group] = LayoutNodesOf(cluster, group).front()->name;
  }
  for (const auto& [group, s] : saved) {
    auto node = LayoutNodeOf(cluster, group, s.layout);
    if (!node) {
      return Error{node.error().code,
                   fmt::format("{}: {} (the inventory changed since; remove the line, or put the "
                               "layout back among the GPU's layouts)",
                               path, node.error().message)};
    }
    active[group] = (*node)->name;
  }
  return active;
}

std::vector<std::string> StandbyLayoutNodes(const Cluster& cluster,
                                            const std::map<std::string, std::string>& active) {
  std::vector<std::string> standby;
  for (const Node& n : cluster.nodes) {
    if (n.gpu_group.empty()) continue;
    const auto it = active.find(n.gpu_group);
    if (it == active.end() || it->second != n.name) standby.push_back(n.name);
  }
  return standby;
}

}  // namespace bmas::slurm
