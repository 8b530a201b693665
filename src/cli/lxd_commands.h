#pragma once

// `bmas lxd up|down|status`, `bmas image build|list` and `bmas workspace ...`.

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/config.h"

namespace bmas {

class Store;

// After `bmas user set` changed USER's workspace limits in `store`: applies them (over the
// config's [workspace] defaults) to USER's workspace, live, when it exists and LXD answers.
// Returns what happened, in a line for the user.
std::string ApplyWorkspaceLimits(GlobalOptions& global, Store& store, const std::string& user);

// USER's workspace limits: the config's [workspace], overridden by what `bmas user add|set`
// stored for them in the store under `state_dir` (the config's alone when there is no store).
Result<WorkspaceSettings> WorkspaceLimitsFor(Services& services, const Config& config,
                                             const std::string& state_dir,
                                             const std::string& user);

class LxdCommands {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int RunUp(GlobalOptions& global);
  int RunDown(GlobalOptions& global);
  int RunTrust(GlobalOptions& global);
  int RunStatus(GlobalOptions& global);
  int RunImageBuild(GlobalOptions& global);
  int RunImageList(GlobalOptions& global);
  int RunWorkspace(GlobalOptions& global, const std::string& verb);

  bool json_ = false;
  bool allow_system_account_ = false;
  std::string base_ = "debian";
  std::string init_ = "minimal";
  std::string alias_;
  std::string cache_dir_ = "/var/cache/bmas/images";  // lxd::kImageCacheDir
  bool rebuild_ = false;
  std::string user_;
  std::string image_;
  std::vector<std::string> command_;
  WorkspaceSettings limits_;
  CLI::App* create_ = nullptr;
};

}  // namespace bmas
