#pragma once

// Slurm's reason for a job's state (JobInfo::reason: "Resources", "QOSMaxGRESPerUser", ...) in
// words a student reads at a glance, for `bmas jobs` and `bmas job show`. Pure.

#include <string>
#include <string_view>

namespace bmas {

// "Resources" -> "waiting for free GPUs", "Priority" -> "other jobs are ahead of it", a
// per-user QOS limit -> "you are at your limit of ...". "None" and "" give "". A reason this
// does not know is returned as Slurm spells it.
std::string PlainJobReason(std::string_view reason);

}  // namespace bmas
