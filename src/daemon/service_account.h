#pragma once

// The unprivileged account that root's `bmas up` runs its network-facing daemons as (the
// engines and the gateway): a bug in code that parses what anyone on the network sends must not
// run as root. Only the agent and the Slurm hooks run as root (../shared/SECURITY.md).

#include <sys/types.h>

#include <string>
#include <vector>

namespace bmas {

inline constexpr const char* kServiceAccount = "bmas";

struct ServiceAccount {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name;     // "" when the daemons run as the caller
  std::string why_not;  // why they run as the caller, for `bmas up`'s summary
  // The prefix that starts a command as the account: setpriv, no supplementary groups, no new
  // privileges. Empty when they run as the caller.
  std::vector<std::string> Prefix() const;
};

// As root: the account, made (a system account with no home and no login shell) when absent,
// provided that it can reach `binary` (to run it) and `state_dir` (to open the store there).
// Otherwise, and when not root, the daemons run as the caller and `why_not` says why.
ServiceAccount PrepareServiceAccount(const std::string& binary, const std::string& state_dir,
                                     const std::string& config_file);

// Whether a user who is neither the owner nor in the group may pass through every directory
// above `path` and has `mode` (S_IROTH, S_IXOTH) on `path` itself.
bool OthersCanReach(const std::string& path, mode_t mode);

}  // namespace bmas
