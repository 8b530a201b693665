#include "doctor/mig_check.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>


namespace bmas::doctor {
namespace {

std::string Sum(const std::vector<std::string>& profiles) {
  return profiles.empty() ? "no MIG device" : fmt::format("{}", fmt::join(profiles, " + "));
}

// The profiles of a GPU's MIG devices by GPU instance id.
std::map<int, std::string> ProfilesById(const GpuReading& g) {
  std::map<int, std::string> out;
  for (const MigDeviceReading& m : g.mig_devices) out[m.gpu_instance] = m.profile;
  return out;
}

std::string Described(const std::map<int, std::string>& by_id) {
  std::vector<std::string> parts;
  for (const auto& [id, profile] : by_id) parts.push_back(fmt::format("{} (GI {})", profile, id));
  return Sum(parts);
}

// The commands that give GPU `index` `layout` (root; the GPU must have no process on it).
std::string SplitCommands(int index, const GpuReading& g, const std::vector<std::string>& layout) {
  std::string enable = g.mig_enabled ? "" : fmt::format("nvidia-smi -i {} -mig 1 && ", index);
  std::string clear = g.mig_devices.empty()
                          ? ""
                          : fmt::format("nvidia-smi mig -i {} -dci && nvidia-smi mig -i {} -dgi && ",
                                        index, index);
  return fmt::format("{}{}nvidia-smi mig -i {} -cgi {} -C", enable, clear, index,
                     fmt::join(layout, ","));
}

}  // namespace

Check MigLayoutCheck(const Result<std::vector<GpuReading>>& gpus, const InventoryNode& inventory) {
  Check c{"mig-layout", CheckKind::kBmas, true,
          fmt::format("the MIG layouts {} gives this node's GPUs", inventory.source), "", ""};
  if (inventory.node == nullptr) {
    c.ok = false;
    c.found = fmt::format("{} lists no node {}", inventory.source, inventory.node_name);
    c.fix = fmt::format("name this node as the inventory does (--node NAME), or add it to {}",
                        inventory.source);
    return c;
  }
  const GpuSpec& spec = inventory.node->gpus;
  const bool any_layout = !spec.mig_layouts.empty();
  if (!gpus) {
    c.ok = !any_layout;
    c.found = "no GPU/driver: " + gpus.error().message;
    if (!c.ok) c.fix = "the NVIDIA driver (libnvidia-ml.so.1), for the GPUs the inventory splits";
    return c;
  }
  std::map<int, const GpuReading*> by_index;
  for (const GpuReading& g : *gpus) by_index[g.index] = &g;
  std::vector<std::string> found, fixes;
  for (int i = 0; i < spec.count; ++i) {
    const auto reading = by_index.find(i);
    const std::vector<std::string>* layout = MigLayoutOf(spec, i);
    if (reading == by_index.end()) {
      if (layout != nullptr) {
        c.ok = false;
        found.push_back(fmt::format("GPU {}: not seen by NVML; the inventory splits it into {}",
                                    i, Sum(*layout)));
      }
      continue;
    }
    const GpuReading& g = *reading->second;
    if (layout == nullptr) {
      if (g.mig_enabled) {
        c.ok = false;
        found.push_back(fmt::format("GPU {}: MIG on ({}) but whole in the inventory", i,
                                    Described(ProfilesById(g))));
        fixes.push_back(fmt::format("nvidia-smi mig -i {} -dci && nvidia-smi mig -i {} -dgi && "
                                    "nvidia-smi -i {} -mig 0",
                                    i, i, i));
      } else {
        found.push_back(fmt::format("GPU {}: whole", i));
      }
      continue;
    }
    // What gres.conf fences: GPU instance k (1, 2, ...) is the layout's k-th profile.
    std::map<int, std::string> expected;
    for (size_t k = 0; k < layout->size(); ++k) {
      expected[static_cast<int>(k) + 1] = (*layout)[k];
    }
    const std::map<int, std::string> actual = ProfilesById(g);
    if (!g.mig_enabled) {
      c.ok = false;
      found.push_back(fmt::format("GPU {}: MIG off; the inventory splits it into {}", i,
                                  Sum(*layout)));
      fixes.push_back(SplitCommands(i, g, *layout));
      continue;
    }
    if (actual == expected) {
      found.push_back(fmt::format("GPU {}: {}", i, Sum(*layout)));
      continue;
    }
    c.ok = false;
    std::vector<std::string> want = *layout, have;
    for (const auto& [id, profile] : actual) have.push_back(profile);
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    if (want == have) {
      // The right slices under other GPU instance ids: gres.conf would fence the wrong ones.
      found.push_back(fmt::format(
          "GPU {}: {} where gres.conf fences {}: the same profiles, other GPU instance ids", i,
          Described(actual), Described(expected)));
      fixes.push_back(fmt::format(
          "recreate GPU {}'s instances in the inventory's order ({}), or list its layout in "
          "the order of `nvidia-smi mig -i {} -lgi`'s ids",
          i, SplitCommands(i, g, *layout), i));
    } else {
      found.push_back(fmt::format("GPU {}: {}; the inventory says {}", i, Described(actual),
                                  Sum(*layout)));
      fixes.push_back(SplitCommands(i, g, *layout));
    }
  }
  for (const GpuReading& g : *gpus) {
    if (g.index >= spec.count) {
      found.push_back(fmt::format("GPU {}: not in the inventory ({} GPUs)", g.index, spec.count));
    }
  }
  c.found = found.empty() ? "no GPU in the inventory or on this node"
                          : fmt::format("{}", fmt::join(found, "; "));
  if (!c.ok) {
    c.fix = fmt::format("as root, with no job on the GPU: {}; then restart slurmd",
                        fmt::join(fixes, "; "));
  }
  return c;
}

}  // namespace bmas::doctor
