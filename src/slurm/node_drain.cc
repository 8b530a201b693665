#include "slurm/node_drain.h"

#include <chrono>

#include "common/process.h"

namespace bmas::slurm {

std::vector<std::string> DrainNodeArgs(const std::string& node, const std::string& reason) {
  return {"scontrol", "update", "NodeName=" + node, "State=DRAIN",
          "Reason=" + reason.substr(0, kMaxDrainReason)};
}

Result<void> DrainNode(const std::string& slurm_conf, const std::string& node,
                       const std::string& reason) {
  std::vector<std::string> env;
  if (!slurm_conf.empty()) env.push_back("SLURM_CONF=" + slurm_conf);
  auto r = RunCommand(DrainNodeArgs(node, reason), env, std::chrono::seconds(15));
  if (!r) return r.error();
  if (r->exit_code != 0) {
    return Error{ErrorCode::kUnavailable,
                 "scontrol cannot drain " + node + ": " + (r->err.empty() ? r->out : r->err)};
  }
  return {};
}

}  // namespace bmas::slurm
