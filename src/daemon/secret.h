#pragma once

// Secrets handed to a daemon without a command line (which every local user can read in ps):
// a file only its owner can read, or an environment variable.

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "common/result.h"

namespace bmas {

// The value of $`env_var` when set and not empty (so that `bmas up`'s key wins), else the
// secret in `file` (surrounding whitespace dropped), else "". Errors: the file cannot be
// read, is readable or writable by group or others, or is empty.
Result<std::string> ReadSecret(const std::string& file, const char* env_var);

// `bytes` random bytes (getrandom) in hex: a fresh secret.
std::string NewSecretHex(size_t bytes);

// The environment variable that overrides the operator secret's file (ReadSecret).
inline constexpr const char* kOperatorSecretEnv = "BMAS_OPERATOR_SECRET";

// The operator secret that every operator listener (/metrics, /gpus, /load) asks for
// (common/operator_auth.h): <state_dir>/run/operator.secret, mode 0600, owned by the service
// account when `bmas up` runs as root (root reads it too).
std::string OperatorSecretPath(const std::string& state_dir);

// The operator secret of `state_dir` ($BMAS_OPERATOR_SECRET first), made when absent: 32
// random bytes in hex, written whole (a temporary file linked into place, so two daemons that
// start together read the same one). Errors name the file and the fix: run/ cannot be created
// or written by this account, or the file is readable by others.
Result<std::string> EnsureOperatorSecret(const std::string& state_dir);

// As root: gives the operator secret's file to `uid`:`gid` (the service account, which runs
// the gateway, the dashboard and the controller), without following a link.
Result<void> HandOperatorSecretTo(const std::string& state_dir, uid_t uid, gid_t gid);

}  // namespace bmas
