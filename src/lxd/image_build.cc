#include "lxd/image_build.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/process.h"
#include "lxd/lxd_internal.h"
#include "lxd/workspace.h"

namespace bmas::lxd {
namespace {

namespace fs = std::filesystem;

Result<void> Write(const fs::path& path, const std::string& text, fs::perms perms) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) return Internal(fmt::format("cannot write {}", path.string()));
  std::error_code ec;
  fs::permissions(path, perms, ec);
  return {};
}

Result<void> Run(const std::vector<std::string>& args, std::chrono::seconds timeout) {
  auto r = RunCommand(args, {}, timeout);
  if (!r) return r.error();
  if (r->exit_code != 0) {
    std::string tail = r->err.empty() ? r->out : r->err;
    if (tail.size() > 2000) tail = tail.substr(tail.size() - 2000);
    return Internal(fmt::format("{} failed (exit {}): {}", args[0], r->exit_code, tail));
  }
  return {};
}

// `created`: unix seconds.
std::string Metadata(const std::string& base, const std::string& init,
                     const std::string& description, int64_t created) {
  return fmt::format(
      "architecture: x86_64\n"
      "creation_date: {}\n"
      "properties:\n"
      "  description: \"{}\"\n"
      "  os: {}\n"
      "  bmas.built: \"true\"\n"
      "  bmas.base: {}\n"
      "  bmas.init: {}\n"
      "templates:\n"
      "  /etc/hostname:\n"
      "    when: [create, copy]\n"
      "    template: hostname.tpl\n",
      created, description, base, base, init);
}

// Mounts the container's cgroups at /sys/fs/cgroup (LXD leaves that to the init), so limits
// can be read inside: cgroup v2 where the host's controllers are there, else the v1 controllers
// LXD gives us (on a hybrid host v2 mounts, but holds no controller).
constexpr const char* kMountCgroups = R"(
controllers=
if mount -t cgroup2 none /sys/fs/cgroup 2>/dev/null; then
  read -r controllers < /sys/fs/cgroup/cgroup.controllers
  [ -n "$controllers" ] || umount /sys/fs/cgroup
fi
if [ -z "$controllers" ] && mount -t tmpfs cgroup /sys/fs/cgroup 2>/dev/null; then
  for c in cpuset cpu memory pids; do
    mkdir -p /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c
  done
fi
)";

// The init's last word before it settles: the mark StartInstance waits for.
std::string ReadyLine() { return fmt::format(": > {}\n", kReadyMark); }

// PID 1 of a Debian workspace built with init "minimal": the mounts systemd would make, then
// tini, which reaps orphans and passes LXD's stop signal (SIGPWR) on to a sleep that ends on it.
std::string MinimalInit() {
  return std::string(R"(#!/bin/sh
# bmas: PID 1 of a workspace without systemd (bmas image build --init minimal).
mount -t tmpfs -o nosuid,nodev,mode=755 tmpfs /run
mkdir -p /run/lock /dev/shm
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /dev/shm
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /tmp
)") + kMountCgroups + ReadyLine() + "exec /usr/bin/tini -- /bin/sleep infinity\n";
}

