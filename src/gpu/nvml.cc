#include "gpu/nvml.h"

#include <dlfcn.h>

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "gpu/nvml_abi.h"

namespace bmas {
namespace {

// The few NVML types used, as the driver's ABI defines them (nvml.h is not needed).
using namespace nvml_abi;  // NOLINT: the ABI's names, as NVML spells them
constexpr unsigned kNvmlTemperatureGpu = 0;
constexpr unsigned kNvmlMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS (Hopper has 18)
struct nvmlUtilization_t {
  unsigned gpu;
  unsigned memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr nvmlReturn_t kNvmlNotFound = 6;
struct nvmlDeviceAttributes_t {
  unsigned multiprocessorCount;
  unsigned sharedCopyEngineCount;
  unsigned sharedDecoderCount;
  unsigned sharedEncoderCount;
  unsigned sharedJpegCount;
  unsigned sharedOfaCount;
  unsigned gpuInstanceSliceCount;
  unsigned computeInstanceSliceCount;
  unsigned long long memorySizeMB;
};
// NVML_GPU_INSTANCE_PROFILE_* are 0 (1_SLICE) up to 0x10 in NVML 12.x; one a driver does not
// know answers an error and is skipped, so a few more are asked for.
constexpr unsigned kNvmlGpuInstanceProfiles = 32;
// GPU performance monitoring (GPM): samples are opaque; a metric is computed between two.
using nvmlGpmSample_t = struct nvmlGpmSample_st*;
struct nvmlGpmSupport_t {
  unsigned version;  // NVML_GPM_SUPPORT_VERSION
  unsigned isSupportedDevice;
};
struct nvmlGpmMetric_t {
  unsigned metricId;
  nvmlReturn_t nvmlReturn;
  double value;
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;
};
constexpr unsigned kGpmMetricGraphicsUtil = 1;  // NVML_GPM_METRIC_GRAPHICS_UTIL, 0.0-100.0
struct nvmlGpmMetricsGet_t {
  unsigned version;  // NVML_GPM_METRICS_GET_VERSION
  unsigned numMetrics;
  nvmlGpmSample_t sample1;
  nvmlGpmSample_t sample2;
  nvmlGpmMetric_t metrics[1];  // the library fills numMetrics of them
};

class NvmlTelemetry : public GpuTelemetry {
 public:
  explicit NvmlTelemetry(std::string library)
      : library_(library.empty() ? kNvmlLibrary : std::move(library)) {}

  ~NvmlTelemetry() override {
    for (const auto& [key, sample] : gpm_samples_) gpm_free_(sample);
    if (initialized_ && shutdown_ != nullptr) shutdown_();
    if (handle_ != nullptr) dlclose(handle_);
  }

  Result<std::vector<GpuReading>> Read() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto ready = Load(); !ready) return ready.error();
    unsigned count = 0;
    if (nvmlReturn_t r = device_count_(&count); r != kNvmlSuccess) {
      return Failed("nvmlDeviceGetCount", r);
    }
    std::vector<GpuReading> gpus;
    sampled_.clear();
    for (unsigned i = 0; i < count; ++i) {
      nvmlDevice_t device = nullptr;
      if (nvmlReturn_t r = handle_by_index_(i, &device); r != kNvmlSuccess) {
        return Failed(fmt::format("nvmlDeviceGetHandleByIndex({})", i), r);
      }
      gpus.push_back(ReadDevice(static_cast<int>(i), device));
    }
    // A slice that is gone (another layout) drops its last sample.
    for (auto it = gpm_samples_.begin(); it != gpm_samples_.end();) {
      if (sampled_.contains(it->first)) {
        ++it;
      } else {
        gpm_free_(it->second);
        it = gpm_samples_.erase(it);
      }
    }
    return gpus;
  }

