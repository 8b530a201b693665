#pragma once

// Fakes of a node's daemons and of Slurm as the node sees it, for tests of `node join` and
// `node leave`: they start, stop and answer as told, and run nothing.

#include <string>
#include <vector>

#include "cluster/node_join.h"
#include "cluster/node_leave.h"

namespace bmas::cluster {

class FakeNodeDaemons final : public NodeDaemons {
 public:
  bool MungeRunning() override { return munge_; }
  Result<void> StartMunge(const NodePaths&) override {
    munge_ = joined_munge_ = true;
    ++starts_;
    return {};
  }
  bool SlurmdRunning(const NodePaths&) override { return slurmd_; }
  Result<void> StartSlurmd(const NodePaths&, const std::vector<std::string>& args,
                           const std::string&) override {
    args_ = args;
    if (fail_slurmd_) return Internal("slurmd exited at once");
    slurmd_ = true;
    ++starts_;
    return {};
  }
  bool AgentRunning(const NodePaths&) override { return agent_; }
  Result<void> StartAgent(const NodePaths&, const std::string& config) override {
    agent_config_ = config;
    if (fail_agent_) return Internal("the agent exited at once");
    agent_ = true;
    ++starts_;
    return {};
  }
  Result<std::string> StartLxd(const NodePaths&, const std::string& config) override {
    lxd_config_ = config;
    if (fail_lxd_) return Internal("lxd did not start");
    ++lxd_starts_;
    return std::string("lxd: running\n");
  }
  Result<std::string> ImportDefaultImage(const NodePaths&, const std::string&) override {
    if (!cached_image_) return NotFound("the cache holds no image");
    return std::string("imported");
  }
  void StopStarted() override {
    munge_ = slurmd_ = agent_ = joined_munge_ = false;
    ++stops_;
  }
  Result<bool> StopJoined(const NodePaths&, const std::string& daemon) override {
    stop_order_.push_back(daemon);
    bool* running = daemon == "agent"    ? &agent_
                    : daemon == "slurmd" ? &slurmd_
                                         : &joined_munge_;
    const bool was = *running;
    *running = false;
    if (daemon == "munged" && was) munge_ = false;
    return was;
  }

  bool munge_ = false, slurmd_ = false, agent_ = false;
  bool joined_munge_ = false;  // munged runs because a join started it
  bool fail_slurmd_ = false, fail_agent_ = false, fail_lxd_ = false;
  int lxd_starts_ = 0;
  bool cached_image_ = true;
  std::string lxd_config_;
  int starts_ = 0, stops_ = 0;
  std::vector<std::string> args_;
  std::string agent_config_;
  std::vector<std::string> stop_order_;
};

class FakeNodeSlurm final : public NodeSlurm {
 public:
  Result<NodeInSlurm> Look(const std::string& slurm_conf, const std::string&) override {
    conf_ = slurm_conf;
    if (!reachable_) return Error{ErrorCode::kUnavailable, "munged is not running", {}};
    return seen_;
  }
  Result<void> Delete(const std::string&, const std::string& host) override {
    if (fail_delete_) return Error{ErrorCode::kUnavailable, "Invalid node name specified", {}};
    deleted_.push_back(host);
    seen_.known = false;
    return {};
  }

  NodeInSlurm seen_;
  bool reachable_ = true, fail_delete_ = false;
  std::string conf_;
  std::vector<std::string> deleted_;
};

}  // namespace bmas::cluster
