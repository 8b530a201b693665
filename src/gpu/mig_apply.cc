#include "gpu/mig_apply.h"

#include <dlfcn.h>

#include <fmt/format.h>

#include "gpu/nvml.h"
#include "gpu/nvml_abi.h"

namespace bmas {
namespace {

// NVML's ABI for these calls (nvml.h is not needed).
using namespace nvml_abi;  // NOLINT: the ABI's names, as NVML spells them
using nvmlGpuInstance_t = struct nvmlGpuInstance_st*;
using nvmlComputeInstance_t = struct nvmlComputeInstance_st*;
constexpr nvmlReturn_t kSuccess = kNvmlSuccess;
struct nvmlGpuInstancePlacement_t {
  unsigned start;
  unsigned size;
};
struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned id;
  unsigned profileId;
  nvmlGpuInstancePlacement_t placement;
};
struct nvmlComputeInstanceProfileInfo_t {
  unsigned id;
  unsigned sliceCount;
  unsigned instanceCount;
  unsigned multiprocessorCount;
  unsigned sharedCopyEngineCount;
  unsigned sharedDecoderCount;
  unsigned sharedEncoderCount;
  unsigned sharedJpegCount;
  unsigned sharedOfaCount;
};
constexpr unsigned kGpuInstanceProfiles = 32;     // NVML_GPU_INSTANCE_PROFILE_* asked for
constexpr unsigned kComputeInstanceProfiles = 8;  // NVML_COMPUTE_INSTANCE_PROFILE_*
constexpr unsigned kEngineShared = 0;             // NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
constexpr int kMaxInstances = 8;

// NVML_COMPUTE_INSTANCE_PROFILE_* for a compute instance of `slices` (1, 2, 3, 4, 7).
int ComputeProfileFor(unsigned slices) {
  switch (slices) {
    case 1: return 0;
    case 2: return 1;
    case 3: return 2;
    case 4: return 3;
    case 7: return 4;
    default: return -1;
  }
}

class Nvml {
 public:
  explicit Nvml(const std::string& library)
      : library_(library.empty() ? kNvmlLibrary : library) {}
  ~Nvml() {
    if (initialized_ && shutdown_ != nullptr) shutdown_();
    if (handle_ != nullptr) dlclose(handle_);
  }

  Result<void> Load() {
    handle_ = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* why = dlerror();
      return Error{ErrorCode::kUnavailable,
                   fmt::format("no NVIDIA driver here: {}", why != nullptr ? why : library_)};
    }
    Bind(init_, "nvmlInit_v2");
    Bind(shutdown_, "nvmlShutdown");
    Bind(error_string_, "nvmlErrorString");
    Bind(handle_by_index_, "nvmlDeviceGetHandleByIndex_v2");
    Bind(mig_mode_, "nvmlDeviceGetMigMode");
    Bind(set_mig_mode_, "nvmlDeviceSetMigMode");
    Bind(processes_, "nvmlDeviceGetComputeRunningProcesses_v3");
    Bind(profile_info_, "nvmlDeviceGetGpuInstanceProfileInfoV");
    Bind(gpu_instances_, "nvmlDeviceGetGpuInstances");
    Bind(create_gi_, "nvmlDeviceCreateGpuInstanceWithPlacement");
    Bind(gi_info_, "nvmlGpuInstanceGetInfo");
    Bind(destroy_gi_, "nvmlGpuInstanceDestroy");
    Bind(ci_profile_info_, "nvmlGpuInstanceGetComputeInstanceProfileInfo");
    Bind(create_ci_, "nvmlGpuInstanceCreateComputeInstance");
    Bind(compute_instances_, "nvmlGpuInstanceGetComputeInstances");
    Bind(destroy_ci_, "nvmlComputeInstanceDestroy");
    for (void* fn : {reinterpret_cast<void*>(init_), reinterpret_cast<void*>(handle_by_index_),
                     reinterpret_cast<void*>(mig_mode_), reinterpret_cast<void*>(set_mig_mode_),
                     reinterpret_cast<void*>(processes_), reinterpret_cast<void*>(profile_info_),
                     reinterpret_cast<void*>(gpu_instances_), reinterpret_cast<void*>(create_gi_),
                     reinterpret_cast<void*>(gi_info_), reinterpret_cast<void*>(destroy_gi_),
                     reinterpret_cast<void*>(ci_profile_info_),
                     reinterpret_cast<void*>(create_ci_),
                     reinterpret_cast<void*>(compute_instances_),
                     reinterpret_cast<void*>(destroy_ci_)}) {
      if (fn == nullptr) {
        return Error{ErrorCode::kUnavailable,
                     fmt::format("{} lacks NVML's MIG calls: a driver older than R470?", library_)};
      }
    }
    if (nvmlReturn_t r = init_(); r != kSuccess) return Failed("nvmlInit", r);
    initialized_ = true;
    return {};
  }

