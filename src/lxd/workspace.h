#pragma once

// Workspaces: one persistent unprivileged LXD container per Unix user, with the user's home
// bind-mounted at the same path and the user's own uid/gid mapped in (raw.idmap), so files
// written inside belong to the user on the host. Limits come from flags or the config.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/env.h"
#include "common/private_files.h"
#include "common/result.h"
#include "lxd/lxd_api.h"

namespace bmas::lxd {

// A Unix account from the password database.
// The instance config key that names a workspace's user.
inline constexpr const char* kWorkspaceUserKey = "user.bmas.user";

struct Account {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;
  std::string shell;
};

// getpwnam; NotFound "there is no Unix account ..." otherwise.
Result<Account> LookUpAccount(const std::string& user);

// The name of group `gid` on the host, else the number.
std::string GroupName(gid_t gid);

// The command, run as the workspace's root, that adds `account` and its group to the
// workspace's /etc/passwd and /etc/group unless they are there (the account's shell when the
// image has it, else /bin/sh).
std::vector<std::string> AccountEntryCommand(const Account& account,
                                             const std::string& group_name);

// The range of ordinary users' uids: UID_MIN and UID_MAX of /etc/login.defs' text
// (1000 and 60000 when unset, as shadow's defaults).
struct UidRange {
  uid_t min = 1000, max = 60000;
};
UidRange ParseLoginDefs(const std::string& text);
UidRange ReadLoginDefs(const std::string& path = "/etc/login.defs");

// A workspace maps its owner's uid into the container and mounts their home. For root (uid 0)
// or a system account (uid outside `range`: daemons, `nobody`) that hands the container the
// host's root or a service's files, so it is refused (InvalidArgument) unless `allow_system`.
Result<void> CheckWorkspaceOwner(const Account& account, const UidRange& range,
                                 bool allow_system);

// The container's name: "ws-<user>" when the user name is a valid instance name that way,
// else "ws-<the name's letters, digits and dashes>-<8 hex digits of its hash>".
std::string WorkspaceName(const std::string& user);

struct Workspace {
  std::string user;
  std::string name;    // the LXD instance
  InstanceStatus status = InstanceStatus::kUnknown;
  std::string image;   // description of the image it was made from
  std::string cpus, memory, processes, disk;  // "" = no limit
  std::string home;
};

// The instance a workspace is: the bmas profile, the limits, the home device, raw.idmap.
// `disk` is applied only when `pool_driver` is "btrfs" (dir pools do not enforce it).
InstanceSpec WorkspaceInstance(const Account& account, const std::string& image,
                               const WorkspaceSettings& limits, const std::string& pool_driver);

// The instance config keys that carry `limits`: a value to set, or nullopt to remove (no limit).
std::map<std::string, std::optional<std::string>> LimitsConfig(const WorkspaceSettings& limits);

// The root disk device that carries a disk limit; nullopt without one, or when `pool_driver`
// cannot enforce it (only btrfs can): the profile's root disk then applies.
std::optional<StringMap> RootDevice(const WorkspaceSettings& limits, const std::string& pool_driver);

// Who may act on `user`'s workspace: root on anyone's; a non-root caller only on their own,
// and (until `bmas agent` brokers the root-only LXD socket) not even that. PermissionDenied
// with the reason otherwise. `user` "" = all workspaces (a listing).
Result<void> CheckCaller(uid_t caller, const std::string& user);

// Where an image built by bmas (image property bmas.init = minimal) marks, inside the
// container, that its init has mounted /run, /tmp and the cgroups: a fresh tmpfs each boot.
inline constexpr const char* kReadyMark = "/run/bmas-ready";

// Starts instance `name` and, when its image's init marks readiness (kReadyMark), waits up to
// `timeout` for the mark, so that nothing runs in it before its mounts are there. Other images
// are ready when LXD says they run. `env` gives the deadline's time and the sleeps between looks (a
// ManualEnv: no waiting).
Result<void> StartInstance(LxdApi& client, const std::string& name,
                           std::chrono::milliseconds timeout = std::chrono::seconds(10),
                           Env& env = Env::Default());

// One instance creation at a time on this host, held until the instance has started:
// concurrent ones lose each other's lines in /etc/subuid and /etc/subgid, and LXD 5.0 can give
// two isolated containers created at once an id range it may not use ("newuidmap: ... not
// allowed"). A flock on a file in root's own run directory (kRootRunDir, never the
// world-writable /run/lock, where a user could hold the lock or plant a symlink), so it spans
// processes.
inline constexpr const char* kCreateLockName = "workspace-create.lock";
class CreationLock {
 public:
  static Result<CreationLock> Acquire(const std::string& dir = kRootRunDir);
  CreationLock(CreationLock&& other) noexcept;
  CreationLock& operator=(CreationLock&&) = delete;
  ~CreationLock();

 private:
  explicit CreationLock(int fd) : fd_(fd) {}
  int fd_;
};

// Maps the account's own uid and gid into containers one-to-one: root:UID:1 in `subuid` and
// root:GID:1 in `subgid` (raw.idmap needs them). Hold a CreationLock.
Result<void> MapUserIds(const Account& account, const std::string& subuid = "/etc/subuid",
                        const std::string& subgid = "/etc/subgid");

class Workspaces {
 public:
  // `pool_driver` as `bmas lxd up` recorded it ("" when unknown: disk limits are skipped).
  Workspaces(LxdApi& client, std::string pool_driver);

  // Creates and starts `user`'s workspace from `image` ("" = the newest built image). Adds
  // root:UID:1 and root:GID:1 to `subuid`/`subgid`. Nothing is left behind on failure.
  // Errors: NotFound (no such account, image), AlreadyExists, InvalidArgument (no home).
  Result<Workspace> Create(const std::string& user, const std::string& image,
                           const WorkspaceSettings& limits, const std::string& subuid = "/etc/subuid",
                           const std::string& subgid = "/etc/subgid");
  // Replaces the workspace's limits, live: what `limits` leaves unset is no longer limited.
  Result<Workspace> SetLimits(const std::string& user, const WorkspaceSettings& limits);
  Result<void> Start(const std::string& user);
  Result<void> Stop(const std::string& user);
  // Stops it first if it runs. The home on the host is untouched.
  Result<void> Delete(const std::string& user);
  Result<std::vector<Workspace>> List();
  Result<Workspace> Get(const std::string& user);
  // Runs `command` as the user (uid, gid, HOME, USER, cwd = home); the workspace must run.
  Result<ExecResult> Exec(const std::string& user, const std::vector<std::string>& command);

 private:
  LxdApi& client_;
  std::string pool_driver_;
};

}  // namespace bmas::lxd
