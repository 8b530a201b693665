#pragma once

// The subcommands of `bmas`: each registers its flags with CLI11 and runs from a callback.

#include <string>

#include <CLI/CLI.hpp>

#include "common/config.h"
#include "engine/calibrate.h"

namespace bmas {

class Services;
class Store;

// Prints "bmas COMMAND: message" on stderr; returns the exit code for it: 2 for bad input or
// a refusal, 1 for anything else.
int ReportFailure(const std::string& command, const Error& error);

// Number checks for options, with messages short enough to read (CLI11's own print the range
// up to the largest double): "--gpus: must be at least 0 (got -1)".
CLI::Validator NumberAbove(double bound, bool or_equal);
inline const CLI::Validator kNonNegative = NumberAbove(0, true);
inline const CLI::Validator kPositive = NumberAbove(0, false);

// Unix seconds as 2026-11-21T09:48:45Z.
std::string UtcTime(int64_t unix_seconds);

struct GlobalOptions {
  std::string config_file;
  std::string state_dir;
  std::string log_level = "info";
  int exit_code = 0;
  // The adapters commands use (daemon/services.h); main sets the real ones.
  Services* services = nullptr;

  // The config file's settings (defaults when none is given). Throws ConfigError.
  Config LoadConfigOrDefaults() const;
  void SetUpLogging() const;
};

// `bmas engine` and `bmas engine calibrate`.
class EngineCommand {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  void ApplyFlags(EngineSettings& s) const;
  int RunServer(GlobalOptions& global);
  int RunCalibrate(GlobalOptions& global);

  CLI::App* cmd_ = nullptr;
  CLI::App* calibrate_ = nullptr;
  EngineSettings flags_;
  bool no_prefix_caching_ = false;
  std::string startup_;  // --startup-s: SECONDS or "profile"
  bool json_ = false;
  bool fit_ = false;
  engine::ClosedLoopOptions scenario_;
};

// `bmas gateway`.
class GatewayCommand {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int RunBackendCommand(GlobalOptions& global, const std::string& verb);
  int ListBackends(GlobalOptions& global, Store& store);

  CLI::App* cmd_ = nullptr;
  GatewaySettings flags_;
  std::string backend_url_;
  bool json_ = false;
};

// `bmas up`.
class UpCommand {
 public:
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  CLI::App* cmd_ = nullptr;
  int engines_ = 0;
  bool status_ = false;
  bool json_ = false;
};

}  // namespace bmas
