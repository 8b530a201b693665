#include "gpu/dcgm_metrics.h"

#include <functional>

#include <fmt/format.h>

#include "common/json_object.h"
#include "common/metrics.h"

namespace bmas {

std::string RenderDcgmMetrics(const std::vector<GpuReading>& gpus, const std::string& node,
                              const std::map<int, GpuHolder>& holders) {
  struct Field {
    const char* name;
    const char* help;
    std::function<double(const GpuReading&)> value;
  };
  constexpr double kMiB = 1024.0 * 1024.0;
  const std::vector<Field> fields = {
      {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).",
       [](const GpuReading& g) { return g.util_pct; }},
      {"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).",
       [](const GpuReading& g) { return g.mem_util_pct; }},
      {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
       [&](const GpuReading& g) { return static_cast<double>(g.mem_used_bytes / kMiB); }},
      {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
       [&](const GpuReading& g) {
         return static_cast<double>((g.mem_total_bytes - g.mem_used_bytes) / kMiB);
       }},
      {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).",
       [](const GpuReading& g) { return g.power_w; }},
      {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).",
       [](const GpuReading& g) { return g.temperature_c; }},
      {"DCGM_FI_DEV_MIG_MODE", "MIG mode (1 enabled, 0 disabled or not capable).",
       [](const GpuReading& g) { return g.mig_enabled ? 1 : 0; }},
      {"bmas_gpu_nvlinks_up", "NVLink links of the GPU whose state is active.",
       [](const GpuReading& g) { return g.nvlinks_up; }},
      {"bmas_gpu_processes", "Processes with a compute context on the GPU.",
       [](const GpuReading& g) { return static_cast<double>(g.pids.size()); }},
  };
  std::string out;
  for (const Field& f : fields) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", f.name, f.help, f.name);
    for (const GpuReading& g : gpus) {
      const auto held = holders.find(g.index);
      const GpuHolder holder = held == holders.end() ? GpuHolder{} : held->second;
      out += fmt::format(
          "{}{{gpu=\"{}\",UUID=\"{}\",modelName=\"{}\",Hostname=\"{}\",hpc_job=\"{}\",user=\"{}\"}} "
          "{}\n",
          f.name, g.index, EscapeLabelValue(g.uuid), EscapeLabelValue(g.name),
          EscapeLabelValue(node), holder.job > 0 ? std::to_string(holder.job) : "",
          EscapeLabelValue(holder.user), f.value(g));
    }
  }
  return out;
}

std::string RenderGpuJson(const std::vector<GpuReading>& gpus, const std::string& node,
                          const std::map<int, GpuHolder>& holders) {
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
      w.EndObject();
    }
    w.EndArray();
  });
}

}  // namespace bmas
