#pragma once

// What CUDA needs in a workspace beside a job's GPU device nodes (gpu_binding.h): the driver's
// control devices (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools) and its user-space
// files (libcuda.so.1, libnvidia-ml.so.1, libnvidia-ptxjitcompiler.so.1, ..., nvidia-smi),
// found under the host's driver root and bind-mounted read-only at the same paths inside. They
// come with a workspace's first bound GPU and go with its last, all named "bmas-cuda-...".
//
// Why bind mounts and not LXD's nvidia.runtime: that key is read only when a container starts
// (a job's GPUs are plugged into a running workspace, with the user's sessions in it), it works
// only with LXD "gpu" devices, and it needs nvidia-container-cli (libnvidia-container), which
// Debian 12 does not package. A disk device is hot-plugged, and readonly=true makes a mount the
// container's root cannot make writable again (its flags are locked in the user namespace).

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "lxd/lxd_types.h"

namespace bmas::lxd {

inline constexpr std::string_view kCudaDevicePrefix = "bmas-cuda-";

// One of the driver's files: `source` the file on the host (symbolic links resolved), `path`
// where it appears inside (its path under the driver root).
struct DriverFile {
  std::string source;
  std::string path;
};

// What BindGpus adds beside a job's GPUs when the workspace lacks it.
struct CudaSupport {
  std::vector<std::string> control;  // host device nodes, each at /dev/<its name> inside
  std::vector<DriverFile> files;
};

// The control devices among dir/nvidiactl, dir/nvidia-uvm and dir/nvidia-uvm-tools that exist
// as character devices (the uvm module may not be loaded).
std::vector<std::string> ControlDevices(const std::string& dir);

// The driver's user-space files under `root` ("/" on a node; "" = none): its libraries by name
// (libcuda.so*, libnvidia-ml.so*, ...) in the usual library directories and its tools in
// usr/bin. A file is taken only when it resolves to a regular file inside `root`, owned by
// root and writable by no one else: never a link out to another file of the host. `refused`
// gets "<file>: <why>" for each one left out.
std::vector<DriverFile> FindDriverFiles(const std::string& root, std::vector<std::string>& refused);

// The devices to add to an instance that has `existing` so that it has `cuda`: unix-char
// devices for the control devices and read-only disk devices for the files, none it already
// has.
std::map<std::string, StringMap> CudaDevices(const std::map<std::string, StringMap>& existing,
                                             const CudaSupport& cuda);

// A device CudaDevices makes.
bool IsCudaDevice(const std::string& name);

}  // namespace bmas::lxd
