#pragma once

// LXD on this machine, started and prepared by `bmas lxd up`: lxcfs and lxd when they are not
// running (detached; what was started is recorded in <state_dir>/lxd.json and
// StopLocalLxd stops exactly that), inotify limits, id ranges in /etc/subuid and
// /etc/subgid, a storage pool "bmas" (btrfs on a loop file, else dir) and a profile "bmas".

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/config.h"
#include "common/daemon_process.h"
#include "common/result.h"

namespace bmas::lxd {

inline constexpr const char* kPoolName = "bmas";
inline constexpr const char* kProfileName = "bmas";
inline constexpr const char* kInstallHint =
    "apt-get install -y --no-install-recommends lxd lxcfs uidmap btrfs-progs squashfs-tools "
    "xz-utils busybox-static debootstrap";

struct LocalLxd {
  std::string state_dir;
  std::string lxd_dir;  // LXD_DIR
  std::string socket;   // <lxd_dir>/unix.socket
  std::string pool_driver;  // "btrfs" or "dir"
  std::string pool_note;    // why dir when btrfs was wanted; "" otherwise
  std::string peer_note;    // where LXD answers other nodes and whom it trusts; "" = nowhere
  // [gpu] driver_root as `bmas lxd up` read it: where the Slurm hooks on this node, which get
  // no --config, find the driver's files for a job's workspace (cuda_devices.h).
  std::string gpu_driver_root = "/";
  std::vector<DaemonProcess> started;  // what `bmas lxd up` started, in start order
};

// <dir>/unix.socket.
std::string SocketPath(const LxdSettings& settings);

// Why LXD cannot be started and prepared here ("" when it can): not root, or not installed
// (with the apt-get line that fixes it).
std::string LxdPrerequisites();

// Whether lxcfs is mounted at /var/lib/lxcfs and answers there (an lxcfs that died leaves a
// mount that fails every read, and containers then silently lose its /proc views).
bool LxcfsServes();

// Starts what is missing and prepares LXD; idempotent. Returns what runs, with `started` listing
// what this call or an earlier `bmas lxd up` in the same state dir started.
Result<LocalLxd> StartLocalLxd(const LxdSettings& settings, const std::string& state_dir,
                               const std::string& gpu_driver_root = "/");

// What <state_dir>/lxd.json records; NotFound when `bmas lxd up` never ran there.
Result<LocalLxd> ReadLocalLxd(const std::string& state_dir);

// Stops what StartLocalLxd started: the instances of an LXD it started first (so none runs
// without its daemon), then lxd, then lxcfs (unmounting what they leave mounted).
// Returns what it stopped.
Result<std::vector<std::string>> StopLocalLxd(const std::string& state_dir);

// Makes sure `owner` (root) has at least `count` subordinate ids in `path` (/etc/subuid or
// /etc/subgid), and has each id of `single_ids` mapped one-to-one ("root:ID:1"). Returns
// whether the file changed. `text` in, new text out, for tests: EnsureSubIdsInText.
Result<bool> EnsureSubIds(const std::string& path, int64_t count,
                          const std::vector<int64_t>& single_ids);
std::string EnsureSubIdsInText(const std::string& text, int64_t count,
                               const std::vector<int64_t>& single_ids);

}  // namespace bmas::lxd
