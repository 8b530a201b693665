#pragma once

namespace bmas {

inline constexpr const char* kBmasVersion = "0.1.0";

}  // namespace bmas
