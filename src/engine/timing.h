#pragma once

// Hardware profiles: how long a step takes and how big the engine is, per named profile.

#include <map>
#include <string>
#include <string_view>

#include "common/result.h"

namespace bmas::engine {

// step_seconds = base + per_decode_token * decode_tokens + per_prefill_token * prefill_tokens
//              + per_context_token * context_tokens
// where context_tokens counts the KV entries the step reads (the scheduled requests' lengths).
// A request also reaches the scheduler frontend_s after it arrives (vLLM's API server:
// parsing, tokenization and the hop to the engine core), which adds to its TTFT alone.
struct StepTimeModel {
  double frontend_s = 0;
  double base_s = 0;
  double per_decode_token_s = 0;
  double per_prefill_token_s = 0;
  double per_context_token_s = 0;

  double StepSeconds(int decode_tokens, int prefill_tokens, int64_t context_tokens) const {
    return base_s + per_decode_token_s * decode_tokens + per_prefill_token_s * prefill_tokens +
           per_context_token_s * static_cast<double>(context_tokens);
  }
};

struct Profile {
  std::string name;
  std::string description;
  StepTimeModel time;
  int max_model_len = 131072;
  int max_num_seqs = 1024;
  int max_num_batched_tokens = 8192;
  int block_size = 16;
  // KV cache size: given, or derived from the memory figures when 0.
  int num_kv_blocks = 0;
  double gpu_memory_gib = 80;
  double gpu_memory_utilization = 0.9;
  double weights_gib = 15;
  double activation_peak_gib = 2;
  int64_t kv_bytes_per_token = 131072;
  // Seconds a real vLLM server of this profile takes from launch to answering /health (weights
  // loaded, torch.compile, CUDA graphs captured). Used only with `bmas engine --startup-s
  // profile`.
  double startup_s = 0;
  // Seconds POST /wake_up takes after POST /sleep?level=1 (weights back from CPU memory) and
  // after level 2 (weights read again). The KV cache is allocated afresh after either.
  double wake_s_level1 = 0;
  double wake_s_level2 = 0;

  // Blocks that fit: (utilization x memory - weights - activations) / bytes per block.
  int DerivedKvBlocks(int block_size_tokens) const;
};

using ProfileMap = std::map<std::string, Profile, std::less<>>;

// The profiles built into bmas (src/engine/profiles.toml).
const ProfileMap& BuiltinProfiles();

// Parses profiles from TOML text; `source` names the file in errors. Throws ConfigError.
ProfileMap ParseProfiles(std::string_view toml_text, const std::string& source);

// The built-in profiles, overlaid with those in `file` when it is not empty.
ProfileMap LoadProfiles(const std::string& file);

// The text of the built-in profiles file.
std::string_view BuiltinProfilesToml();

// `whole`, a profile of a whole GPU, on a MIG slice of that GPU (`slice`: "3g.40gb"). NVIDIA's
// MIG User Guide gives each GPU instance its own SMs, compute_slices/7 of the GPU's, and its
// own memory slices with their share of the L2 cache and of the memory bandwidth,
// memory_slices/8 (core/mig.h). So the slice's profile keeps its per-step work and has:
//   - the GPU's memory times memory_slices/8 (its KV cache is what is left of that after the
//     weights and activations);
//   - the time of the steps' bandwidth-bound parts (base_s, dominated by streaming the weights,
//     and per_context_token_s, reading the KV cache) times 8/memory_slices;
//   - the time of the compute-bound parts (per_prefill_token_s, per_decode_token_s) times
//     7/compute_slices.
// The frontend and start-up stay. NVIDIA's published MIG figures fit this scaling: on an A100,
// seven 1g.5gb instances serve BERT-Large inference at about seven times one instance's rate,
// and one 1g.5gb at about a seventh of the whole GPU's (NVIDIA, "Getting the Most Out of the
// NVIDIA A100 GPU with MIG", 2020). A real H200 lists fewer SMs than that for some profiles
// (1g: 16 of 132, 0.121 against 1/7; docs/device-runs/2026-11-28-h200-mig). InvalidArgument
// when the profile is not a MIG profile or the weights do not fit the slice.
Result<Profile> ProfileOnMigSlice(const Profile& whole, std::string_view slice);

// The profile `name` names: one of `profiles`, or "NAME@SLICE" for NAME on a MIG slice
// (ProfileOnMigSlice). InvalidArgument lists the known names.
Result<Profile> FindProfile(const ProfileMap& profiles, std::string_view name);

}  // namespace bmas::engine