// A root file system of busybox alone: its applets as links, and an init that mounts the
// cgroup file system (so limits can be read inside) and then sleeps.
Result<void> BusyboxRootfs(const fs::path& rootfs) {
  const char* busybox = "/bin/busybox";
  if (access(busybox, X_OK) != 0) {
    return Error{ErrorCode::kUnavailable,
                 "busybox is not installed: apt-get install -y busybox-static", {}};
  }
  std::error_code ec;
  for (const char* dir : {"bin", "sbin", "etc/init.d", "proc", "sys", "dev", "tmp", "root", "home",
                          "run", "var/tmp", "usr/bin", "usr/sbin"}) {
    fs::create_directories(rootfs / dir, ec);
    if (ec) return Internal(fmt::format("cannot create {}: {}", (rootfs / dir).string(), ec.message()));
  }
  fs::permissions(rootfs / "tmp", fs::perms::all | fs::perms::sticky_bit, ec);
  fs::copy_file(busybox, rootfs / "bin/busybox", fs::copy_options::overwrite_existing, ec);
  if (ec) return Internal(fmt::format("cannot copy {}: {}", busybox, ec.message()));
  auto list = RunCommand({busybox, "--list-full"}, {}, std::chrono::seconds(10));
  if (!list || list->exit_code != 0) return Internal("busybox --list-full failed");
  std::istringstream applets(list->out);
  for (std::string applet; std::getline(applets, applet);) {
    if (applet.empty() || applet == "bin/busybox") continue;
    const fs::path link = rootfs / applet;
    if (fs::exists(fs::symlink_status(link))) continue;
    fs::create_symlink("/bin/busybox", link, ec);
  }
  if (auto w = Write(rootfs / "etc/inittab",
                     "::sysinit:/etc/init.d/rcS\n::respawn:/bin/sleep 2147483647\n",
                     fs::perms(0644));
      !w) {
    return w;
  }
  if (auto w = Write(rootfs / "etc/init.d/rcS",
                     std::string("#!/bin/sh\nmount -t tmpfs -o nosuid,nodev,mode=755 tmpfs /run\n") +
                         kMountCgroups + ReadyLine(),
                     fs::perms(0755));
      !w) {
    return w;
  }
  if (auto w = Write(rootfs / "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", fs::perms(0644)); !w) {
    return w;
  }
  if (auto w = Write(rootfs / "etc/group", "root:x:0:\n", fs::perms(0644)); !w) return w;
  return {};
}

// The units the systemd image masks (DebianRootfs).
constexpr const char* kMaskedUnits[] = {
    "systemd-journald.service", "systemd-journald.socket", "systemd-journald-dev-log.socket",
    "systemd-journald-audit.socket", "systemd-logind.service", "console-getty.service",
    "getty@.service", "dbus.service", "dbus.socket"};

std::string DebianDescription(const std::string& init) {
  return fmt::format("bmas Debian 12 (python3, git, build-essential; {})",
                     init == "systemd" ? "systemd" : "tini, no systemd");
}

Result<std::string> ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return Internal(fmt::format("cannot read {}", path.string()));
  if (bytes.empty()) return Internal(fmt::format("cannot read {}: it is empty", path.string()));
  return bytes;
}

