#pragma once

// Taking a node out of Slurm's scheduling when one of its GPUs cannot be given to the next
// job safely (a process that outlives SIGKILL still holds it): `scontrol update` drains it with
// the reason, which `sinfo -R` shows the admin. Running jobs finish; no new job starts there
// until the admin resumes it (`scontrol update NodeName=N State=RESUME`).

#include <string>
#include <vector>

#include "common/result.h"
#include "slurm/slurm_json.h"

namespace bmas::slurm {

// Slurm keeps a reason of at most this many bytes.
inline constexpr size_t kMaxDrainReason = 250;

// `scontrol` and its arguments that drain `node` with `reason` (cut to kMaxDrainReason).
std::vector<std::string> DrainNodeArgs(const std::string& node, const std::string& reason);

// Runs them; `slurm_conf`, when not "", is the SLURM_CONF of the cluster (a local one).
// Unavailable with scontrol's own words when it fails.
Result<void> DrainNode(const std::string& slurm_conf, const std::string& node,
                       const std::string& reason);

// `scontrol` and its arguments that return a drained `node` to service.
std::vector<std::string> ResumeNodeArgs(const std::string& node);
Result<void> ResumeNode(const std::string& slurm_conf, const std::string& node);

// Whether Slurm drains `node` (state drain/drained/draining, or the DRAIN flag): no new job
// starts there, and the ones running end as they would.
bool IsDrainedInSlurm(const NodeInfo& node);

}  // namespace bmas::slurm
