#pragma once

// GpuTelemetry over NVML, the NVIDIA driver's management library, loaded with dlopen when
// first read: bmas needs neither the driver nor its headers to build or run, and says plainly
// that there is no GPU where the library is absent. Only the calls below are used; each one a
// GPU or driver does not support leaves its reading at its default.

#include <memory>
#include <string>

#include "gpu/gpu_telemetry.h"

namespace bmas {

// The library's name as the driver installs it.
inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

// A reader of `library` ("" = kNvmlLibrary, found by the dynamic loader).
std::unique_ptr<GpuTelemetry> OpenNvml(const std::string& library = "");

}  // namespace bmas
