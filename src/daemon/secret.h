#pragma once

// Secrets handed to a daemon without a command line (which every local user can read in ps):
// a file only its owner can read, or an environment variable.

#include <string>

#include "common/result.h"

namespace bmas {

// The value of $`env_var` when set and not empty (so that `bmas up`'s key wins), else the
// secret in `file` (surrounding whitespace dropped), else "". Errors: the file cannot be
// read, is readable or writable by group or others, or is empty.
Result<std::string> ReadSecret(const std::string& file, const char* env_var);

}  // namespace bmas
