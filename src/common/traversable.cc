// UntraversableAncestor: the walk up from a path to the root, checking o+x on each directory.

#include "common/traversable.h"

#include <sys/stat.h>

namespace bmas {

std::optional<std::filesystem::path> UntraversableAncestor(const std::filesystem::path& path) {
  for (std::filesystem::path p = path.parent_path(); !p.empty(); p = p.parent_path()) {
    struct stat st;
    if (stat(p.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) return p;
    if (p == p.root_path()) break;
  }
  return std::nullopt;
}

}  // namespace bmas
