#include "core/mig.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace bmas {
namespace {

// Placements, in memory slices (see mig.h).
constexpr std::array<int, 7> kOneSlice{0, 1, 2, 3, 4, 5, 6};
constexpr std::array<int, 4> kTwoSlicesOneG{0, 2, 4, 6};
constexpr std::array<int, 3> kTwoSlices{0, 2, 4};
constexpr std::array<int, 2> kFourSlicesThreeG{0, 4};
constexpr std::array<int, 1> kAtZero{0};

// NVML_GPU_INSTANCE_PROFILE_* (nvml.h).
constexpr unsigned kNvml1Slice = 0x0;
constexpr unsigned kNvml2Slice = 0x1;
constexpr unsigned kNvml3Slice = 0x2;
constexpr unsigned kNvml4Slice = 0x3;
constexpr unsigned kNvml7Slice = 0x4;
constexpr unsigned kNvml1SliceRev1 = 0x7;  // 1g with media extensions
constexpr unsigned kNvml1SliceRev2 = 0x9;  // 1g with two memory slices

// The seven profiles each of these models has, by their names on the model: 1g, 1g+me, 1g with
// two memory slices, 2g, 3g, 4g, 7g. The geometry (compute slices, memory slices, instances
// per GPU, placements, NVML profile) is the same on all of them; only the memory in the names
// differs, as the guide's table for each model lists them.
constexpr std::array<MigProfile, 7> Profiles(const std::array<std::string_view, 7>& names) {
  return {{
      {names[0], 1, 1, 7, kOneSlice, kNvml1Slice},
      {names[1], 1, 1, 1, kOneSlice, kNvml1SliceRev1},
      {names[2], 1, 2, 4, kTwoSlicesOneG, kNvml1SliceRev2},
      {names[3], 2, 2, 3, kTwoSlices, kNvml2Slice},
      {names[4], 3, 4, 2, kFourSlicesThreeG, kNvml3Slice},
      {names[5], 4, 4, 1, kAtZero, kNvml4Slice},
      {names[6], 7, 8, 1, kAtZero, kNvml7Slice},
  }};
}

const std::array<MigProfile, 7> kA100_40 =
    Profiles({"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"});
// The A100 80GB and the H100 80GB have the same names too.
const std::array<MigProfile, 7> kA80GB =
    Profiles({"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"});
const std::array<MigProfile, 7> kH200_141 =
    Profiles({"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"});

const std::array<MigGpuModel, 4> kModels{
    MigGpuModel{"A100 40GB", "a100", 40, kA100_40},
    MigGpuModel{"A100 80GB", "a100", 80, kA80GB},
    MigGpuModel{"H100 80GB", "h100", 80, kA80GB},
    MigGpuModel{"H200 141GB", "h200", 141, kH200_141},
};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Article(std::string_view model) {
  // "an H100", "an A100", "a GH200"...: by the sound of the first letter.
  return std::string_view("AEFHILMNORSX").find(model.front()) != std::string_view::npos ? "an"
                                                                                         : "a";
}

std::string Sum(const std::vector<std::string>& layout) {
  return fmt::format("{}", fmt::join(layout, " + "));
}

// Depth-first search over the instances, largest first: each takes a start where its memory
// slices are free.
bool Place(const std::vector<size_t>& order, size_t next,
           const std::vector<const MigProfile*>& profiles, std::array<bool, kMigMemorySlices>& used,
           std::vector<int>& starts) {
  if (next == order.size()) return true;
  const size_t i = order[next];
  const MigProfile& p = *profiles[i];
  for (int start : p.starts) {
    if (start + p.memory_slices > kMigMemorySlices) continue;
    bool free = true;
    for (int s = start; s < start + p.memory_slices; ++s) free = free && !used[s];
    if (!free) continue;
    for (int s = start; s < start + p.memory_slices; ++s) used[s] = true;
    starts[i] = start;
    if (Place(order, next + 1, profiles, used, starts)) return true;
    for (int s = start; s < start + p.memory_slices; ++s) used[s] = false;
  }
  return false;
}

}  // namespace

std::span<const MigGpuModel> MigGpuModels() { return kModels; }

Result<const MigGpuModel*> FindMigGpuModel(std::string_view type, int memory_gb) {
  const std::string lower = Lower(type);
  std::vector<std::string> known;
  for (const MigGpuModel& m : kModels) {
    known.push_back(std::string(m.name));
    if (lower.find(m.family) != std::string::npos && m.memory_gb == memory_gb) return &m;
  }
  return InvalidArgument(fmt::format(
      "no MIG tables for GPU type \"{}\" with memory_gb = {}: bmas knows {} (the type names "
      "the family, e.g. \"h100\", and memory_gb the size)",
      type, memory_gb, fmt::join(known, ", ")));
}

