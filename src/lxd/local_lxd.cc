#include "lxd/local_lxd.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>
#include <spdlog/spdlog.h>

#include "common/process.h"
#include "common/traversable.h"
#include "lxd/lxd_client.h"
#include "lxd/lxd_internal.h"
#include "lxd/lxd_tls.h"
#include "lxd/peer_trust.h"

namespace bmas::lxd {
namespace {

namespace fs = std::filesystem;
using internal::WriteAtomically;

constexpr const char* kLxcfsMount = "/var/lib/lxcfs";
constexpr int64_t kIdsPerContainer = 65536;  // security.idmap.isolated gives each this many
constexpr int64_t kInotifyLimit = 1048576;

using internal::ReadText;

// Whether a file system of type `type` is mounted at `path` ("" = any type).
bool Mounted(const std::string& path, const std::string& type = "") {
  std::istringstream lines(ReadText("/proc/self/mounts"));
  std::string device, point, fstype, rest;
  while (lines >> device >> point >> fstype && std::getline(lines, rest)) {
    if (point == path && (type.empty() || fstype == type)) return true;
  }
  return false;
}

bool Answers(const std::string& socket) {
  LxdClient client(socket, std::chrono::seconds(2));
  return static_cast<bool>(client.Server());
}

std::string LogTail(const std::string& path) {
  const std::string text = ReadText(path);
  return text.size() > 1500 ? text.substr(text.size() - 1500) : text;
}

Result<void> RaiseSysctl(const std::string& key, int64_t value) {
  const std::string path = "/proc/sys/" + key;
  int64_t current = 0;
  std::ifstream(path) >> current;
  if (current >= value) return {};
  std::ofstream out(path);
  out << value;
  out.flush();
  if (!out) return Internal(fmt::format("cannot raise {} to {}", path, value));
  return {};
}

Result<void> Save(const LocalLxd& l) {
  rapidjson::StringBuffer buf;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buf);
  auto str = [&](const char* key, const std::string& value) {
    w.Key(key);
    w.String(value.c_str(), static_cast<rapidjson::SizeType>(value.size()));
  };
  w.StartObject();
  str("state_dir", l.state_dir);
  str("lxd_dir", l.lxd_dir);
  str("socket", l.socket);
  str("pool_driver", l.pool_driver);
  str("pool_note", l.pool_note);
  str("peer_note", l.peer_note);
  str("gpu_driver_root", l.gpu_driver_root);
  w.Key("started");
  w.StartArray();
  for (const DaemonProcess& d : l.started) WriteDaemonProcess(w, d);
  w.EndArray();
  w.EndObject();
  return WriteAtomically(l.state_dir + "/lxd.json", std::string(buf.GetString()) + "\n", 0644);
}

// Every directory above `path` must let unprivileged containers' root (a high host uid)
// through, or their root file systems under LXD_DIR cannot be reached.
Result<void> CheckTraversable(const fs::path& path) {
  if (auto p = UntraversableAncestor(path)) {
    return InvalidArgument(fmt::format(
        "{} is not traversable by other users, so unprivileged containers cannot reach "
        "their root file systems under {}: `chmod o+x {}` or choose another lxd.dir",
        p->string(), path.string(), p->string()));
  }
  return {};
}

Result<std::string> EnsurePool(LxdClient& client, const LxdSettings& s, std::string& note) {
  auto pools = client.StoragePools();
  if (!pools) return pools.error();
  for (const StoragePool& p : *pools) {
    if (p.name == kPoolName) return p.driver;
  }
  if (s.storage_driver != "dir") {
    auto made = client.CreateStoragePool(kPoolName, "btrfs", {{"size", s.pool_size}});
    if (made) return std::string("btrfs");
    if (s.storage_driver == "btrfs") return made.error();
    note = fmt::format("btrfs could not be used ({}); fell back to dir, where disk quotas are "
                       "not enforced",
                       made.error().message);
    spdlog::warn("lxd: {}", note);
  }
  auto made = client.CreateStoragePool(kPoolName, "dir", {});
  if (!made) return made.error();
  return std::string("dir");
}

}  // namespace

std::string SocketPath(const LxdSettings& settings) { return settings.dir + "/unix.socket"; }