// Keeps the tarball in the cache: written beside its name, then renamed, so that a build cut
// short never leaves half a tarball to be imported later.
Result<void> KeepInCache(const fs::path& tarball, const fs::path& cached) {
  std::error_code ec;
  fs::create_directories(cached.parent_path(), ec);
  if (ec) {
    return Internal(fmt::format("cannot create the image cache {}: {} (choose another with "
                                "--cache-dir)",
                                cached.parent_path().string(), ec.message()));
  }
  const fs::path part = cached.string() + fmt::format(".part-{}", getpid());
  fs::copy_file(tarball, part, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(part, cached, ec);
  if (ec) {
    fs::remove(part, ec);
    return Internal(fmt::format("cannot keep the image in {}: {} (free space there, or choose "
                                "another cache with --cache-dir)",
                                cached.string(), ec.message()));
  }
  fs::permissions(cached, fs::perms(0644), ec);
  return {};
}

Result<void> DebianRootfs(const fs::path& rootfs, const std::string& init) {
  if (geteuid() != 0) {
    return Error{ErrorCode::kPermissionDenied, "building a Debian image needs root (debootstrap)",
                 {}};
  }
  if (access("/usr/sbin/debootstrap", X_OK) != 0) {
    return Error{ErrorCode::kUnavailable,
                 "debootstrap is not installed: apt-get install -y debootstrap", {}};
  }
  auto mirror = AptMirror();
  if (!mirror) return mirror.error();
  const std::string include = fmt::format("--include={}", fmt::join(DebianPackages(init), ","));
  if (auto r = Run({"debootstrap", "--variant=minbase", include, kDebianSuite, rootfs.string(),
                    *mirror},
                   std::chrono::seconds(1800));
      !r) {
    return r;
  }
  // debootstrap leaves the packages it installed in apt's cache (~130 MB): not in the image.
  std::error_code listed;
  for (const auto& e : fs::directory_iterator(rootfs / "var/cache/apt/archives", listed)) {
    std::error_code ignored;
    if (e.path().extension() == ".deb") fs::remove(e.path(), ignored);
  }
  if (init == "minimal") {
    std::error_code ec;
    fs::remove(rootfs / "sbin/init", ec);
    return Write(rootfs / "sbin/init", MinimalInit(), fs::perms(0755));
  }
  // A workspace is reached through bmas (exec, shell, jobs), never by logging in on a console:
  // what serves logins and their logs stays off, which takes an idle workspace's memory cgroup
  // from ~33 MiB to ~22 MiB. `systemctl unmask UNIT` in the workspace brings one back.
  std::error_code ec;
  for (const char* unit : kMaskedUnits) {
    const fs::path link = rootfs / "etc/systemd/system" / unit;
    fs::remove(link, ec);
    fs::create_symlink("/dev/null", link, ec);
    if (ec) return Internal(fmt::format("cannot mask {}: {}", unit, ec.message()));
  }
  return {};
}

// Builds the root file system of `base` in `dir` and packs it with its metadata; returns the
// tarball's path.
Result<fs::path> PackImage(const fs::path& dir, const std::string& base, const std::string& init,
                           Env& env) {
  auto rootfs =
      base == "busybox" ? BusyboxRootfs(dir / "rootfs") : DebianRootfs(dir / "rootfs", init);
  if (!rootfs) return rootfs.error();
  const std::string description =
      base == "busybox" ? "bmas busybox (tests)" : DebianDescription(init);
  const int64_t created = static_cast<int64_t>(env.UnixNow());
  if (auto w =
          Write(dir / "metadata.yaml", Metadata(base, init, description, created), fs::perms(0644));
      !w) {
    return w.error();
  }
  if (auto w = Write(dir / "templates/hostname.tpl", "{{ container.name }}\n", fs::perms(0644)); !w) {
    return w.error();
  }
  const fs::path tarball = dir / "image.tar.gz";
  std::vector<std::string> tar = {"tar", "-C", dir.string(), "--numeric-owner", "-czf",
                                  tarball.string()};
  if (base == "busybox") {
    tar.insert(tar.begin() + 3, {"--owner=0", "--group=0"});
  }
  for (const char* part : {"metadata.yaml", "templates", "rootfs"}) tar.emplace_back(part);
  if (auto r = Run(tar, std::chrono::seconds(900)); !r) return r.error();
  return tarball;
}

}  // namespace

