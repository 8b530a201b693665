#include "lxd/cuda_devices.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <set>

namespace bmas::lxd {
namespace {

namespace fs = std::filesystem;

// The driver's user-space libraries a CUDA, NVML or OpenCL program loads (the names NVIDIA's
// container toolkit mounts for its "compute" and "utility" capabilities).
constexpr std::array<std::string_view, 13> kLibraries = {"libcuda",
                                                         "libcudadebugger",
                                                         "libnvidia-ml",
                                                         "libnvidia-cfg",
                                                         "libnvidia-nvvm",
                                                         "libnvidia-ptxjitcompiler",
                                                         "libnvidia-opencl",
                                                         "libnvidia-gpucomp",
                                                         "libnvidia-allocator",
                                                         "libnvidia-compiler",
                                                         "libnvidia-fatbinaryloader",
                                                         "libnvidia-pkcs11",
                                                         "libnvidia-pkcs11-openssl3"};
constexpr std::array<std::string_view, 4> kLibraryDirs = {
    "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib"};
constexpr std::array<std::string_view, 4> kTools = {
    "nvidia-smi", "nvidia-debugdump", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"};
constexpr std::array<std::string_view, 3> kControl = {"nvidiactl", "nvidia-uvm",
                                                      "nvidia-uvm-tools"};

// "libcuda.so" or "libcuda.so.<anything>" for a library of kLibraries.
bool IsDriverLibrary(const std::string& name) {
  return std::any_of(kLibraries.begin(), kLibraries.end(), [&](std::string_view lib) {
    const std::string so = std::string(lib) + ".so";
    return name == so || name.starts_with(so + ".");
  });
}

// Why `entry` (a path under `root`, which is canonical) may not be mounted; "" when it may.
std::string Refusal(const fs::path& entry, const fs::path& root, fs::path& resolved) {
  std::error_code ec;
  resolved = fs::canonical(entry, ec);
  if (ec) return "does not resolve: " + ec.message();
  const auto [end, _] = std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end());
  if (end != root.end())
    return fmt::format("leads out of the driver root, to {}", resolved.string());
  struct stat st {};
  if (stat(resolved.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "is not a regular file";
  if (st.st_uid != 0) return "is not owned by root";
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return "is writable by others than root";
  return "";
}

// Only what LXD takes in a device's name.
std::string DeviceNameOf(const std::string& file) {
  std::string out(kCudaDevicePrefix);
  for (char c : file) out += std::isalnum(static_cast<unsigned char>(c)) || c == '.' ? c : '-';
  return out;
}

}  // namespace

std::vector<std::string> ControlDevices(const std::string& dir) {
  std::vector<std::string> out;
  for (std::string_view name : kControl) {
    const std::string path = fmt::format("{}/{}", dir, name);
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) out.push_back(path);
  }
  return out;
}

std::vector<DriverFile> FindDriverFiles(const std::string& root,
                                        std::vector<std::string>& refused) {
  std::vector<DriverFile> out;
  if (root.empty()) return out;
  std::error_code ec;
  const fs::path top = fs::canonical(root, ec);
  if (ec) {
    refused.push_back(fmt::format("{}: the driver root does not resolve: {}", root, ec.message()));
    return out;
  }
  std::set<std::string> names;  // a file's name once: the first directory that has it wins
  auto take = [&](const fs::path& entry) {
    fs::path resolved;
    if (const std::string why = Refusal(entry, top, resolved); !why.empty()) {
      refused.push_back(fmt::format("{}: {}", entry.string(), why));
      return;
    }
    if (!names.insert(entry.filename().string()).second) return;
    out.push_back({resolved.string(), "/" + entry.lexically_relative(top).string()});
  };
  for (std::string_view dir : kLibraryDirs) {
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(top / dir, ec)) {
      if (IsDriverLibrary(e.path().filename().string())) found.push_back(e.path());
    }
    std::sort(found.begin(), found.end());
    for (const fs::path& f : found) take(f);
  }
  for (std::string_view tool : kTools) {
    const fs::path entry = top / "usr/bin" / tool;
    if (fs::exists(fs::symlink_status(entry, ec))) take(entry);
  }
  return out;
}

std::map<std::string, StringMap> CudaDevices(const std::map<std::string, StringMap>& existing,
                                             const CudaSupport& cuda) {
  std::map<std::string, StringMap> out;
  for (const std::string& source : cuda.control) {
    const std::string file = fs::path(source).filename().string();
    const std::string name = DeviceNameOf(file);
    if (existing.contains(name)) continue;
    out[name] = {
        {"type", "unix-char"}, {"source", source}, {"path", "/dev/" + file}, {"mode", "0666"}};
  }
  for (const DriverFile& f : cuda.files) {
    const std::string name = DeviceNameOf(fs::path(f.path).filename().string());
    if (existing.contains(name) || out.contains(name)) continue;
    out[name] = {{"type", "disk"}, {"source", f.source}, {"path", f.path}, {"readonly", "true"}};
  }
  return out;
}

bool IsCudaDevice(const std::string& name) { return name.starts_with(kCudaDevicePrefix); }

}  // namespace bmas::lxd