std::string LxdPrerequisites() {
  if (geteuid() != 0) {
    return "starting and preparing LXD needs root: run bmas as root (sudo)";
  }
  std::vector<std::string> missing;
  for (const char* path : {"/usr/bin/lxd", "/usr/bin/lxcfs", "/usr/bin/newuidmap",
                           "/usr/bin/mkfs.btrfs", "/usr/bin/mksquashfs"}) {
    if (access(path, X_OK) != 0) missing.push_back(path);
  }
  if (access("/usr/sbin/lxd", X_OK) == 0) {
    missing.erase(std::remove(missing.begin(), missing.end(), "/usr/bin/lxd"), missing.end());
  }
  if (access("/usr/sbin/mkfs.btrfs", X_OK) == 0 || access("/sbin/mkfs.btrfs", X_OK) == 0) {
    missing.erase(std::remove(missing.begin(), missing.end(), "/usr/bin/mkfs.btrfs"),
                  missing.end());
  }
  if (missing.empty()) return "";
  std::string list;
  for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
  return fmt::format("LXD is not installed (missing {}): {}", list, kInstallHint);
}

std::string EnsureSubIdsInText(const std::string& text, int64_t count,
                               const std::vector<int64_t>& single_ids) {
  struct Line {
    std::string owner;
    int64_t start = 0, size = 0;
    std::string raw;
  };
  std::vector<Line> lines;
  std::istringstream in(text);
  for (std::string raw; std::getline(in, raw);) {
    Line l;
    l.raw = raw;
    const size_t a = raw.find(':'), b = raw.rfind(':');
    if (a != std::string::npos && b != a) {
      l.owner = raw.substr(0, a);
      try {
        l.start = std::stoll(raw.substr(a + 1, b - a - 1));
        l.size = std::stoll(raw.substr(b + 1));
      } catch (const std::exception&) {
        l.owner.clear();
      }
    }
    lines.push_back(l);
  }
  auto overlaps = [&](int64_t start, int64_t size, const Line* self) {
    for (const Line& l : lines) {
      if (&l == self || l.owner.empty() || l.size <= 1) continue;
      if (self != nullptr && l.start == self->start && l.size == self->size) continue;
      if (start < l.start + l.size && l.start < start + size) return true;
    }
    return false;
  };
  // LXD maps containers out of root's FIRST range of 65536 ids or more and ignores any later
  // one, so that range must hold `count`. It grows in place when nothing else sits there;
  // else a later root range that is big enough, or a new one above every range in the file,
  // goes in front of it. (Containers mapped from the old range are remapped by LXD at their
  // next start.)
  auto big = [](const Line& l) { return l.owner == "root" && l.size >= 65536; };
  auto first = std::find_if(lines.begin(), lines.end(), big);
  if (count > 0 && (first == lines.end() || first->size < count)) {
    if (first != lines.end() && !overlaps(first->start, count, &*first)) {
      first->size = count;
      first->raw = fmt::format("root:{}:{}", first->start, count);
    } else {
      Line chosen;
      auto enough = std::find_if(lines.begin(), lines.end(),
                                 [&](const Line& l) { return big(l) && l.size >= count; });
      if (enough != lines.end()) {
        chosen = *enough;
        lines.erase(enough);
      } else {
        int64_t top = 100000;
        for (const Line& l : lines) {
          if (!l.owner.empty() && l.size > 1) top = std::max(top, l.start + l.size);
        }
        chosen = Line{"root", top, count, fmt::format("root:{}:{}", top, count)};
      }
      lines.insert(std::find_if(lines.begin(), lines.end(), big), chosen);
    }
  }
  for (int64_t id : single_ids) {
    const bool present = std::any_of(lines.begin(), lines.end(), [&](const Line& l) {
      return l.owner == "root" && l.start == id && l.size == 1;
    });
    if (!present) lines.push_back(Line{"root", id, 1, fmt::format("root:{}:1", id)});
  }
  std::string out;
  for (const Line& l : lines) out += l.raw + "\n";
  return out;
}