Result<std::string> DebianMirrorIn(const std::vector<AptSourceFile>& files,
                                   const std::string& suite) {
  auto usable = [&suite](const std::string& uri, const std::vector<std::string>& suites) {
    return uri.rfind("http", 0) == 0 &&
           std::find(suites.begin(), suites.end(), suite) != suites.end();
  };
  for (const AptSourceFile& f : files) {
    const bool deb822 = f.name.ends_with(".sources");
    if (!deb822 && !f.name.ends_with(".list")) continue;  // apt reads no other names
    std::istringstream lines(f.text);
    if (!deb822) {
      // deb [options] URI suite [components...]
      for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        std::vector<std::string> w;
        for (std::string x; words >> x;) w.push_back(x);
        if (w.empty() || w[0] != "deb") continue;
        size_t i = 1;
        if (i < w.size() && w[i].starts_with("[")) {
          while (i < w.size() && !w[i].ends_with("]")) ++i;
          ++i;
        }
        if (i + 1 < w.size() && usable(w[i], {w[i + 1]})) return w[i];
      }
      continue;
    }
    // Stanzas of "Key: values" separated by blank lines.
    std::map<std::string, std::vector<std::string>> stanza;
    auto check = [&]() -> std::optional<std::string> {
      auto values = [&stanza](const char* key) {
        auto it = stanza.find(key);
        return it == stanza.end() ? std::vector<std::string>{} : it->second;
      };
      const auto types = values("types"), enabled = values("enabled");
      const bool on = enabled.empty() || enabled[0] != "no";
      if (on && std::find(types.begin(), types.end(), "deb") != types.end()) {
        for (const std::string& uri : values("uris")) {
          if (usable(uri, values("suites"))) return uri;
        }
      }
      stanza.clear();
      return std::nullopt;
    };
    for (std::string line; std::getline(lines, line);) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) {
        if (auto uri = check()) return *uri;
        continue;
      }
      if (line[0] == '#' || line[0] == ' ' || line[0] == '\t') continue;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = line.substr(0, colon);
      std::transform(key.begin(), key.end(), key.begin(), ::tolower);
      std::istringstream words(line.substr(colon + 1));
      auto& v = stanza[key];
      for (std::string x; words >> x;) v.push_back(x);
    }
    if (auto uri = check()) return *uri;
  }
  return NotFound(fmt::format("no Debian mirror for {} in /etc/apt/sources.list or "
                              "/etc/apt/sources.list.d/*.list, *.sources",
                              suite));
}

Result<std::string> AptMirror() {
  std::vector<AptSourceFile> files;
  auto read = [&files](const fs::path& path) {
    std::ifstream in(path);
    if (!in) return;
    std::stringstream text;
    text << in.rdbuf();
    files.push_back({path.filename().string(), text.str()});
  };
  read("/etc/apt/sources.list");
  std::vector<fs::path> parts;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/etc/apt/sources.list.d", ec)) {
    parts.push_back(e.path());
  }
  std::sort(parts.begin(), parts.end());  // apt's order
  for (const fs::path& p : parts) read(p);
  return DebianMirrorIn(files, kDebianSuite);
}

std::vector<std::string> DebianPackages(const std::string& init) {
  std::vector<std::string> packages =
      init == "systemd" ? std::vector<std::string>{"systemd-sysv", "dbus"}
                        : std::vector<std::string>{"tini"};
  for (const char* p : {"iproute2", "procps", "ca-certificates", "less", "nano", "git",
                        "python3", "python3-venv", "python3-pip", "build-essential"}) {
    packages.emplace_back(p);
  }
  return packages;
}

std::string CachedImageName(const std::string& init) {
  std::string recipe = fmt::format("suite {}\npackages {}\nmetadata {}\n", kDebianSuite,
                                   fmt::join(DebianPackages(init), ","),
                                   Metadata("debian", init, DebianDescription(init), 0));
  if (init == "systemd") {
    recipe += fmt::format("masked {}\n", fmt::join(kMaskedUnits, ","));
  } else {
    recipe += "init " + MinimalInit();
  }
  return fmt::format("debian-{}-{}-{}.tar.gz", kDebianSuite, init,
                     internal::Sha256Hex(recipe).substr(0, 16));
}

