#include "engine/timing.h"

#include "core/mig.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "common/config_table.h"

namespace bmas::engine {

extern const char kBuiltinProfilesToml[];  // generated from profiles.toml

int Profile::DerivedKvBlocks(int block_size_tokens) const {
  double bytes = (gpu_memory_utilization * gpu_memory_gib - weights_gib - activation_peak_gib) *
                 1024.0 * 1024.0 * 1024.0;
  double per_block = static_cast<double>(kv_bytes_per_token) * block_size_tokens;
  double blocks = bytes / per_block;
  return blocks < 1 ? 0 : static_cast<int>(blocks);
}

std::string_view BuiltinProfilesToml() { return kBuiltinProfilesToml; }

ProfileMap ParseProfiles(std::string_view toml_text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    throw ConfigError(fmt::format("{}:{}: {}", source, e.source().begin.line, e.description()));
  }
  ConfigTable top(root, source, "");
  ProfileMap profiles;
  if (auto all = top.Table("profile")) {
    for (const std::string& name : all->Keys()) {
      auto t = all->Table(name);
      Profile p;
      p.name = name;
      p.description = t->String("description", "");
      p.time.frontend_s = t->Double("frontend_overhead_s", 0, 0, 10);
      p.time.base_s = t->Double("step_base_s", 0, 0, 10);
      p.time.per_decode_token_s = t->Double("per_decode_token_s", 0, 0, 1);
      p.time.per_prefill_token_s = t->Double("per_prefill_token_s", 0, 0, 1);
      p.time.per_context_token_s = t->Double("per_context_token_s", 0, 0, 1);
      p.max_model_len = static_cast<int>(t->Int("max_model_len", 131072, 1, 1 << 24));
      p.max_num_seqs = static_cast<int>(t->Int("max_num_seqs", 1024, 1, 1 << 20));
      p.max_num_batched_tokens =
          static_cast<int>(t->Int("max_num_batched_tokens", 8192, 1, 1 << 24));
      p.block_size = static_cast<int>(t->Int("block_size", 16, 1, 4096));
      p.num_kv_blocks = static_cast<int>(t->Int("num_kv_blocks", 0, 0, 1 << 28));
      p.gpu_memory_gib = t->Double("gpu_memory_gib", 80, 0, 1e6);
      p.gpu_memory_utilization = t->Double("gpu_memory_utilization", 0.9, 0, 1);
      p.weights_gib = t->Double("weights_gib", 15, 0, 1e6);
      p.activation_peak_gib = t->Double("activation_peak_gib", 2, 0, 1e6);
      p.kv_bytes_per_token = t->Int("kv_bytes_per_token", 131072, 1, int64_t{1} << 40);
      p.startup_s = t->Double("startup_s", 0, 0, 24 * 3600);
      p.wake_s_level1 = t->Double("wake_s_level1", 0, 0, 24 * 3600);
      p.wake_s_level2 = t->Double("wake_s_level2", 0, 0, 24 * 3600);
      t->RejectUnknownKeys();
      if (p.num_kv_blocks == 0 && p.DerivedKvBlocks(p.block_size) == 0) {
        throw ConfigError(fmt::format(
            "{}: profile.{}: the memory figures leave no room for a KV cache; set num_kv_blocks "
            "or lower weights_gib",
            source, name));
      }
      profiles[name] = p;
    }
  }
  top.RejectUnknownKeys();
  return profiles;
}

const ProfileMap& BuiltinProfiles() {
  static const ProfileMap* profiles =
      new ProfileMap(ParseProfiles(kBuiltinProfilesToml, "profiles.toml (built in)"));
  return *profiles;
}

ProfileMap LoadProfiles(const std::string& file) {
  ProfileMap profiles = BuiltinProfiles();
  if (file.empty()) return profiles;
  std::ifstream in(file);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the profiles file", file));
  std::stringstream text;
  text << in.rdbuf();
  for (auto& [name, p] : ParseProfiles(text.str(), file)) profiles[name] = p;
  return profiles;
}

Result<Profile> ProfileOnMigSlice(const Profile& whole, std::string_view slice) {
  // A profile's name means different slices on different GPUs (1g.10gb is one memory slice of
  // an 80 GB part, two of a 40 GB one): the model whose memory is nearest the profile's.
  const MigProfile* mig = nullptr;
  double nearest = 0;
  for (const MigGpuModel& model : MigGpuModels()) {
    const MigProfile* found = FindMigProfile(model, slice);
    const double distance = std::abs(model.memory_gb - whole.gpu_memory_gib);
    if (found != nullptr && (mig == nullptr || distance < nearest)) {
      mig = found;
      nearest = distance;
    }
  }
  if (mig == nullptr) {
    return InvalidArgument(
        fmt::format("'{}' is not a MIG profile of a GPU bmas knows (for example 1g.10gb, "
                    "3g.40gb, 7g.80gb)",
                    slice),
        "profile");
  }
  const double compute = static_cast<double>(mig->compute_slices) / kMigComputeSlices;
  const double memory = static_cast<double>(mig->memory_slices) / kMigMemorySlices;
  Profile p = whole;
  p.name = fmt::format("{}@{}", whole.name, slice);
  p.description = fmt::format("{}, on a MIG slice {} ({}/7 of its SMs, {}/8 of its memory)",
                              whole.description, slice, mig->compute_slices, mig->memory_slices);
  p.gpu_memory_gib = whole.gpu_memory_gib * memory;
  p.time.base_s = whole.time.base_s / memory;
  p.time.per_context_token_s = whole.time.per_context_token_s / memory;
  p.time.per_prefill_token_s = whole.time.per_prefill_token_s / compute;
  p.time.per_decode_token_s = whole.time.per_decode_token_s / compute;
  if (whole.num_kv_blocks > 0) {
    p.num_kv_blocks = static_cast<int>(whole.num_kv_blocks * memory);
  }
  const double free_gib =
      p.gpu_memory_gib * p.gpu_memory_utilization - p.weights_gib - p.activation_peak_gib;
  if (free_gib <= 0 || (p.num_kv_blocks == 0 && p.DerivedKvBlocks(p.block_size) <= 0)) {
    return InvalidArgument(
        fmt::format("{} needs {:.1f} GiB for its weights and activations; a {} slice has "
                    "{:.1f} GiB ({:.0f}% usable): pick a larger slice",
                    whole.name, p.weights_gib + p.activation_peak_gib, slice, p.gpu_memory_gib,
                    p.gpu_memory_utilization * 100),
        "profile");
  }
  return p;
}

Result<Profile> FindProfile(const ProfileMap& profiles, std::string_view name) {
  const size_t at = name.find('@');
  const std::string_view base = name.substr(0, at);
  auto it = profiles.find(base);
  if (it == profiles.end()) {
    std::vector<std::string> names;
    for (const auto& [known, p] : profiles) names.push_back(known);
    return InvalidArgument(fmt::format("unknown profile '{}'; known profiles: {} (NAME@SLICE runs "
                                       "one on a MIG slice, such as {}@3g.40gb)",
                                       base, fmt::join(names, ", "),
                                       names.empty() ? "NAME" : names.front()),
                           "profile");
  }
  if (at == std::string_view::npos) return it->second;
  return ProfileOnMigSlice(it->second, name.substr(at + 1));
}

}  // namespace bmas::engine