const MigProfile* FindMigProfile(const MigGpuModel& model, std::string_view name) {
  for (const MigProfile& p : model.profiles) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Result<std::vector<MigPlacement>> PlaceMigLayout(const MigGpuModel& model,
                                                 const std::vector<std::string>& layout) {
  if (layout.empty()) return InvalidArgument("an empty MIG layout: list at least one profile");
  std::vector<const MigProfile*> profiles;
  std::map<std::string_view, int> counts;
  int compute = 0;
  int memory = 0;
  for (const std::string& name : layout) {
    const MigProfile* p = FindMigProfile(model, name);
    if (p == nullptr) {
      std::vector<std::string_view> names;
      for (const MigProfile& q : model.profiles) names.push_back(q.name);
      return InvalidArgument(fmt::format("\"{}\" is not a MIG profile of {} {} (it has {})", name,
                                         Article(model.name), model.name, fmt::join(names, ", ")));
    }
    profiles.push_back(p);
    compute += p->compute_slices;
    memory += p->memory_slices;
    ++counts[p->name];
  }
  if (compute > kMigComputeSlices) {
    return InvalidArgument(fmt::format("{} needs {} compute slices; {} {} has {}", Sum(layout),
                                       compute, Article(model.name), model.name,
                                       kMigComputeSlices));
  }
  if (memory > kMigMemorySlices) {
    return InvalidArgument(fmt::format("{} needs {} memory slices; {} {} has {}", Sum(layout),
                                       memory, Article(model.name), model.name, kMigMemorySlices));
  }
  for (const auto& [name, n] : counts) {
    const MigProfile* p = FindMigProfile(model, name);
    if (n > p->max_instances) {
      return InvalidArgument(fmt::format("{} instances of {}; {} {} holds at most {}", n, name,
                                         Article(model.name), model.name, p->max_instances));
    }
  }
  // By placements alone a 4g at slice 0 and a 3g at slice 4 would fit, but NVIDIA's list of the
  // valid combinations for these GPUs has no 4g beside a 3g, and the driver refuses it.
  const auto has = [&](int compute) {
    return std::any_of(profiles.begin(), profiles.end(),
                       [&](const MigProfile* p) { return p->compute_slices == compute; });
  };
  if (has(4) && has(3)) {
    return InvalidArgument(fmt::format(
        "{}: a 4g and a 3g instance never share a GPU (NVIDIA's valid MIG combinations have "
        "none); use 4g with 2g and 1g, or 3g with 3g, 2g and 1g",
        Sum(layout)));
  }
  std::vector<size_t> order(layout.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return profiles[a]->memory_slices > profiles[b]->memory_slices;
  });
  std::array<bool, kMigMemorySlices> used{};
  std::vector<int> starts(layout.size(), 0);
  if (!Place(order, 0, profiles, used, starts)) {
    return InvalidArgument(fmt::format(
        "{} fits no placement on {} {}: NVIDIA places a 1-slice profile at memory slice 0-6, "
        "2g and 1g with two slices at 0, 2, 4 (1g also 6), 3g at 0 or 4, 4g and 7g at 0",
        Sum(layout), Article(model.name), model.name));
  }
  std::vector<MigPlacement> out;
  for (size_t i = 0; i < layout.size(); ++i) out.push_back({profiles[i], starts[i]});
  return out;
}

std::vector<MigSlice> MigSlicesOf(const GpuSpec& gpus) {
  std::vector<MigSlice> slices;
  for (int g = 0; g < gpus.count; ++g) {
    const std::vector<std::string>* layout = MigLayoutOf(gpus, g);
    if (layout == nullptr) continue;
    auto model = FindMigGpuModel(gpus.type, gpus.memory_gb);
    if (!model) continue;  // ValidateCluster refuses this
    auto placed = PlaceMigLayout(**model, *layout);
    if (!placed) continue;
    for (size_t i = 0; i < placed->size(); ++i) {
      slices.push_back({gpus.first_index + g, static_cast<int>(i) + 1, 0, (*placed)[i]});
    }
  }
  return slices;
}

namespace {
constexpr int kCapMinorsBeforeGpus = 3;  // minor 0 unused, config 1, monitor 2
constexpr int kComputeInstancesPerGi = 8;
constexpr int kMinorsPerGi = 1 + kComputeInstancesPerGi;
constexpr int kGpuInstancesPerGpu = 15;
}  // namespace

bool IsMigProfileName(std::string_view name) {
  // <digits>g.<digits>gb, then "+me" or nothing.
  auto digits = [&](size_t& at) {
    const size_t start = at;
    while (at < name.size() && name[at] >= '0' && name[at] <= '9') ++at;
    return at > start;
  };
  size_t at = 0;
  if (!digits(at) || name.substr(at, 2) != "g.") return false;
  at += 2;
  if (!digits(at) || name.substr(at, 2) != "gb") return false;
  at += 2;
  const std::string_view rest = name.substr(at);
  return rest.empty() || rest == "+me";
}

int MigGpuInstanceCapMinor(int gpu, int gpu_instance) {
  return kCapMinorsBeforeGpus + gpu * kGpuInstancesPerGpu * kMinorsPerGi +
         gpu_instance * kMinorsPerGi;
}

int MigComputeInstanceCapMinor(int gpu, int gpu_instance, int compute_instance) {
  return MigGpuInstanceCapMinor(gpu, gpu_instance) + 1 + compute_instance;
}

}  // namespace bmas