  Error Failed(const std::string& call, nvmlReturn_t r) const {
    const char* text = error_string_ != nullptr ? error_string_(r) : nullptr;
    return Error{ErrorCode::kUnavailable, fmt::format("{} failed: {} (NVML error {})", call,
                                                      text != nullptr ? text : "unknown", r)};
  }

  template <typename F>
  void Bind(F*& fn, const char* name) {
    fn = reinterpret_cast<F*>(dlsym(handle_, name));
  }

  std::string library_;
  void* handle_ = nullptr;
  bool initialized_ = false;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*handle_by_index_)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*mig_mode_)(nvmlDevice_t, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*set_mig_mode_)(nvmlDevice_t, unsigned, nvmlReturn_t*) = nullptr;
  nvmlReturn_t (*processes_)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*) = nullptr;
  nvmlReturn_t (*profile_info_)(nvmlDevice_t, unsigned, nvmlGpuInstanceProfileInfo_v2_t*) =
      nullptr;
  nvmlReturn_t (*gpu_instances_)(nvmlDevice_t, unsigned, nvmlGpuInstance_t*, unsigned*) = nullptr;
  nvmlReturn_t (*create_gi_)(nvmlDevice_t, unsigned, const nvmlGpuInstancePlacement_t*,
                             nvmlGpuInstance_t*) = nullptr;
  nvmlReturn_t (*gi_info_)(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t*) = nullptr;
  nvmlReturn_t (*destroy_gi_)(nvmlGpuInstance_t) = nullptr;
  nvmlReturn_t (*ci_profile_info_)(nvmlGpuInstance_t, unsigned, unsigned,
                                   nvmlComputeInstanceProfileInfo_t*) = nullptr;
  nvmlReturn_t (*create_ci_)(nvmlGpuInstance_t, unsigned, nvmlComputeInstance_t*) = nullptr;
  nvmlReturn_t (*compute_instances_)(nvmlGpuInstance_t, unsigned, nvmlComputeInstance_t*,
                                     unsigned*) = nullptr;
  nvmlReturn_t (*destroy_ci_)(nvmlComputeInstance_t) = nullptr;
};

}  // namespace