Result<BuiltImage> BuildImage(LxdApi& client, const ImageBuildRequest& request, Env& env) {
  const TimePoint started = env.Now();
  const std::string& base = request.base;
  const std::string& init = request.init;
  if (base != "busybox" && base != "debian") {
    return InvalidArgument(fmt::format("unknown image base \"{}\": busybox or debian", base),
                           "base");
  }
  if (init != "minimal" && init != "systemd") {
    return InvalidArgument(fmt::format("unknown init \"{}\": minimal or systemd", init), "init");
  }
  if (base == "busybox" && init != "minimal") {
    return InvalidArgument("the busybox image has no systemd: --init minimal", "init");
  }
  BuiltImage out;
  out.alias = request.alias.empty() ? "bmas-" + base : request.alias;
  std::string bytes;
  const bool cached = base == "debian" && !request.cache_dir.empty();
  if (cached) {
    out.cache_file = (fs::path(request.cache_dir) / CachedImageName(init)).string();
    std::error_code ec;
    if (!request.rebuild && fs::is_regular_file(out.cache_file, ec)) {
      auto read = ReadAll(out.cache_file);
      if (!read) return read.error();
      bytes = std::move(*read);
      out.from_cache = true;
    }
  }
  if (!out.from_cache) {
    const fs::path dir = fs::path(request.work_dir) / fmt::format("image-{}-{}", base, getpid());
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir / "templates", ec);
    if (ec) return Internal(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
    struct Cleanup {
      fs::path dir;
      ~Cleanup() {
        std::error_code ignored;
        fs::remove_all(dir, ignored);
      }
    } cleanup{dir};
    auto tarball = PackImage(dir, base, init, env);
    if (!tarball) return tarball.error();
    if (cached) {
      if (auto kept = KeepInCache(*tarball, out.cache_file); !kept) return kept.error();
    }
    auto read = ReadAll(*tarball);
    if (!read) return read.error();
    bytes = std::move(*read);
  }
  out.size = static_cast<int64_t>(bytes.size());
  // The same tarball imported again (a second `image build` from the cache) has the same
  // fingerprint, which LXD refuses to import twice.
  const std::string fingerprint = internal::Sha256Hex(bytes);
  auto images = client.Images();
  if (!images) return images.error();
  for (const Image& i : *images) {
    if (i.fingerprint != fingerprint) continue;
    if (std::find(i.aliases.begin(), i.aliases.end(), out.alias) == i.aliases.end()) {
      return Error{ErrorCode::kAlreadyExists,
                   fmt::format("LXD holds this image ({}) already, without the alias {}: `lxc "
                               "image alias create {} {}`, or `bmas image build --rebuild`",
                               fingerprint.substr(0, 12), out.alias, out.alias,
                               fingerprint.substr(0, 12)),
                   "alias"};
    }
    out.fingerprint = fingerprint;
    out.existed = true;
    out.seconds = (env.Now() - started).count();
    return out;
  }
  auto fp = client.ImportImage(std::move(bytes), out.alias);
  if (!fp) return fp.error();
  out.fingerprint = *fp;
  out.seconds = (env.Now() - started).count();
  return out;
}

Result<std::optional<Image>> ImageByAlias(LxdApi& client, const std::string& alias) {
  auto images = client.Images();
  if (!images) return images.error();
  for (const Image& i : *images) {
    if (std::find(i.aliases.begin(), i.aliases.end(), alias) != i.aliases.end()) {
      return std::optional<Image>(i);
    }
  }
  return std::optional<Image>();
}

Result<BuiltImage> EnsureDefaultImage(LxdApi& client, const std::string& work_dir,
                                      const std::string& cache_dir, Env& env) {
  auto held = ImageByAlias(client, kDefaultImageAlias);
  if (!held) return held.error();
  if (*held) {
    BuiltImage out;
    out.fingerprint = (*held)->fingerprint;
    out.alias = kDefaultImageAlias;
    out.size = (*held)->size;
    out.existed = true;
    return out;
  }
  ImageBuildRequest request;
  request.work_dir = work_dir;
  request.cache_dir = cache_dir;
  return BuildImage(client, request, env);
}

Result<Image> NewestBuiltImage(LxdApi& client) {
  auto images = client.Images();
  if (!images) return images.error();
  const Image* newest = nullptr;
  for (const Image& i : *images) {
    auto it = i.properties.find("bmas.built");
    if (it == i.properties.end() || it->second != "true") continue;
    if (newest == nullptr || i.uploaded_at > newest->uploaded_at) newest = &i;
  }
  if (newest == nullptr) {
    return NotFound("no image built by bmas yet: `bmas image build --base debian` (or "
                    "`--base busybox` for a small test image)",
                    "image");
  }
  return *newest;
}

}  // namespace bmas::lxd
