#pragma once

// Slurm-style host lists: "oss[01-12]", "gpu[1-2,5]-ib", "mgs1,oss[01-03]".

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bmas {

// The names `hostlist` stands for, in order. A bracket holds comma-separated numbers or
// ranges; a range is as wide as its lower bound as written ("[01-12]" pads to 2 digits).
// Several brackets in one name multiply out, leftmost slowest. Commas outside brackets
// separate names. Errors (empty names, bad brackets, a range that runs backwards, more than
// kMaxHostlistNames names, a name longer than kMaxHostNameBytes) are InvalidArgument naming
// the problem.
Result<std::vector<std::string>> ExpandHostlist(std::string_view hostlist);

inline constexpr size_t kMaxHostlistNames = 65536;
// A DNS name's limit; it keeps the names of any list under 17 MB.
inline constexpr size_t kMaxHostNameBytes = 253;

// The shortest form ExpandHostlist reads back as `names`, keeping their order: neighbours
// that differ only in a trailing number of the same width merge into one bracket.
std::string CompressHostlist(const std::vector<std::string>& names);

}  // namespace bmas
