#pragma once

// Whether other users can reach a path: state directories that root makes must let the
// accounts it hands work to (daemons' users, unprivileged containers' root) pass through
// every directory above them.

#include <filesystem>
#include <optional>

namespace bmas {

// The first directory above `path` (its parent, then the parent's parent, up to the root) that
// other users cannot pass through (no o+x), or nullopt when they can pass through them all.
// A directory that cannot be stat'ed (not made yet) is passed over.
std::optional<std::filesystem::path> UntraversableAncestor(const std::filesystem::path& path);

}  // namespace bmas
