#pragma once

// Container images built on this machine, without an image server: a busybox one (1 MB, for
// tests) from the busybox-static package, and a Debian one, the default (debootstrap minbase
// from the mirror apt uses, with python3, venv, pip, git and a compiler). Each is packed as a
// unified image tarball and imported through LXD's API with properties bmas.built=true and
// bmas.base=<base>, so the newest can be found later. Debian's tarball is cached on disk.

#include <optional>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/result.h"
#include "lxd/lxd_client.h"

namespace bmas::lxd {

// The image a workspace gets when none is named, and the one `bmas up` puts in an LXD that has
// none: Debian 12 with what a student works with (DebianPackages).
inline constexpr const char* kDefaultImageBase = "debian";
inline constexpr const char* kDefaultImageAlias = "bmas-debian";

// Where built Debian images are kept, so that a rebuild, a second LXD or a fresh test's LXD
// imports the tarball instead of running debootstrap again.
inline constexpr const char* kImageCacheDir = "/var/cache/bmas/images";

struct ImageBuildRequest {
  std::string base = kDefaultImageBase;  // "busybox" or "debian"
  // Debian only: "minimal" (PID 1 is tini, which reaps orphans and sleeps: an idle workspace
  // holds a few MiB) or "systemd" (services run inside, at ~20 MiB more per workspace;
  // journald, logind, the console getty and dbus are masked).
  std::string init = "minimal";
  std::string alias;           // "" = "bmas-<base>"
  std::string work_dir;        // holds the build tree (removed after)
  std::string cache_dir = kImageCacheDir;  // "" = build without the cache (busybox never uses it)
  bool rebuild = false;        // run debootstrap even when the cache holds the image
};

struct BuiltImage {
  std::string fingerprint;
  std::string alias;
  int64_t size = 0;      // bytes of the tarball
  double seconds = 0;    // to build (or read from the cache) and import
  std::string cache_file;  // the cached tarball written or read ("" when none)
  bool from_cache = false;  // imported from cache_file, without debootstrap
  bool existed = false;     // LXD held it already under `alias`: nothing was imported
};

// Builds the image and imports it through LXD's API with properties bmas.built=true and
// bmas.base=<base>. A Debian image is taken from the cache when it holds one for the same
// suite, packages and init (CachedImageName), else built (root and debootstrap; the suite is
// the host's, bookworm) and then kept there. `env` dates the image and times the build.
Result<BuiltImage> BuildImage(LxdApi& client, const ImageBuildRequest& request, Env& env);

// The image LXD holds under `alias`; nullopt when none.
Result<std::optional<Image>> ImageByAlias(LxdApi& client, const std::string& alias);

// The default image in this LXD: nothing to do when kDefaultImageAlias names an image already
// (existed), else BuildImage of the default request (from the cache when it holds it).
Result<BuiltImage> EnsureDefaultImage(LxdApi& client, const std::string& work_dir,
                                      const std::string& cache_dir, Env& env);

// The packages debootstrap adds to minbase for `init` ("minimal" or "systemd"): the init's own,
// then a working environment: python3 with venv and pip, git, build-essential, ca-certificates,
// less and an editor. No CUDA: a job's workspace gets the host driver's user space at job time
// (cuda_devices.h).
std::vector<std::string> DebianPackages(const std::string& init);

// The cache's file name for a Debian image: "debian-<suite>-<init>-<digest>.tar.gz", the digest
// over the suite, the packages and what bmas writes into the image (PID 1, metadata), so that a
// change to any of them builds anew.
std::string CachedImageName(const std::string& init);

// The suite the Debian image is built from.
inline constexpr const char* kDebianSuite = "bookworm";

// The Debian mirror apt uses on this host: the first enabled `deb` source for kDebianSuite in
// the files apt reads (/etc/apt/sources.list, then /etc/apt/sources.list.d/*.list and *.sources
// in name order); NotFound when none is configured.
Result<std::string> AptMirror();

// One file of apt's sources: its name (the extension decides whether apt reads it, and how) and
// its text.
struct AptSourceFile {
  std::string name;
  std::string text;
};

// AptMirror over given files, for tests.
Result<std::string> DebianMirrorIn(const std::vector<AptSourceFile>& files,
                                   const std::string& suite);

// The newest image that BuildImage imported (by upload time); NotFound with the command that
// makes one when there is none.
Result<Image> NewestBuiltImage(LxdApi& client);

}  // namespace bmas::lxd