  std::string Describe() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto ready = Load(); !ready) return ready.error().message;
    char nvml[96] = {}, driver[96] = {};
    if (nvml_version_ != nullptr) nvml_version_(nvml, sizeof nvml);
    if (driver_version_ != nullptr) driver_version_(driver, sizeof driver);
    return fmt::format("NVML {} (driver {}) from {}", nvml[0] ? nvml : "?",
                       driver[0] ? driver : "?", library_);
  }

 private:
  template <typename F>
  void Bind(F*& fn, const char* name) {
    fn = reinterpret_cast<F*>(dlsym(handle_, name));
  }

  Result<void> Load() {
    if (initialized_) return {};
    if (!load_error_.empty()) return Error{ErrorCode::kUnavailable, load_error_};
    handle_ = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* why = dlerror();
      // dlerror names the library: "libnvidia-ml.so.1: cannot open shared object file: ...".
      load_error_ = fmt::format("no NVIDIA driver here: {}",
                                why != nullptr ? why : library_ + ": cannot be loaded");
      return Error{ErrorCode::kUnavailable, load_error_};
    }
    Bind(init_, "nvmlInit_v2");
    Bind(shutdown_, "nvmlShutdown");
    Bind(error_string_, "nvmlErrorString");
    Bind(device_count_, "nvmlDeviceGetCount_v2");
    Bind(handle_by_index_, "nvmlDeviceGetHandleByIndex_v2");
    Bind(nvml_version_, "nvmlSystemGetNVMLVersion");
    Bind(driver_version_, "nvmlSystemGetDriverVersion");
    Bind(uuid_, "nvmlDeviceGetUUID");
    Bind(name_, "nvmlDeviceGetName");
    Bind(utilization_, "nvmlDeviceGetUtilizationRates");
    Bind(memory_, "nvmlDeviceGetMemoryInfo");
    Bind(power_, "nvmlDeviceGetPowerUsage");
    Bind(temperature_, "nvmlDeviceGetTemperature");
    Bind(mig_mode_, "nvmlDeviceGetMigMode");
    Bind(nvlink_state_, "nvmlDeviceGetNvLinkState");
    Bind(compute_capability_, "nvmlDeviceGetCudaComputeCapability");
    Bind(max_mig_devices_, "nvmlDeviceGetMaxMigDeviceCount");
    Bind(mig_handle_, "nvmlDeviceGetMigDeviceHandleByIndex");
    Bind(gpu_instance_id_, "nvmlDeviceGetGpuInstanceId");
    Bind(compute_instance_id_, "nvmlDeviceGetComputeInstanceId");
    Bind(attributes_, "nvmlDeviceGetAttributes_v2");
    Bind(profile_info_, "nvmlDeviceGetGpuInstanceProfileInfoV");
    Bind(gpm_support_, "nvmlGpmQueryDeviceSupport");
    Bind(gpm_alloc_, "nvmlGpmSampleAlloc");
    Bind(gpm_free_, "nvmlGpmSampleFree");
    Bind(gpm_mig_sample_, "nvmlGpmMigSampleGet");
    Bind(gpm_metrics_, "nvmlGpmMetricsGet");
    Bind(processes_, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (processes_ == nullptr) Bind(processes_, "nvmlDeviceGetComputeRunningProcesses_v2");
    if (init_ == nullptr || device_count_ == nullptr || handle_by_index_ == nullptr) {
      load_error_ = fmt::format("{} lacks nvmlInit_v2, nvmlDeviceGetCount_v2 or "
                                "nvmlDeviceGetHandleByIndex_v2: a driver older than 2017?",
                                library_);
      return Error{ErrorCode::kUnavailable, load_error_};
    }
    if (nvmlReturn_t r = init_(); r != kNvmlSuccess) {
      // Not remembered: a driver that is loading may answer on the next read.
      return Failed("nvmlInit", r);
    }
    initialized_ = true;
    return {};
  }

  Error Failed(const std::string& call, nvmlReturn_t r) const {
    const char* text = error_string_ != nullptr ? error_string_(r) : nullptr;
    return Error{ErrorCode::kUnavailable,
                 fmt::format("{} failed: {} (NVML error {})", call,
                             text != nullptr ? text : "unknown", r)};
  }

  GpuReading ReadDevice(int index, nvmlDevice_t device) {
    GpuReading g;
    g.index = index;
    char text[96] = {};
    if (uuid_ != nullptr && uuid_(device, text, sizeof text) == kNvmlSuccess) g.uuid = text;
    text[0] = '\0';
    if (name_ != nullptr && name_(device, text, sizeof text) == kNvmlSuccess) g.name = text;
    nvmlUtilization_t util{};
    if (utilization_ != nullptr && utilization_(device, &util) == kNvmlSuccess) {
      g.util_pct = util.gpu;
      g.mem_util_pct = util.memory;
    }
    nvmlMemory_t mem{};
    if (memory_ != nullptr && memory_(device, &mem) == kNvmlSuccess) {
      g.mem_used_bytes = mem.used;
      g.mem_total_bytes = mem.total;
    }
    unsigned value = 0;
    if (power_ != nullptr && power_(device, &value) == kNvmlSuccess) g.power_w = value / 1000.0;
    if (temperature_ != nullptr &&
        temperature_(device, kNvmlTemperatureGpu, &value) == kNvmlSuccess) {
      g.temperature_c = value;
    }
    unsigned current = 0, pending = 0;
    if (mig_mode_ != nullptr && mig_mode_(device, &current, &pending) == kNvmlSuccess) {
      g.mig_capable = true;  // a GPU without MIG answers NOT_SUPPORTED
      g.mig_enabled = current == 1;
    }
    if (nvlink_state_ != nullptr) {
      for (unsigned link = 0; link < kNvmlMaxLinks; ++link) {
        int active = 0;
        if (nvlink_state_(device, link, &active) != kNvmlSuccess) break;
        ++g.nvlinks_total;
        if (active == 1) ++g.nvlinks_up;
      }
    }
    if (compute_capability_ != nullptr) compute_capability_(device, &g.cuda_major, &g.cuda_minor);
    g.pids = Processes(device);
    if (g.mig_enabled) g.mig_devices = ReadMigDevices(device);
    return g;
  }

  std::vector<pid_t> Processes(nvmlDevice_t device) {
    std::vector<pid_t> pids;
    if (processes_ == nullptr) return pids;
    nvmlProcessInfo_t infos[128];
    unsigned n = 128;
    if (processes_(device, &n, infos) == kNvmlSuccess) {
      for (unsigned i = 0; i < n && i < 128; ++i) pids.push_back(static_cast<pid_t>(infos[i].pid));
    }
    return pids;
  }

  // The GPU instance profiles of `device`, by the driver's profile id: what names a MIG
  // device's profile ("3g.40gb", from "MIG 3g.40gb") by its slices, memory and media engines.
  std::vector<nvmlGpuInstanceProfileInfo_v2_t> ProfilesOf(nvmlDevice_t device) {
    std::vector<nvmlGpuInstanceProfileInfo_v2_t> profiles;
    if (profile_info_ == nullptr) return profiles;
    for (unsigned p = 0; p < kNvmlGpuInstanceProfiles; ++p) {
      nvmlGpuInstanceProfileInfo_v2_t info{};
      info.version = kProfileInfoV2;
      if (profile_info_(device, p, &info) == kNvmlSuccess) profiles.push_back(info);
    }
    return profiles;
  }

  std::vector<MigDeviceReading> ReadMigDevices(nvmlDevice_t device) {
    std::vector<MigDeviceReading> out;
    unsigned max = 0;
    if (max_mig_devices_ == nullptr || mig_handle_ == nullptr ||
        max_mig_devices_(device, &max) != kNvmlSuccess) {
      return out;
    }
    const auto profiles = ProfilesOf(device);
    char parent_uuid[96] = {};
    if (uuid_ != nullptr) uuid_(device, parent_uuid, sizeof parent_uuid);
    for (unsigned i = 0; i < max; ++i) {
      nvmlDevice_t mig = nullptr;
      const nvmlReturn_t r = mig_handle_(device, i, &mig);
      if (r == kNvmlNotFound) continue;  // no MIG device at this index
      if (r != kNvmlSuccess) break;
      MigDeviceReading m;
      m.index = static_cast<int>(i);
      char text[96] = {};
      if (uuid_ != nullptr && uuid_(mig, text, sizeof text) == kNvmlSuccess) m.uuid = text;
      unsigned id = 0;
      if (gpu_instance_id_ != nullptr && gpu_instance_id_(mig, &id) == kNvmlSuccess) {
        m.gpu_instance = static_cast<int>(id);
      }
      if (compute_instance_id_ != nullptr && compute_instance_id_(mig, &id) == kNvmlSuccess) {
        m.compute_instance = static_cast<int>(id);
      }
      nvmlDeviceAttributes_t attrs{};
      if (attributes_ != nullptr && attributes_(mig, &attrs) == kNvmlSuccess) {
        m.compute_slices = static_cast<int>(attrs.gpuInstanceSliceCount);
        m.profile = ProfileName(profiles, attrs);
      }
      nvmlMemory_t mem{};
      if (memory_ != nullptr && memory_(mig, &mem) == kNvmlSuccess) {
        m.mem_used_bytes = mem.used;
        m.mem_total_bytes = mem.total;
      }
      m.pids = Processes(mig);
      SampleActivity(device, parent_uuid, m);
      out.push_back(std::move(m));
    }
    return out;
  }

  // The slice's engine activity since the last read, through GPM: a new sample of its GPU
  // instance against the one kept from the last read.
  void SampleActivity(nvmlDevice_t device, const char* parent_uuid, MigDeviceReading& m) {
    if (gpm_support_ == nullptr || gpm_alloc_ == nullptr || gpm_free_ == nullptr ||
        gpm_mig_sample_ == nullptr || gpm_metrics_ == nullptr) {
      return;
    }
    nvmlGpmSupport_t support{1, 0};
    if (gpm_support_(device, &support) != kNvmlSuccess || support.isSupportedDevice == 0) return;
    nvmlGpmSample_t sample = nullptr;
    if (gpm_alloc_(&sample) != kNvmlSuccess) return;
    if (gpm_mig_sample_(device, static_cast<unsigned>(m.gpu_instance), sample) != kNvmlSuccess) {
      gpm_free_(sample);
      return;
    }
    const std::pair<std::string, int> key{parent_uuid, m.gpu_instance};
    sampled_.insert(key);
    auto last = gpm_samples_.find(key);
    if (last != gpm_samples_.end()) {
      nvmlGpmMetricsGet_t get{};
      get.version = 1;
      get.numMetrics = 1;
      get.sample1 = last->second;
      get.sample2 = sample;
      get.metrics[0].metricId = kGpmMetricGraphicsUtil;
      if (gpm_metrics_(&get) == kNvmlSuccess && get.metrics[0].nvmlReturn == kNvmlSuccess) {
        m.util_known = true;
        m.util_pct = get.metrics[0].value;
      }
      gpm_free_(last->second);
      last->second = sample;
    } else {
      gpm_samples_.emplace(key, sample);
    }
  }

  // The profile whose slices, memory and media engines are the MIG device's: "3g.40gb".
  static std::string ProfileName(const std::vector<nvmlGpuInstanceProfileInfo_v2_t>& profiles,
                                 const nvmlDeviceAttributes_t& attrs) {
    for (const auto& p : profiles) {
      if (p.sliceCount == attrs.gpuInstanceSliceCount && p.memorySizeMB == attrs.memorySizeMB &&
          p.ofaCount == attrs.sharedOfaCount && p.jpegCount == attrs.sharedJpegCount) {
        std::string name(p.name, strnlen(p.name, sizeof p.name));
        return name.starts_with("MIG ") ? name.substr(4) : name;
      }
    }
    return "";
  }

  const std::string library_;
  std::mutex mu_;
  void* handle_ = nullptr;
  bool initialized_ = false;
  std::string load_error_;  // a library that cannot be loaded is not tried again

  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*device_count_)(unsigned*) = nullptr;
  nvmlReturn_t (*handle_by_index_)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*nvml_version_)(char*, unsigned) = nullptr;
  nvmlReturn_t (*driver_version_)(char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid_)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*name_)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*utilization_)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory_)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power_)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*temperature_)(nvmlDevice_t, unsigned, unsigned*) = nullptr;
  nvmlReturn_t (*mig_mode_)(nvmlDevice_t, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*nvlink_state_)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*compute_capability_)(nvmlDevice_t, int*, int*) = nullptr;
  nvmlReturn_t (*processes_)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*) = nullptr;
  nvmlReturn_t (*max_mig_devices_)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*mig_handle_)(nvmlDevice_t, unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*gpu_instance_id_)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*compute_instance_id_)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*attributes_)(nvmlDevice_t, nvmlDeviceAttributes_t*) = nullptr;
  nvmlReturn_t (*profile_info_)(nvmlDevice_t, unsigned, nvmlGpuInstanceProfileInfo_v2_t*) =
      nullptr;
  nvmlReturn_t (*gpm_support_)(nvmlDevice_t, nvmlGpmSupport_t*) = nullptr;
  nvmlReturn_t (*gpm_alloc_)(nvmlGpmSample_t*) = nullptr;
  nvmlReturn_t (*gpm_free_)(nvmlGpmSample_t) = nullptr;
  nvmlReturn_t (*gpm_mig_sample_)(nvmlDevice_t, unsigned, nvmlGpmSample_t) = nullptr;
  nvmlReturn_t (*gpm_metrics_)(nvmlGpmMetricsGet_t*) = nullptr;
  // Each slice's last GPM sample, by its GPU's UUID and GPU instance id; and those seen in the
  // read under way.
  std::map<std::pair<std::string, int>, nvmlGpmSample_t> gpm_samples_;
  std::set<std::pair<std::string, int>> sampled_;
};

}  // namespace

std::unique_ptr<GpuTelemetry> OpenNvml(const std::string& library) {
  return std::make_unique<NvmlTelemetry>(library);
}

}  // namespace bmas