Result<bool> EnsureSubIds(const std::string& path, int64_t count,
                          const std::vector<int64_t>& single_ids) {
  const std::string before = ReadText(path);
  const std::string after = EnsureSubIdsInText(before, count, single_ids);
  if (after == before) return false;
  if (auto w = WriteAtomically(path, after, 0644); !w) return w.error();
  return true;
}

Result<LocalLxd> ReadLocalLxd(const std::string& state_dir) {
  const std::string path = state_dir + "/lxd.json";
  const std::string text = ReadText(path);
  if (text.empty()) {
    return NotFound(fmt::format("`bmas lxd up` has not run with state dir {} (no {})", state_dir,
                                path));
  }
  rapidjson::Document d;
  d.Parse(text.c_str());
  if (d.HasParseError() || !d.IsObject()) return Internal(fmt::format("{} is not valid JSON", path));
  auto str = [](const rapidjson::Value& v, const char* key) {
    auto it = v.FindMember(key);
    return it != v.MemberEnd() && it->value.IsString() ? std::string(it->value.GetString())
                                                       : std::string();
  };
  LocalLxd l;
  l.state_dir = str(d, "state_dir");
  l.lxd_dir = str(d, "lxd_dir");
  l.socket = str(d, "socket");
  l.pool_driver = str(d, "pool_driver");
  l.pool_note = str(d, "pool_note");
  l.peer_note = str(d, "peer_note");
  if (d.HasMember("gpu_driver_root")) l.gpu_driver_root = str(d, "gpu_driver_root");
  if (auto it = d.FindMember("started"); it != d.MemberEnd() && it->value.IsArray()) {
    for (const auto& e : it->value.GetArray()) {
      auto s = ReadDaemonProcess(e);
      if (!s) continue;
      l.started.push_back(std::move(*s));
    }
  }
  return l;
}

bool LxcfsServes() {
  struct stat st;
  return Mounted(kLxcfsMount) &&
         stat((std::string(kLxcfsMount) + "/proc/meminfo").c_str(), &st) == 0;
}

