#include "lxd/workspace.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "lxd/image_build.h"
#include "lxd/local_lxd.h"

namespace bmas::lxd {
namespace {

uint32_t Fnv1a32(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

Workspace FromInstance(const Instance& i) {
  Workspace w;
  auto get = [&i](const char* key) {
    auto it = i.config.find(key);
    return it == i.config.end() ? std::string() : it->second;
  };
  w.user = get(kWorkspaceUserKey);
  w.name = i.name;
  w.status = i.status;
  w.image = get("image.description");
  w.cpus = get("limits.cpu");
  w.memory = get("limits.memory");
  w.processes = get("limits.processes");
  if (auto root = i.devices.find("root"); root != i.devices.end()) {
    if (auto size = root->second.find("size"); size != root->second.end()) w.disk = size->second;
  }
  if (auto home = i.devices.find("home"); home != i.devices.end()) {
    if (auto path = home->second.find("path"); path != home->second.end()) w.home = path->second;
  }
  return w;
}

}  // namespace

Result<Account> LookUpAccount(const std::string& user) {
  passwd* pw = user.empty() ? nullptr : getpwnam(user.c_str());
  if (pw == nullptr) {
    return NotFound(fmt::format("there is no Unix account \"{}\" on this host (a workspace "
                                "belongs to a Unix user: add one with useradd)",
                                user),
                    "user");
  }
  return Account{pw->pw_name, pw->pw_uid, pw->pw_gid, pw->pw_dir, pw->pw_shell};
}

UidRange ParseLoginDefs(const std::string& text) {
  UidRange r;
  std::istringstream in(text);
  std::string key;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    int64_t value = 0;
    if (!(fields >> key) || key.starts_with('#') || !(fields >> value) || value < 0) continue;
    if (key == "UID_MIN") r.min = static_cast<uid_t>(value);
    if (key == "UID_MAX") r.max = static_cast<uid_t>(value);
  }
  return r;
}

UidRange ReadLoginDefs(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return ParseLoginDefs(text.str());
}

Result<void> CheckWorkspaceOwner(const Account& account, const UidRange& range,
                                 bool allow_system) {
  if (allow_system) return {};
  if (account.uid == 0) {
    return InvalidArgument(fmt::format(
        "{} is uid 0: its workspace would map the host's root into the container and mount {}; "
        "workspaces are for users (root works on the host)",
        account.name, account.home));
  }
  if (account.uid < range.min || account.uid > range.max) {
    return InvalidArgument(fmt::format(
        "{} (uid {}) is a system account (ordinary users have uids {}-{} in /etc/login.defs); "
        "give --allow-system-account if you mean it",
        account.name, account.uid, range.min, range.max));
  }
  return {};
}

std::string WorkspaceName(const std::string& user) {
  std::string plain = "ws-" + user;
  if (IsValidInstanceName(plain)) return plain;
  std::string kept;
  for (unsigned char c : user) {
    if (std::isalnum(c)) kept += static_cast<char>(std::tolower(c));
    else if (c == '-' || c == '_' || c == '.') kept += '-';
  }
  if (kept.size() > 40) kept.resize(40);
  while (!kept.empty() && kept.back() == '-') kept.pop_back();
  return fmt::format("ws-{}{}{:08x}", kept, kept.empty() ? "" : "-", Fnv1a32(user));
}

InstanceSpec WorkspaceInstance(const Account& account, const std::string& image,
                               const WorkspaceSettings& limits, const std::string& pool_driver) {
  InstanceSpec spec;
  spec.name = WorkspaceName(account.name);
  spec.image = image;
  spec.profiles = {kProfileName};
  spec.config[kWorkspaceUserKey] = account.name;
  spec.config["security.privileged"] = "false";
  spec.config["raw.idmap"] = account.uid == account.gid
                                 ? fmt::format("both {} {}", account.uid, account.uid)
                                 : fmt::format("uid {} {}\ngid {} {}", account.uid, account.uid,
                                               account.gid, account.gid);
  for (const auto& [key, value] : LimitsConfig(limits)) {
    if (value) spec.config[key] = *value;
  }
  spec.devices["home"] = {{"type", "disk"}, {"source", account.home}, {"path", account.home}};
  if (auto root = RootDevice(limits, pool_driver)) spec.devices["root"] = *root;
  return spec;
}

std::map<std::string, std::optional<std::string>> LimitsConfig(const WorkspaceSettings& limits) {
  auto positive = [](int n) {
    return n > 0 ? std::optional<std::string>(std::to_string(n)) : std::nullopt;
  };
  return {{"limits.cpu", positive(limits.cpus)},
          {"limits.memory", limits.memory.empty() ? std::nullopt
                                                  : std::optional<std::string>(limits.memory)},
          {"limits.processes", positive(limits.processes)}};
}

std::optional<StringMap> RootDevice(const WorkspaceSettings& limits,
                                    const std::string& pool_driver) {
  if (limits.disk.empty() || pool_driver != "btrfs") return std::nullopt;
  return StringMap{{"type", "disk"}, {"path", "/"}, {"pool", kPoolName}, {"size", limits.disk}};
}

Result<void> CheckCaller(uid_t caller, const std::string& user) {
  if (caller == 0) return {};
  passwd* pw = getpwuid(caller);
  const std::string me = pw != nullptr ? pw->pw_name : std::to_string(caller);
  if (!user.empty() && me != user) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("{} may act only on their own workspace, not on {}'s", me, user),
                 "user"};
  }
  return Error{ErrorCode::kPermissionDenied,
               "LXD's socket is root-only: creating, starting, stopping, deleting and listing "
               "workspaces need root (sudo bmas workspace ...); `bmas workspace exec` and `shell` "
               "reach your own through bmas agent",
               {}};
}

