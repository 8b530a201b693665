#pragma once

// `bmas user ...` and `bmas key ...`: users, limits and API keys in the state dir's store.

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/env.h"
#include "common/result.h"
#include "store/store.h"

namespace bmas {

// Opens the store under the state dir the global options and config name; for a user who is
// not root and cannot read it (the cluster's, root's), PermissionDenied saying so.
Result<StorePtr> OpenStateStore(GlobalOptions& global);

// Whether the store under `state_dir` is another's (root's) for this user: unreadable, and
// either there or in a state dir the user cannot write.
bool StoreIsOthers(const std::string& state_dir);

// The error for a user who is not root asking for what needs the store.
Error StoreNeedsRoot(const std::string& state_dir);

// Parses a time for --since: unix seconds, 2026-11-21, 2026-11-21T10:00:00Z, or an age such as
// 90s, 30m, 12h, 7d (before `now`).
Result<int64_t> ParseSince(const std::string& text, int64_t now);

class UserCommands {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int Run(GlobalOptions& global, CLI::App* which);
  // --since, as unix seconds: relative times count back from env's wall time.
  Result<int64_t> UsageSince(const Env& env) const;
  int OwnUsageThroughAgent(const std::string& state_dir, const Env& env);
  int OwnKeysThroughAgent(const std::string& state_dir, CLI::App* which);
  static void PrintKeys(const std::vector<KeyInfo>& keys, bool json);

  CLI::App* user_add_ = nullptr;
  CLI::App* user_list_ = nullptr;
  CLI::App* user_set_ = nullptr;
  CLI::App* user_remove_ = nullptr;
  CLI::App* key_create_ = nullptr;
  CLI::App* key_revoke_ = nullptr;
  CLI::App* key_list_ = nullptr;
  CLI::App* usage_ = nullptr;
  std::optional<std::string> usage_user_;
  std::string since_;

  std::string name_;
  std::string key_id_;
  std::optional<double> weight_;
  std::optional<int64_t> rpm_, tpm_, tokens_per_day_, max_concurrent_;
  WorkspaceLimits workspace_;
  bool admin_flag_ = false;     // user add --admin
  std::optional<bool> admin_;  // user set --admin / --no-admin
  std::vector<std::string> unset_;
  bool json_ = false;
  bool usage_jobs_ = false;
};

}  // namespace bmas