namespace {

// With `listen` set: LXD answers other nodes there (core.https_address). A node that shows its
// peers a certificate shared by every node also trusts that one certificate, made when absent;
// a node with its own certificate trusts its peers' (SyncPeerTrust, after the start). `note`
// says what was done.
Result<void> PreparePeers(LxdClient& client, const LxdSettings& settings, std::string* note) {
  if (settings.listen.empty()) return {};
  auto server = client.Server();
  if (!server) return server.error();
  if (server->config["core.https_address"] != settings.listen) {
    if (auto r = client.SetServerConfig({{"core.https_address", settings.listen}}); !r) return r;
  }
  const PeerIdentity id = ChoosePeerIdentity(settings, HasJoined(settings));
  if (id.own) {
    *note = fmt::format("peers: LXD listens on {}; peers reach it with their own node "
                        "certificates, those in {}",
                        settings.listen, PeerCertsDir(settings));
    return {};
  }
  auto made = EnsureClientCertificate(id.cert, id.key, "bmas");
  if (!made) return made.error();
  const std::string pem = ReadText(id.cert);
  auto fingerprint = CertificateFingerprint(pem);
  if (!fingerprint) return fingerprint.error();
  auto trusted = client.TrustedCertificates();
  if (!trusted) return trusted.error();
  if (std::none_of(trusted->begin(), trusted->end(),
                   [&](const TrustedCertificate& t) { return t.fingerprint == *fingerprint; })) {
    if (auto r = client.TrustCertificate(kSharedTrustName, pem); !r) return r;
  }
  *note = fmt::format("peers: LXD listens on {} and trusts {} ({})", settings.listen, id.cert,
                      fingerprint->substr(0, 12));
  if (*made) {
    *note += fmt::format("; made it now: copy it and {} to every node before their `bmas lxd up`",
                         id.key);
  }
  *note += ". Note: " + id.note;
  return {};
}

// StartLocalLxd's steps once `l` is set up: starts what is missing (adding it to l->started)
// and prepares LXD.
Result<void> StartAndPrepare(const LxdSettings& settings, LocalLxd* l) {
  std::error_code ec;
  if (!Answers(l->socket)) {  // checked before anything starts
    fs::create_directories(l->lxd_dir, ec);
    if (ec) return Internal(fmt::format("cannot create {}: {}", l->lxd_dir, ec.message()));
    if (auto t = CheckTraversable(fs::path(l->lxd_dir) / "x"); !t) return t.error();
  }

  // Before lxd starts: it reads the id ranges and needs the watches for many containers.
  for (const char* key : {"fs/inotify/max_user_instances", "fs/inotify/max_user_watches"}) {
    if (auto r = RaiseSysctl(key, kInotifyLimit); !r) return r.error();
  }
  // LXD keeps the first block of root's range for containers that are not isolated, and
  // hands isolated ones the blocks after it: `users` workspaces need users + 1 blocks; one
  // more is margin. (The 300th-of-300 failure, "Not enough uid/gid available", came from the
  // range LXD reads: see EnsureSubIdsInText.)
  const int64_t ids = kIdsPerContainer * (int64_t{settings.users} + 2);
  for (const char* file : {"/etc/subuid", "/etc/subgid"}) {
    auto changed = EnsureSubIds(file, ids, {});
    if (!changed) return changed.error();
    if (*changed && Answers(l->socket)) {
      spdlog::warn("lxd: {} changed while LXD runs; LXD reads it at start-up only", file);
    }
  }

  if (Mounted(kLxcfsMount) && !LxcfsServes()) {
    // An lxcfs that was killed leaves its mount behind, and every read through it fails with
    // ENOTCONN; LXD's mount hook then skips lxcfs and containers show the host's memory.
    spdlog::warn("lxd: {} is the mount of an lxcfs that is gone; unmounting it", kLxcfsMount);
    if (umount2(kLxcfsMount, MNT_DETACH) != 0) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("{} is the mount of an lxcfs that is gone and cannot be "
                               "unmounted: {}; run `umount -l {}`",
                               kLxcfsMount, std::strerror(errno), kLxcfsMount),
                   {}};
    }
  }
  if (!Mounted(kLxcfsMount)) {
    fs::create_directories(kLxcfsMount, ec);
    auto lxcfs = StartDaemonProcess("lxcfs", "lxcfs", {"lxcfs", kLxcfsMount}, {},
                                    l->state_dir + "/logs/lxcfs.log");
    if (!lxcfs) return lxcfs.error();
    l->started.push_back(*lxcfs);
    if (auto saved = Save(*l); !saved) return saved.error();
    if (!WaitFor(LxcfsServes, lxcfs->pid, std::chrono::seconds(10))) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("lxcfs did not mount {}; its log {} ends with:\n{}", kLxcfsMount,
                               lxcfs->log, LogTail(lxcfs->log)),
                   {}};
    }
  }

  if (!Answers(l->socket)) {
    // AppArmor profiles LXD's containers need; absent AppArmor is fine.
    if (access("/usr/libexec/lxd/lxd-apparmor-load", X_OK) == 0) {
      (void)RunCommand({"/usr/libexec/lxd/lxd-apparmor-load"}, {}, std::chrono::seconds(30));
    }
    std::vector<std::string> args = {"lxd", "--logfile=" + l->lxd_dir + "/lxd.log"};
    if (getgrnam("lxd") != nullptr) args.insert(args.begin() + 1, "--group=lxd");
    auto lxd = StartDaemonProcess("lxd", "lxd", args, {"LXD_DIR=" + l->lxd_dir},
                                  l->state_dir + "/logs/lxd.out");
    if (!lxd) return lxd.error();
    l->started.push_back(*lxd);
    if (auto saved = Save(*l); !saved) return saved.error();
    const std::string socket = l->socket;
    if (!WaitFor([&socket] { return Answers(socket); }, lxd->pid, std::chrono::seconds(60))) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("lxd did not answer on {}; its log {} ends with:\n{}", l->socket,
                               l->lxd_dir + "/lxd.log", LogTail(l->lxd_dir + "/lxd.log") +
                                                           LogTail(lxd->log)),
                   {}};
    }
  }

  LxdClient client(l->socket);
  auto driver = EnsurePool(client, settings, l->pool_note);
  if (!driver) return driver.error();
  l->pool_driver = *driver;
  Profile profile;
  profile.name = kProfileName;
  profile.description = "bmas workspaces: unprivileged, own id range, no network, no GPU";
  profile.config = {{"security.idmap.isolated", "true"}, {"security.privileged", "false"}};
  profile.devices = {{"root", {{"type", "disk"}, {"path", "/"}, {"pool", kPoolName}}}};
  if (auto p = client.PutProfile(profile); !p) return p.error();
  if (auto p = PreparePeers(client, settings, &l->peer_note); !p) return p.error();
  return Save(*l);
}

