#include "gpu/dcgm_metrics.h"

#include <functional>

#include <fmt/format.h>

#include "common/json_object.h"
#include "common/metrics.h"

namespace bmas {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// What a series reports on, and so which labels it carries.
enum class Scope {
  kGpu,     // the whole GPU, in MIG mode or not
  kUtil,    // the whole GPU outside MIG mode; nothing in it (NVML has no utilization there)
  kMemory,  // the whole GPU outside MIG mode; each MIG device in it
  kSlice,   // each MIG device whose activity GPM gave; nothing outside MIG mode
};

// A GPU's reading or one of its MIG devices', as a field sees it.
struct Sample {
  uint64_t mem_used = 0, mem_total = 0;
  size_t processes = 0;
  double util_pct = 0;
};

GpuHolder HolderOf(const std::map<int, GpuHolder>& holders, int gpu) {
  const auto held = holders.find(gpu);
  return held == holders.end() ? GpuHolder{} : held->second;
}

GpuHolder HolderOf(const MigHolders& holders, int gpu, int gpu_instance) {
  const auto held = holders.find({gpu, gpu_instance});
  return held == holders.end() ? GpuHolder{} : held->second;
}

}  // namespace

std::string RenderDcgmMetrics(const std::vector<GpuReading>& gpus, const std::string& node,
                              const std::map<int, GpuHolder>& holders,
                              const MigHolders& mig_holders) {
  struct Field {
    const char* name;
    const char* help;
    Scope scope;
    std::function<double(const GpuReading&, const Sample&)> value;
  };
  const std::vector<Field> fields = {
      {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", Scope::kUtil,
       [](const GpuReading& g, const Sample&) { return g.util_pct; }},
      {"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", Scope::kUtil,
       [](const GpuReading& g, const Sample&) { return g.mem_util_pct; }},
      {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", Scope::kMemory,
       [](const GpuReading&, const Sample& s) { return static_cast<double>(s.mem_used / kMiB); }},
      {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", Scope::kMemory,
       [](const GpuReading&, const Sample& s) {
         return static_cast<double>((s.mem_total - s.mem_used) / kMiB);
       }},
      {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", Scope::kGpu,
       [](const GpuReading& g, const Sample&) { return g.power_w; }},
      {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", Scope::kGpu,
       [](const GpuReading& g, const Sample&) { return g.temperature_c; }},
      {"DCGM_FI_DEV_MIG_MODE", "MIG mode (1 enabled, 0 disabled or not capable).", Scope::kGpu,
       [](const GpuReading& g, const Sample&) { return g.mig_enabled ? 1 : 0; }},
      {"bmas_gpu_nvlinks_up", "NVLink links of the GPU whose state is active.", Scope::kGpu,
       [](const GpuReading& g, const Sample&) { return g.nvlinks_up; }},
      {"bmas_gpu_processes", "Processes with a compute context on the GPU or MIG device.",
       Scope::kMemory,
       [](const GpuReading&, const Sample& s) { return static_cast<double>(s.processes); }},
      {"DCGM_FI_PROF_GR_ENGINE_ACTIVE",
       "Ratio of time the graphics engine is active (MIG devices, from NVML's GPM).",
       Scope::kSlice, [](const GpuReading&, const Sample& s) { return s.util_pct / 100; }},
  };
  std::string out;
  auto series = [&](const Field& f, const GpuReading& g, const std::string& instance,
                    const GpuHolder& holder, const Sample& sample) {
    out += fmt::format(
        "{}{{gpu=\"{}\",UUID=\"{}\",modelName=\"{}\",Hostname=\"{}\",{}hpc_job=\"{}\","
        "user=\"{}\"}} {}\n",
        f.name, g.index, EscapeLabelValue(g.uuid), EscapeLabelValue(g.name),
        EscapeLabelValue(node), instance, holder.job > 0 ? std::to_string(holder.job) : "",
        EscapeLabelValue(holder.user), f.value(g, sample));
  };
  for (const Field& f : fields) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", f.name, f.help, f.name);
    for (const GpuReading& g : gpus) {
      const bool split = g.mig_enabled;
      if ((split && f.scope == Scope::kUtil) || (!split && f.scope == Scope::kSlice)) continue;
      if (split && (f.scope == Scope::kMemory || f.scope == Scope::kSlice)) {
        for (const MigDeviceReading& m : g.mig_devices) {
          if (f.scope == Scope::kSlice && !m.util_known) continue;
          series(f, g,
                 fmt::format("GPU_I_ID=\"{}\",GPU_I_PROFILE=\"{}\",", m.gpu_instance,
                             EscapeLabelValue(m.profile)),
                 HolderOf(mig_holders, g.index, m.gpu_instance),
                 {m.mem_used_bytes, m.mem_total_bytes, m.pids.size(), m.util_pct});
        }
        continue;
      }
      series(f, g, "", HolderOf(holders, g.index),
             {g.mem_used_bytes, g.mem_total_bytes, g.pids.size()});
    }
  }
  return out;
}

std::string RenderGpuJson(const std::vector<GpuReading>& gpus, const std::string& node,
                          const std::map<int, GpuHolder>& holders,
                          const MigHolders& mig_holders) {
  return JsonObject([&](JsonWriter& w) {
    Member(w, "node", node);
    w.Key("gpus");
    w.StartArray();
    for (const GpuReading& g : gpus) {
      const auto held = holders.find(g.index);
      w.StartObject();
      Member(w, "index", g.index);
      Member(w, "uuid", g.uuid);
      Member(w, "name", g.name);
      Member(w, "util", g.util_pct);
      Member(w, "mem_used_mb", g.mem_used_bytes >> 20);
      Member(w, "mem_total_mb", g.mem_total_bytes >> 20);
      w.Key("power_w");
      w.Double(g.power_w);
      Member(w, "temperature_c", g.temperature_c);
      Member(w, "job_id", held == holders.end() ? 0 : held->second.job);
      Member(w, "user", held == holders.end() ? "" : held->second.user);
      w.Key("mig");
      w.StartArray();
      for (const MigDeviceReading& m : g.mig_devices) {
        const GpuHolder holder = HolderOf(mig_holders, g.index, m.gpu_instance);
        w.StartObject();
        Member(w, "gpu_instance", m.gpu_instance);
        Member(w, "profile", m.profile);
        Member(w, "uuid", m.uuid);
        Member(w, "mem_used_mb", m.mem_used_bytes >> 20);
        Member(w, "mem_total_mb", m.mem_total_bytes >> 20);
        w.Key("util");
        if (m.util_known) {
          w.Double(m.util_pct);
        } else {
          w.Null();
        }
        Member(w, "job_id", holder.job);
        Member(w, "user", holder.user);
        w.EndObject();
      }
      w.EndArray();
      w.EndObject();
    }
    w.EndArray();
  });
}

}  // namespace bmas