Workspaces::Workspaces(LxdApi& client, std::string pool_driver)
    : client_(client), pool_driver_(std::move(pool_driver)) {}

Result<CreationLock> CreationLock::Acquire(const std::string& dir) {
  auto fd = LockPrivateFile(dir, kCreateLockName, /*wait=*/true);
  if (!fd) return fd.error();
  return CreationLock(*fd);
}

CreationLock::CreationLock(CreationLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

CreationLock::~CreationLock() {
  if (fd_ >= 0) close(fd_);
}

Result<void> MapUserIds(const Account& account, const std::string& subuid,
                        const std::string& subgid) {
  if (auto r = EnsureSubIds(subuid, 0, {account.uid}); !r) return r.error();
  if (auto r = EnsureSubIds(subgid, 0, {account.gid}); !r) return r.error();
  return {};
}

Result<Workspace> Workspaces::Create(const std::string& user, const std::string& image,
                                     const WorkspaceSettings& limits, const std::string& subuid,
                                     const std::string& subgid) {
  auto account = LookUpAccount(user);
  if (!account) return account.error();
  struct stat st;
  if (stat(account->home.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidArgument(fmt::format("{}'s home {} (from the password database) is not a "
                                       "directory; create it first",
                                       user, account->home),
                           "user");
  }
  const std::string name = WorkspaceName(user);
  auto existing = client_.GetInstance(name);
  if (existing) {
    return Error{ErrorCode::kAlreadyExists,
                 fmt::format("{} already has a workspace ({}, {})", user, name, existing->status),
                 "user"};
  }
  if (existing.error().code != ErrorCode::kNotFound) return existing.error();
  std::string source = image;
  if (source.empty()) {
    auto newest = NewestBuiltImage(client_);
    if (!newest) return newest.error();
    source = newest->fingerprint;
  } else {
    auto images = client_.Images();
    if (!images) return images.error();
    bool found = false;
    for (const Image& i : *images) {
      found = found || i.fingerprint == source ||
              std::find(i.aliases.begin(), i.aliases.end(), source) != i.aliases.end();
    }
    if (!found) {
      return NotFound(fmt::format("there is no image \"{}\": `bmas image build` makes one", source),
                      "image");
    }
  }
  auto lock = CreationLock::Acquire();
  if (!lock) return lock.error();
  if (auto r = MapUserIds(*account, subuid, subgid); !r) return r.error();

  InstanceSpec spec = WorkspaceInstance(*account, source, limits, pool_driver_);
  if (auto r = client_.CreateInstance(spec); !r) return r.error();
  if (auto r = StartInstance(client_, name); !r) {
    (void)client_.ChangeState(name, "stop", /*force=*/true);
    (void)client_.DeleteInstance(name);
    return r.error();
  }
  // The user has a name inside too (whoami, id -un, a shell's prompt); an image that already
  // lists them keeps its entries.
  ExecSpec add;
  add.command = AccountEntryCommand(*account, GroupName(account->gid));
  if (auto r = client_.Exec(name, add); !r || r->exit_code != 0) {
    spdlog::warn("bmas workspace: {} has no entry for {} in its /etc/passwd: {}", name, user,
                 r ? r->err : r.error().message);
  }
  return Get(user);
}

std::string GroupName(gid_t gid) {
  group g{}, *found = nullptr;
  std::vector<char> buf(16384);
  if (getgrgid_r(gid, &g, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return found->gr_name;
  }
  return std::to_string(gid);
}

std::vector<std::string> AccountEntryCommand(const Account& account,
                                             const std::string& group_name) {
  // Arguments, never text spliced into the script: names come from the password database.
  const std::string script =
      "shell=$6; [ -x \"$shell\" ] || shell=/bin/sh; "
      "grep -q \"^$1:\" /etc/passwd || echo \"$1:x:$2:$3::$5:$shell\" >> /etc/passwd; "
      "grep -q \"^$4:\" /etc/group || echo \"$4:x:$3:\" >> /etc/group";
  return {"/bin/sh",
          "-c",
          script,
          "sh",
          account.name,
          std::to_string(account.uid),
          std::to_string(account.gid),
          group_name,
          account.home,
          account.shell.empty() ? "/bin/sh" : account.shell};
}

Result<void> StartInstance(LxdApi& client, const std::string& name,
                           std::chrono::milliseconds timeout, Env& env) {
  if (auto r = client.ChangeState(name, "start"); !r) return r;
  auto instance = client.GetInstance(name);
  if (!instance) return instance.error();
  auto init = instance->config.find("image.bmas.init");
  if (init == instance->config.end() || init->second != "minimal") return {};
  auto pid = client.InitPid(name);
  if (!pid) return pid.error();
  // The container's file system as its init sees it, through /proc on the host.
  const std::string mark = fmt::format("/proc/{}/root{}", *pid, kReadyMark);
  const TimePoint until = env.Now() + timeout;
  while (access(mark.c_str(), F_OK) != 0) {
    if (env.Now() > until) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("{} runs, but its init did not finish setting up (no {} after "
                               "{} ms); its console log: `lxc console --show-log {}`",
                               name, kReadyMark, timeout.count(), name),
                   {}};
    }
    env.SleepFor(std::chrono::milliseconds(5));
  }
  return {};
}

Result<Workspace> Workspaces::SetLimits(const std::string& user, const WorkspaceSettings& limits) {
  auto w = Get(user);
  if (!w) return w.error();
  // Without a disk limit the root disk comes from the profile again.
  if (auto r = client_.UpdateInstance(w->name, LimitsConfig(limits),
                                      {{"root", RootDevice(limits, pool_driver_)}});
      !r) {
    return r.error();
  }
  return Get(user);
}

Result<Workspace> Workspaces::Get(const std::string& user) {
  auto i = client_.GetInstance(WorkspaceName(user));
  if (!i) {
    if (i.error().code == ErrorCode::kNotFound) {
      return NotFound(fmt::format("{} has no workspace: `bmas workspace create {}`", user, user),
                      "user");
    }
    return i.error();
  }
  return FromInstance(*i);
}

Result<void> Workspaces::Start(const std::string& user) {
  auto w = Get(user);
  if (!w) return w.error();
  if (w->status == InstanceStatus::kRunning) return {};
  return StartInstance(client_, w->name);
}

Result<void> Workspaces::Stop(const std::string& user) {
  auto w = Get(user);
  if (!w) return w.error();
  if (w->status == InstanceStatus::kStopped) return {};
  // Busybox's init ignores SIGPWR-less shutdown requests; a short grace, then force.
  if (auto r = client_.ChangeState(w->name, "stop", /*force=*/false, 10); r) return {};
  return client_.ChangeState(w->name, "stop", /*force=*/true);
}

Result<void> Workspaces::Delete(const std::string& user) {
  auto w = Get(user);
  if (!w) return w.error();
  if (w->status != InstanceStatus::kStopped) {
    if (auto r = client_.ChangeState(w->name, "stop", /*force=*/true); !r) return r;
  }
  return client_.DeleteInstance(w->name);
}

Result<std::vector<Workspace>> Workspaces::List() {
  auto instances = client_.Instances();
  if (!instances) return instances.error();
  std::vector<Workspace> out;
  for (const Instance& i : *instances) {
    if (i.config.contains(kWorkspaceUserKey)) out.push_back(FromInstance(i));
  }
  return out;
}

Result<ExecResult> Workspaces::Exec(const std::string& user,
                                    const std::vector<std::string>& command) {
  auto account = LookUpAccount(user);
  if (!account) return account.error();
  auto w = Get(user);
  if (!w) return w.error();
  if (w->status != InstanceStatus::kRunning) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("{}'s workspace is {}: `bmas workspace start {}`", user,
                             w->status, user),
                 {}};
  }
  ExecSpec spec;
  spec.command = command;
  spec.user = account->uid;
  spec.group = account->gid;
  spec.cwd = account->home;
  spec.environment = {{"HOME", account->home},
                      {"USER", account->name},
                      {"LOGNAME", account->name},
                      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}};
  return client_.Exec(w->name, spec);
}

}  // namespace bmas::lxd
