#pragma once

// Container images built on this machine, without an image server: a busybox one (1 MB, for
// tests) from the busybox-static package, and a Debian one (debootstrap minbase from the mirror
// apt uses). Each is packed as a unified image tarball and imported through LXD's API with
// properties bmas.built=true and bmas.base=<base>, so the newest can be found later.

#include <string>
#include <vector>

#include "common/env.h"
#include "common/result.h"
#include "lxd/lxd_client.h"

namespace bmas::lxd {

struct BuiltImage {
  std::string fingerprint;
  std::string alias;
  int64_t size = 0;      // bytes of the tarball
  double seconds = 0;    // to build and import
};

// base: "busybox" or "debian". init (Debian only): "minimal" (PID 1 is tini, which reaps
// orphans and sleeps: an idle workspace holds a few MiB) or "systemd" (services run inside, at
// ~20 MiB more per workspace; journald, logind, the console getty and dbus are masked).
// `work_dir` holds the build tree (removed after). `alias` "" = "bmas-<base>". Debian needs
// root and debootstrap; the suite is the host's (bookworm). `env` dates the image and times
// the build.
Result<BuiltImage> BuildImage(LxdApi& client, const std::string& base, const std::string& init,
                              const std::string& alias, const std::string& work_dir, Env& env);

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