// Stops l.started[keep...] in reverse start order, drops them from l.started and saves l.
// Returns what it stopped.
Result<std::vector<std::string>> StopStarted(LocalLxd* l, size_t keep) {
  std::vector<std::string> stopped;
  for (auto it = l->started.rbegin(); it != l->started.rend() - keep; ++it) {
    if (!it->Runs()) continue;
    if (it->name == "lxd") {
      // Killing lxd leaves its containers running with nobody to manage them.
      LxdClient client(l->socket);
      if (auto instances = client.Instances()) {
        for (const Instance& i : *instances) {
          if (i.status != InstanceStatus::kRunning) continue;
          if (auto s = client.ChangeState(i.name, "stop", /*force=*/true); !s) {
            spdlog::warn("lxd: {}", s.error().message);
          } else {
            stopped.push_back("instance " + i.name);
          }
        }
      }
    }
    if (!StopProcess(it->pid, it->comm, std::chrono::seconds(20), it->start_ticks)) {
      return Internal(fmt::format("{} (pid {}) did not stop", it->name, it->pid));
    }
    stopped.push_back(fmt::format("{} (pid {})", it->name, it->pid));
    if (it->name == "lxd") {
      // LXD leaves its pool's loop mount and its own tmpfs mounts behind.
      for (const char* sub : {"/storage-pools/bmas", "/shmounts", "/devlxd"}) {
        const std::string path = l->lxd_dir + sub;
        if (Mounted(path) && umount2(path.c_str(), MNT_DETACH) != 0) {
          spdlog::warn("lxd: cannot unmount {}: {}", path, std::strerror(errno));
        }
      }
    }
    if (it->name == "lxcfs" && Mounted(kLxcfsMount)) {
      umount2(kLxcfsMount, MNT_DETACH);
    }
  }
  l->started.resize(keep);
  if (auto saved = Save(*l); !saved) return saved.error();
  return stopped;
}

}  // namespace


Result<LocalLxd> StartLocalLxd(const LxdSettings& settings, const std::string& state_dir,
                               const std::string& gpu_driver_root) {
  if (std::string why = LxdPrerequisites(); !why.empty()) {
    return Error{geteuid() != 0 ? ErrorCode::kPermissionDenied : ErrorCode::kUnavailable, why, {}};
  }
  LocalLxd l;
  std::error_code ec;
  fs::create_directories(state_dir + "/logs", ec);
  if (ec) return Internal(fmt::format("cannot create {}/logs: {}", state_dir, ec.message()));
  l.state_dir = fs::absolute(state_dir).string();
  l.lxd_dir = fs::absolute(settings.dir).string();
  l.socket = l.lxd_dir + "/unix.socket";
  l.gpu_driver_root = gpu_driver_root;
  if (auto earlier = ReadLocalLxd(l.state_dir)) {
    for (const DaemonProcess& d : earlier->started) {
      if (d.Runs()) l.started.push_back(d);
    }
  }
  const size_t earlier = l.started.size();
  if (auto done = StartAndPrepare(settings, &l); !done) {
    // What this call started goes again: a half-prepared LXD is of no use, and an lxcfs left
    // running with nobody recording it outlives the state dir.
    if (auto stopped = StopStarted(&l, earlier); !stopped) {
      spdlog::warn("lxd: {}", stopped.error().message);
    }
    return done.error();
  }
  return l;
}

Result<std::vector<std::string>> StopLocalLxd(const std::string& state_dir) {
  auto l = ReadLocalLxd(state_dir);
  if (!l) return l.error();
  return StopStarted(&*l, 0);
}

}  // namespace bmas::lxd
