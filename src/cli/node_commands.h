#pragma once

// `bmas node list [--json]` (anyone), `bmas node drain NODE [--reason TEXT] [--requeue]
// [--wait-s S]` and `bmas node resume NODE` (root): a node's life in the cluster as Slurm sees
// it. Draining stops new jobs there; the inference controller moves the replicas off (a
// replacement serves before the old one drains); training jobs end as they would, or are
// requeued with --requeue; workspaces stay.

#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace bmas {

class NodeCommands {
 public:
  void Register(CLI::App& app, GlobalOptions& global);
  // `bmas node`, for the commands that live elsewhere (node join).
  CLI::App* node() const { return node_; }

 private:
  int List(GlobalOptions& global);
  int Drain(GlobalOptions& global);
  int Resume(GlobalOptions& global);

  CLI::App* node_ = nullptr;
  bool json_ = false;
  std::string name_;
  std::string reason_;
  bool requeue_ = false;
  double wait_s_ = 0;
};

}  // namespace bmas
