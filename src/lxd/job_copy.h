#pragma once

// Job containers on a node that does not hold the user's workspace.
//
// In a cluster each node runs its own LXD and a workspace lives on one of them. When Slurm runs
// the user's job on another node, the prolog pulls a copy of the workspace from the peer LXD
// that holds it (LXD migration in pull mode: the file system only, no snapshots, no process
// state; the workspace keeps running) under the same name, and the job then runs in it just as
// it would in the workspace. The home is not in the copy: it is a bind mount of the account's
// home, which a cluster serves from a shared file system, so the job reads and writes the
// user's real files. The copy records where it came from and which jobs use it; it is deleted
// when the last of them ends (the epilog, or the agent's reconcile pass when an epilog did not
// run), so it never goes stale under a later job and nothing piles up on the node.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/private_files.h"
#include "common/result.h"
#include "lxd/lxd_client.h"

namespace bmas::lxd {

inline constexpr const char* kCopyOfKey = "user.bmas.copy-of";  // the peer's URL
inline constexpr const char* kCopyJobsKey = "user.bmas.jobs";   // "12,15"

// Another node's LXD, reached over HTTPS.
struct Peer {
  std::string url;
  std::string certificate;  // the TLS certificate (PEM) it presented
  std::unique_ptr<LxdClient> client;
};

// Opens the LXD at `url` with bmas's client certificate (`cert`, `key`), if the server
// certificate it presents has the SHA-256 `fingerprint` the admin configured (lowercase hex);
// another is refused (kPermissionDenied) naming both fingerprints. Nothing is trusted on first
// use: an unprivileged user on that node can listen on an unprivileged port first.
Result<Peer> OpenPeer(const std::string& url, const std::string& cert, const std::string& key,
                      const std::string& fingerprint,
                      std::chrono::milliseconds timeout = std::chrono::seconds(120));

// The spec of a copy of a workspace made for `job`: `local` (the workspace as this node would
// create it: bmas's template, the user's id map, limits and home) with the copy's marks. Of the
// peer's instance only the root file system comes over, never its config or devices: a peer's
// security.*, raw.* or disk devices would otherwise be created here by root.
InstanceSpec CopySpec(const InstanceSpec& local, const std::string& peer_url, int64_t job);

// "12,15" and back; adding a job that is there, or dropping one that is not, changes nothing.
std::vector<int64_t> ParseJobList(const std::string& text);
std::string JobList(const std::vector<int64_t>& jobs);

// What EnsureJobContainer found or made.
struct JobContainer {
  std::string copied_from;  // the peer's URL when this call made the copy; "" otherwise
};

// Makes instance `name` run on this node for `job`: the workspace itself when it lives here, a
// copy that an earlier job of the user made (now used by `job` too), or a new copy from the
// first of `peers` that holds it, started, configured as `local` says (CopySpec; the peer's
// instance must belong to the same user). `open` opens a peer (OpenPeer); `prepare` runs
// before a copy is created, under the host's CreationLock (it maps the user's ids). NotFound
// when neither this node nor any peer has it; a peer that cannot be reached is skipped with
// its error kept for that message.
Result<JobContainer> EnsureJobContainer(
    LxdApi& local, const InstanceSpec& spec, int64_t job, const std::vector<LxdPeer>& peers,
    const std::function<Result<Peer>(const LxdPeer& peer)>& open,
    const std::function<Result<void>()>& prepare);

// The epilog's part: drops `job` from copy `name`'s jobs and deletes the copy when none is
// left. True when it deleted it; false for a workspace (never deleted) or a copy still in use.
// `lock_dir` holds the CreationLock's file (root's run directory; a test's own elsewhere).
Result<bool> ReleaseJobCopy(LxdApi& local, const std::string& name, int64_t job,
                            const std::string& lock_dir = kRootRunDir);

// The reconcile pass's part: every copy loses the jobs `alive` says are gone (an error keeps a
// job), and a copy left with none is deleted. Returns the copies deleted.
Result<std::vector<std::string>> ReconcileCopies(
    LxdApi& local, const std::function<Result<bool>(int64_t job)>& alive,
    const std::string& lock_dir = kRootRunDir);

}  // namespace bmas::lxd
