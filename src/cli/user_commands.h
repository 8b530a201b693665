#pragma once

// `bmas user ...` and `bmas key ...`: users, limits and API keys in the state dir's store.

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace bmas {

class UserCommands {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int Run(GlobalOptions& global, CLI::App* which);

  CLI::App* user_add_ = nullptr;
  CLI::App* user_list_ = nullptr;
  CLI::App* user_set_ = nullptr;
  CLI::App* user_remove_ = nullptr;
  CLI::App* key_create_ = nullptr;
  CLI::App* key_revoke_ = nullptr;
  CLI::App* key_list_ = nullptr;

  std::string name_;
  std::string key_id_;
  std::optional<double> weight_;
  std::optional<int64_t> rpm_, tpm_, tokens_per_day_, max_concurrent_;
  std::vector<std::string> unset_;
  bool json_ = false;
};

}  // namespace bmas
