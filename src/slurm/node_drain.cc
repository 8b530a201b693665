#include "slurm/node_drain.h"

#include <algorithm>
#include <chrono>

#include "common/process.h"

namespace bmas::slurm {

std::vector<std::string> DrainNodeArgs(const std::string& node, const std::string& reason) {
  return {"scontrol", "update", "NodeName=" + node, "State=DRAIN",
          "Reason=" + reason.substr(0, kMaxDrainReason)};
}

namespace {

Result<void> RunScontrol(const std::string& slurm_conf, const std::vector<std::string>& args,
                         const std::string& what) {
  std::vector<std::string> env;
  if (!slurm_conf.empty()) env.push_back("SLURM_CONF=" + slurm_conf);
  auto r = RunCommand(args, env, std::chrono::seconds(15));
  if (!r) return r.error();
  if (r->exit_code != 0) {
    return Error{ErrorCode::kUnavailable,
                 "scontrol cannot " + what + ": " + (r->err.empty() ? r->out : r->err)};
  }
  return {};
}

}  // namespace

Result<void> DrainNode(const std::string& slurm_conf, const std::string& node,
                       const std::string& reason) {
  return RunScontrol(slurm_conf, DrainNodeArgs(node, reason), "drain " + node);
}

std::vector<std::string> ResumeNodeArgs(const std::string& node) {
  return {"scontrol", "update", "NodeName=" + node, "State=RESUME"};
}

Result<void> ResumeNode(const std::string& slurm_conf, const std::string& node) {
  return RunScontrol(slurm_conf, ResumeNodeArgs(node), "resume " + node);
}

bool IsDrainedInSlurm(const NodeInfo& node) {
  if (node.state == "drain" || node.state == "drained" || node.state == "draining") return true;
  return std::any_of(node.state_flags.begin(), node.state_flags.end(), [](const std::string& f) {
    return f == "DRAIN" || f == "DRAINED" || f == "DRAINING";
  });
}

}  // namespace bmas::slurm
