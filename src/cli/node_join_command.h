#pragma once

// `bmas node join TOKEN` and `bmas node leave [--force]` (root, on a node): the node joins the
// cluster whose controller printed the token (cluster/node_join.h), and leaves it
// (cluster/node_leave.h).

#include <CLI/CLI.hpp>
#include <string>

#include "cli/commands.h"

namespace bmas {

class NodeJoinCommand {
 public:
  // Adds `join` and `leave` under `bmas node` (made here unless another command made it).
  void Register(CLI::App& app, GlobalOptions& global);

 private:
  int Join(GlobalOptions& global);
  int Leave(GlobalOptions& global);

  std::string token_;
  std::string host_;
  std::string address_;
  std::string config_dir_ = "/etc/bmas";
  std::string munge_key_ = "/etc/munge/munge.key";
  std::string image_cache_ = "/var/cache/bmas/images";
  bool dynamic_ = false;
  bool force_ = false;
  int timeout_s_ = 20;
};

}  // namespace bmas
