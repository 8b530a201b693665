#include "slurm/gres_slots.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/hostlist.h"
#include "core/mig.h"

namespace bmas::slurm {
namespace {

// The number after the last `prefix` in `path`'s file name ("nvidia2" → 2), or -1.
int NumberAfter(std::string_view path, std::string_view prefix) {
  const size_t slash = path.rfind('/');
  std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (!name.starts_with(prefix)) return -1;
  name.remove_prefix(prefix.size());
  if (name.empty() || name.size() > 6 ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  return std::atoi(std::string(name).c_str());
}

// The value of `key=` among a line's words, or "".
std::string Value(const std::vector<std::string>& words, std::string_view key) {
  for (const std::string& w : words) {
    if (w.size() > key.size() && w.compare(0, key.size(), key) == 0 && w[key.size()] == '=') {
      return w.substr(key.size() + 1);
    }
  }
  return "";
}

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, sep);) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

}  // namespace

Result<std::vector<GresSlot>> GpuGresSlots(std::string_view gres_conf, std::string_view node) {
  std::vector<GresSlot> slots;
  std::istringstream lines{std::string(gres_conf)};
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    line = line.substr(0, line.find('#'));
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    if (Value(words, "Name") != "gpu") continue;
    auto nodes = ExpandHostlist(Value(words, "NodeName"));
    if (!nodes || std::find(nodes->begin(), nodes->end(), node) == nodes->end()) continue;
    std::string files = Value(words, "MultipleFiles");
    if (files.empty()) files = Value(words, "File");
    GresSlot slot;
    slot.type = Value(words, "Type");
    std::vector<int> caps;
    for (const std::string& f : Split(files, ',')) {
      if (int n = NumberAfter(f, "nvidia-cap"); n >= 0) {
        caps.push_back(n);
        slot.cap_files.push_back(f);
      } else if (int g = NumberAfter(f, "nvidia"); g >= 0) {
        slot.gpu = g;
        slot.gpu_file = f;
      }
    }
    if (slot.gpu < 0) {
      return InvalidArgument(fmt::format(
          "gres.conf:{}: node {}: no /dev/nvidiaN among its files ({})", number, node, files));
    }
    // A slice: the capability of one of its GPU's instances (the other is its compute
    // instance's).
    for (int gi = 0; gi < 15 && slot.gpu_instance < 0; ++gi) {
      if (std::find(caps.begin(), caps.end(), MigGpuInstanceCapMinor(slot.gpu, gi)) !=
          caps.end()) {
        slot.gpu_instance = gi;
      }
    }
    slots.push_back(slot);
  }
  // Slurm's order: type by type, in the order the types first appear.
  std::vector<std::string> types;
  for (const GresSlot& s : slots) {
    if (std::find(types.begin(), types.end(), s.type) == types.end()) types.push_back(s.type);
  }
  std::stable_sort(slots.begin(), slots.end(), [&](const GresSlot& a, const GresSlot& b) {
    return std::find(types.begin(), types.end(), a.type) <
           std::find(types.begin(), types.end(), b.type);
  });
  return slots;
}

std::vector<GresSlot> ReadNodeGresSlots(const std::string& node, const std::string& slurm_conf) {
  std::string conf = slurm_conf;
  if (const char* env = std::getenv("SLURM_CONF"); conf.empty() && env != nullptr) conf = env;
  if (conf.empty()) conf = "/etc/slurm/slurm.conf";
  std::ifstream in(std::filesystem::path(conf).parent_path() / "gres.conf");
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  auto slots = GpuGresSlots(text.str(), node);
  return slots ? *slots : std::vector<GresSlot>{};
}

Result<JobGres> JobGresOf(const std::vector<GresSlot>& slots, const std::vector<int>& allocated) {
  JobGres out;
  for (int index : allocated) {
    if (index < 0 || static_cast<size_t>(index) >= slots.size()) {
      return NotFound(fmt::format("gres index {} is not in this node's gres.conf ({} GPUs)",
                                  index, slots.size()));
    }
    const GresSlot& slot = slots[index];
    if (std::find(out.gpus.begin(), out.gpus.end(), slot.gpu) == out.gpus.end()) {
      out.gpus.push_back(slot.gpu);
    }
    for (const std::string& cap : slot.cap_files) out.caps.emplace_back(slot.gpu, cap);
  }
  std::sort(out.gpus.begin(), out.gpus.end());
  return out;
}

Result<std::string> MigVisibleDevices(const std::vector<GresSlot>& slots,
                                      const std::vector<int>& allocated,
                                      const std::vector<GpuReading>& gpus) {
  std::vector<std::string> uuids;
  bool any_slice = false;
  for (int index : allocated) {
    if (index < 0 || static_cast<size_t>(index) >= slots.size()) {
      return NotFound(fmt::format("gres index {} is not in this node's gres.conf ({} GPUs)",
                                  index, slots.size()));
    }
    const GresSlot& slot = slots[index];
    const auto gpu = std::find_if(gpus.begin(), gpus.end(),
                                  [&](const GpuReading& g) { return g.index == slot.gpu; });
    if (gpu == gpus.end()) return NotFound(fmt::format("NVML lists no GPU {}", slot.gpu));
    if (slot.gpu_instance < 0) {
      uuids.push_back(gpu->uuid);
      continue;
    }
    any_slice = true;
    const auto mig = std::find_if(
        gpu->mig_devices.begin(), gpu->mig_devices.end(),
        [&](const MigDeviceReading& m) { return m.gpu_instance == slot.gpu_instance; });
    if (mig == gpu->mig_devices.end() || mig->uuid.empty()) {
      return NotFound(fmt::format("NVML lists no MIG device of GPU {} with GPU instance {}",
                                  slot.gpu, slot.gpu_instance));
    }
    uuids.push_back(mig->uuid);
  }
  if (!any_slice) return std::string();
  return fmt::format("{}", fmt::join(uuids, ","));
}

}  // namespace bmas::slurm
