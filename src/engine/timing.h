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

}  // namespace bmas::engine