Result<MigApplyResult> ApplyMigLayout(const std::string& library, unsigned index,
                                      const std::vector<MigInstanceSpec>& layout) {
  Nvml nvml(library);
  if (auto loaded = nvml.Load(); !loaded) return loaded.error();
  nvmlDevice_t device = nullptr;
  if (nvmlReturn_t r = nvml.handle_by_index_(index, &device); r != kSuccess) {
    return nvml.Failed(fmt::format("nvmlDeviceGetHandleByIndex({})", index), r);
  }
  // A GPU with a process is never re-partitioned.
  nvmlProcessInfo_t infos[64];
  unsigned n = 64;
  if (nvmlReturn_t r = nvml.processes_(device, &n, infos); r != kSuccess) {
    return nvml.Failed("nvmlDeviceGetComputeRunningProcesses", r);
  }
  if (n > 0) {
    std::vector<unsigned> pids;
    for (unsigned i = 0; i < n && i < 64; ++i) pids.push_back(infos[i].pid);
    return Error{ErrorCode::kAlreadyExists,
                 fmt::format("GPU {} has {} process(es) (pid {}): a GPU in use is never "
                             "re-partitioned",
                             index, n, fmt::join(pids, ", "))};
  }
  MigApplyResult result;
  unsigned current = 0, pending = 0;
  if (nvmlReturn_t r = nvml.mig_mode_(device, &current, &pending); r != kSuccess) {
    return nvml.Failed(fmt::format("nvmlDeviceGetMigMode(GPU {}): the GPU cannot take MIG", index),
                       r);
  }
  const auto failed = [&](const std::string& call, nvmlReturn_t r) {
    Error e = nvml.Failed(call, r);
    if (result.changed) {
      e.message += fmt::format("; GPU {} is left part-way: run the change again", index);
    }
    return e;
  };
  // Every compute instance, then every GPU instance, of every profile.
  if (current == 1) {
    for (unsigned p = 0; p < kGpuInstanceProfiles; ++p) {
      nvmlGpuInstanceProfileInfo_v2_t info{};
      info.version = kProfileInfoV2;
      if (nvml.profile_info_(device, p, &info) != kSuccess) continue;
      // One at a time, asking again after each: a destroyed instance's handle is gone.
      for (int guard = 0; guard < kMaxInstances; ++guard) {
        nvmlGpuInstance_t gis[kMaxInstances];
        unsigned count = kMaxInstances;
        if (nvmlReturn_t r = nvml.gpu_instances_(device, info.id, gis, &count); r != kSuccess) {
          return failed("nvmlDeviceGetGpuInstances", r);
        }
        if (count == 0) break;
        for (unsigned cp = 0; cp < kComputeInstanceProfiles; ++cp) {
          nvmlComputeInstanceProfileInfo_t ci_info{};
          if (nvml.ci_profile_info_(gis[0], cp, kEngineShared, &ci_info) != kSuccess) continue;
          nvmlComputeInstance_t cis[kMaxInstances];
          unsigned cis_n = kMaxInstances;
          if (nvml.compute_instances_(gis[0], ci_info.id, cis, &cis_n) != kSuccess) continue;
          for (unsigned c = 0; c < cis_n && c < kMaxInstances; ++c) {
            if (nvmlReturn_t r = nvml.destroy_ci_(cis[c]); r != kSuccess) {
              return failed("nvmlComputeInstanceDestroy", r);
            }
            result.changed = true;
          }
        }
        if (nvmlReturn_t r = nvml.destroy_gi_(gis[0]); r != kSuccess) {
          return failed("nvmlGpuInstanceDestroy", r);
        }
        result.changed = true;
      }
    }
  }
  const unsigned want = layout.empty() ? 0 : 1;
  if (current != want) {
    nvmlReturn_t activation = kSuccess;
    if (nvmlReturn_t r = nvml.set_mig_mode_(device, want, &activation); r != kSuccess) {
      return failed(fmt::format("nvmlDeviceSetMigMode({})", want), r);
    }
    result.changed = true;
    if (activation != kSuccess) {
      return failed(fmt::format("MIG mode {} on GPU {} needs a GPU reset (nvidia-smi -r -i {})",
                                want == 1 ? "on" : "off", index, index),
                    activation);
    }
  }
  for (const MigInstanceSpec& spec : layout) {
    nvmlGpuInstanceProfileInfo_v2_t info{};
    info.version = kProfileInfoV2;
    if (nvmlReturn_t r = nvml.profile_info_(device, spec.nvml_profile, &info); r != kSuccess) {
      return failed(fmt::format("nvmlDeviceGetGpuInstanceProfileInfoV({})", spec.nvml_profile), r);
    }
    const nvmlGpuInstancePlacement_t placement{spec.start, spec.memory_slices};
    nvmlGpuInstance_t gi = nullptr;
    if (nvmlReturn_t r = nvml.create_gi_(device, info.id, &placement, &gi); r != kSuccess) {
      return failed(fmt::format("nvmlDeviceCreateGpuInstanceWithPlacement({} at {})",
                                info.name, spec.start),
                    r);
    }
    result.changed = true;
    const int ci_profile = ComputeProfileFor(spec.compute_slices);
    nvmlComputeInstanceProfileInfo_t ci_info{};
    if (nvmlReturn_t r =
            ci_profile < 0 ? 3 : nvml.ci_profile_info_(gi, static_cast<unsigned>(ci_profile),
                                                       kEngineShared, &ci_info);
        r != kSuccess) {
      return failed("nvmlGpuInstanceGetComputeInstanceProfileInfo", r);
    }
    nvmlComputeInstance_t ci = nullptr;
    if (nvmlReturn_t r = nvml.create_ci_(gi, ci_info.id, &ci); r != kSuccess) {
      return failed("nvmlGpuInstanceCreateComputeInstance", r);
    }
    nvmlGpuInstanceInfo_t gi_info{};
    if (nvmlReturn_t r = nvml.gi_info_(gi, &gi_info); r != kSuccess) {
      return failed("nvmlGpuInstanceGetInfo", r);
    }
    result.gpu_instances.push_back(gi_info.id);
  }
  return result;
}

}  // namespace bmas
