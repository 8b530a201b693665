#include "lxd/gpu_binding.h"

#include <algorithm>

#include <fmt/format.h>

#include <charconv>
#include <filesystem>
#include <map>
#include <set>

#include "lxd/workspace.h"

namespace bmas::lxd {
namespace {

constexpr std::string_view kPrefix = "bmas-j";

bool ParseInt(std::string_view text, int64_t& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out >= 0;
}

}  // namespace

std::string JobDeviceName(const JobDevice& d) {
  return d.cap >= 0 ? fmt::format("{}{}-{}-gpu{}-cap{}", kPrefix, d.job, d.node, d.gpu, d.cap)
                    : fmt::format("{}{}-{}-gpu{}", kPrefix, d.job, d.node, d.gpu);
}

std::optional<JobDevice> ParseJobDeviceName(const std::string& name) {
  std::string_view s = name;
  if (!s.starts_with(kPrefix)) return std::nullopt;
  s.remove_prefix(kPrefix.size());
  int64_t cap = -1;
  // "-cap<M>" after the last "-gpu<N>" (a node's own name may hold either word).
  if (const size_t at = s.rfind("-cap"), gpu = s.rfind("-gpu");
      at != std::string_view::npos && gpu != std::string_view::npos && gpu < at) {
    if (!ParseInt(s.substr(at + 4), cap)) return std::nullopt;
    s = s.substr(0, at);
  }
  const size_t dash = s.find('-');
  const size_t gpu = s.rfind("-gpu");
  if (dash == std::string_view::npos || gpu == std::string_view::npos || gpu <= dash) {
    return std::nullopt;
  }
  JobDevice d;
  int64_t index = 0;
  if (!ParseInt(s.substr(0, dash), d.job) || !ParseInt(s.substr(gpu + 4), index)) {
    return std::nullopt;
  }
  d.node = std::string(s.substr(dash + 1, gpu - dash - 1));
  if (d.node.empty()) return std::nullopt;
  d.gpu = static_cast<int>(index);
  d.cap = static_cast<int>(cap);
  return d;
}

std::map<std::string, StringMap> GpuDevices(const std::map<std::string, StringMap>& existing,
                                            int64_t job, const std::string& node,
                                            const std::vector<int>& gpus,
                                            const std::function<std::string(int)>& source,
                                            const std::vector<CapDevice>& caps,
                                            const CudaSupport& cuda) {
  std::set<std::string> taken;
  std::set<std::string> plugged;  // sources another job's device already shows
  for (const auto& [name, spec] : existing) {
    if (auto it = spec.find("path"); it != spec.end()) taken.insert(it->second);
    if (auto it = spec.find("source"); it != spec.end() && ParseJobDeviceName(name)) {
      plugged.insert(it->second);
    }
  }
  std::map<std::string, StringMap> out;
  for (int g : gpus) {
    // Another job of the user's has this GPU in already (a slice or shard of the same GPU): the
    // job refers to that device node rather than plugging it a second time elsewhere.
    if (plugged.contains(source(g))) {
      out[JobDeviceName({job, node, g})] = {{"type", "none"}};
      continue;
    }
    int index = g;
    while (taken.contains(fmt::format("/dev/nvidia{}", index))) ++index;
    const std::string path = fmt::format("/dev/nvidia{}", index);
    taken.insert(path);
    out[JobDeviceName({job, node, g})] = {
        {"type", "unix-char"}, {"source", source(g)}, {"path", path}, {"mode", "0666"}};
  }
  for (const CapDevice& c : caps) {
    const std::string file = std::filesystem::path(c.source).filename().string();
    int64_t minor = 0;
    if (!file.starts_with("nvidia-cap") || !ParseInt(std::string_view(file).substr(10), minor)) {
      continue;  // not a capability's device node
    }
    if (plugged.contains(c.source)) {
      out[JobDeviceName({job, node, c.gpu, static_cast<int>(minor)})] = {{"type", "none"}};
      continue;
    }
    out[JobDeviceName({job, node, c.gpu, static_cast<int>(minor)})] = {
        {"type", "unix-char"},
        {"source", c.source},
        {"path", "/dev/nvidia-caps/" + file},
        {"mode", "0666"}};
  }
  // What CUDA needs beside them, which the workspace's first bound GPU brings (cuda_devices.h).
  out.merge(CudaDevices(existing, cuda));
  return out;
}

Result<std::vector<std::string>> BindGpus(LxdApi& client, const std::string& instance, int64_t job,
                                          const std::string& node, const std::vector<int>& gpus,
                                          const std::function<std::string(int)>& source,
                                          const std::vector<CapDevice>& caps,
                                          const CudaSupport& cuda) {
  auto current = client.GetInstance(instance);
  if (!current) return current.error();
  if (current->status != InstanceStatus::kRunning) {
    if (auto started = StartInstance(client, instance); !started) return started.error();
  }
  auto devices = GpuDevices(current->devices, job, node, gpus, source, caps, cuda);
  if (auto added = client.AddDevices(instance, devices); !added) return added.error();
  std::vector<std::string> paths;
  for (const auto& [name, spec] : devices) {
    if (IsCudaDevice(name)) continue;
    if (auto path = spec.find("path"); path != spec.end()) {
      paths.push_back(path->second);
      continue;
    }
    // A reference: the path of the device it refers to.
    const auto d = ParseJobDeviceName(name);
    for (const auto& [other, other_spec] : current->devices) {
      const auto o = ParseJobDeviceName(other);
      if (d && o && o->node == d->node && o->gpu == d->gpu && o->cap == d->cap &&
          other_spec.contains("path")) {
        paths.push_back(other_spec.at("path"));
        break;
      }
    }
  }
  return paths;
}

namespace {

// Removes `gone` (bmas job devices) from an instance with `devices`, in one change. A device
// node another job still refers to (a "none" device of the same node, GPU and capability) stays:
// the first such job's reference becomes the device. With the last job device go CUDA's control
// devices and driver files (cuda_devices.h). Returns how many job devices were removed.
Result<int> RemoveJobDevices(LxdApi& client, const std::string& instance,
                             const std::map<std::string, StringMap>& devices,
                             const std::vector<std::string>& gone) {
  std::map<std::string, std::optional<StringMap>> change;
  for (const std::string& name : gone) {
    if (devices.contains(name)) change[name] = std::nullopt;
  }
  for (const std::string& name : gone) {
    const auto it = devices.find(name);
    const auto d = ParseJobDeviceName(name);
    if (it == devices.end() || !d || it->second.count("path") == 0) continue;
    for (const auto& [other, spec] : devices) {
      const auto o = ParseJobDeviceName(other);
      if (change.contains(other) || !o || o->node != d->node || o->gpu != d->gpu ||
          o->cap != d->cap || spec.count("path") != 0) {
        continue;
      }
      change[other] = it->second;  // the reference takes the device over
      break;
    }
  }
  const bool last = std::none_of(devices.begin(), devices.end(), [&](const auto& d) {
    const auto it = change.find(d.first);
    return ParseJobDeviceName(d.first) && (it == change.end() || it->second.has_value());
  });
  const int removed = static_cast<int>(std::count_if(
      change.begin(), change.end(), [](const auto& c) { return !c.second.has_value(); }));
  if (last) {
    for (const auto& [name, spec] : devices) {
      if (IsCudaDevice(name)) change[name] = std::nullopt;
    }
  }
  if (change.empty()) return 0;
  if (auto done = client.UpdateInstance(instance, {}, change); !done) return done.error();
  return removed;
}

}  // namespace

Result<int> ReleaseGpus(LxdApi& client, const std::string& instance, int64_t job,
                        const std::string& node) {
  auto current = client.GetInstance(instance);
  if (!current) return current.error();
  std::vector<std::string> mine;
  for (const auto& [name, spec] : current->devices) {
    auto d = ParseJobDeviceName(name);
    if (d && d->job == job && d->node == node) mine.push_back(name);
  }
  // With none of its own left (unplugged when a restarted workspace could not be fenced again),
  // CUDA's devices still go when no other job has a device in.
  return RemoveJobDevices(client, instance, current->devices, mine);
}

Result<std::vector<std::string>> ReconcileGpus(
    LxdApi& client, const std::function<Result<bool>(int64_t job)>& alive,
    const EndJobFn& end_job) {
  auto instances = client.Instances();
  if (!instances) return instances.error();
  std::vector<std::string> removed;
  for (const Instance& i : *instances) {
    std::vector<std::string> gone;
    std::map<std::pair<int64_t, std::string>, bool> ended;  // (job, node): processes gone
    for (const auto& [name, spec] : i.devices) {
      auto d = ParseJobDeviceName(name);
      if (!d) continue;
      auto running = alive(d->job);
      if (!running || *running) continue;
      auto key = std::make_pair(d->job, d->node);
      if (!ended.contains(key)) ended[key] = !end_job || end_job(i.name, d->job, d->node);
      if (ended[key]) gone.push_back(name);
    }
    if (gone.empty()) continue;
    auto r = RemoveJobDevices(client, i.name, i.devices, gone);
    if (!r) return r.error();
    for (const std::string& g : gone) removed.push_back(i.name + "/" + g);
  }
  return removed;
}

Result<std::vector<int>> ParseGpuList(const std::string& text) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    size_t comma = text.find(',', start);
    std::string_view item(text.data() + start,
                          (comma == std::string::npos ? text.size() : comma) - start);
    const size_t dash = item.find('-');
    int64_t lo = 0, hi = 0;
    bool ok = dash == std::string_view::npos
                  ? ParseInt(item, lo) && (hi = lo, true)
                  : ParseInt(item.substr(0, dash), lo) && ParseInt(item.substr(dash + 1), hi);
    if (!ok || hi < lo || hi > 1024) {
      return InvalidArgument(fmt::format("'{}' is not a GPU list such as 0,1 or 0-3", text));
    }
    for (int64_t g = lo; g <= hi; ++g) out.push_back(static_cast<int>(g));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace bmas::lxd
