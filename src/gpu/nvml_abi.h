#pragma once

// The parts of NVML's ABI that gpu/nvml.cc and gpu/mig_apply.cc both use, as the driver's nvml.h
// defines them (bmas builds without it). Internal to src/gpu.

namespace bmas::nvml_abi {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
inline constexpr nvmlReturn_t kNvmlSuccess = 0;

struct nvmlGpuInstanceProfileInfo_v2_t {
  unsigned version;  // NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2)
  unsigned id;
  unsigned isP2pSupported;
  unsigned sliceCount;
  unsigned instanceCount;
  unsigned multiprocessorCount;
  unsigned copyEngineCount;
  unsigned decoderCount;
  unsigned encoderCount;
  unsigned jpegCount;
  unsigned ofaCount;
  unsigned long long memorySizeMB;
  char name[96];  // "MIG 3g.40gb"
};
inline constexpr unsigned kProfileInfoV2 = sizeof(nvmlGpuInstanceProfileInfo_v2_t) | (2u << 24);

struct nvmlProcessInfo_t {  // nvmlProcessInfo_v2_t, what the _v2 and _v3 calls fill
  unsigned pid;
  unsigned long long usedGpuMemory;
  unsigned gpuInstanceId;
  unsigned computeInstanceId;
};

}  // namespace bmas::nvml_abi
