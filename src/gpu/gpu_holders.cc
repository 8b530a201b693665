#include "gpu/gpu_holders.h"

#include <cctype>
#include <sstream>

namespace bmas {
namespace {

// The number right after `marker` in `line` when it is followed by '/' or the end.
std::optional<int64_t> NumberAfter(const std::string& line, const std::string& marker) {
  for (size_t at = line.find(marker); at != std::string::npos; at = line.find(marker, at + 1)) {
    size_t end = at + marker.size();
    int64_t id = 0;
    size_t digits = 0;
    while (end < line.size() && std::isdigit(static_cast<unsigned char>(line[end])) &&
           digits < 18) {
      id = id * 10 + (line[end] - '0');
      ++end;
      ++digits;
    }
    if (digits > 0 && id > 0 && (end == line.size() || line[end] == '/')) return id;
  }
  return std::nullopt;
}

std::optional<GpuHolder> FirstHolder(
    const std::vector<pid_t>& pids,
    const std::function<std::optional<GpuHolder>(pid_t)>& holder_of) {
  for (pid_t pid : pids) {
    if (auto h = holder_of(pid)) return h;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> JobOfCgroup(const std::string& proc_cgroup) {
  std::istringstream lines(proc_cgroup);
  for (std::string line; std::getline(lines, line);) {
    if (auto id = NumberAfter(line, "/job_")) return id;
    if (auto id = NumberAfter(line, "/bmas-job-")) return id;
  }
  return std::nullopt;
}

std::map<int, GpuHolder> HoldersOf(
    const std::vector<GpuReading>& gpus,
    const std::function<std::optional<GpuHolder>(pid_t)>& holder_of) {
  std::map<int, GpuHolder> holders;
  for (const GpuReading& g : gpus) {
    if (auto h = FirstHolder(g.pids, holder_of)) holders[g.index] = *h;
  }
  return holders;
}

MigHolders MigHoldersOf(const std::vector<GpuReading>& gpus,
                        const std::function<std::optional<GpuHolder>(pid_t)>& holder_of) {
  MigHolders holders;
  for (const GpuReading& g : gpus) {
    for (const MigDeviceReading& m : g.mig_devices) {
      if (auto h = FirstHolder(m.pids, holder_of)) holders[{g.index, m.gpu_instance}] = *h;
    }
  }
  return holders;
}

}  // namespace bmas
