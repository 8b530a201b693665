#pragma once

// Whether a test may take the default workspace image (`bmas image build` with no base): from
// the cache, or, with BMAS_BUILD_IMAGE=1, by running debootstrap from apt's mirror, which takes
// minutes (4 to 9 on a busy 2-core machine) and fills the cache for every later run.

#include <cstdlib>
#include <filesystem>
#include <string>

#include "lxd/image_build.h"

namespace bmas::testing {

// The cached tarball of the default image (it may not exist).
inline std::string CachedDefaultImage() {
  return (std::filesystem::path(lxd::kImageCacheDir) / lxd::CachedImageName("minimal")).string();
}

// "" when the test may go on; else why it skips, and how to let it run.
inline std::string WhyNoDefaultImage() {
  if (std::filesystem::exists(CachedDefaultImage())) return "";
  if (std::getenv("BMAS_BUILD_IMAGE") != nullptr) return "";
  return "the default image is not in the cache (" + CachedDefaultImage() +
         "), and building it runs debootstrap from apt's mirror for minutes: run `bmas lxd up && "
         "bmas image build` as root once, or set BMAS_BUILD_IMAGE=1";
}

}  // namespace bmas::testing
