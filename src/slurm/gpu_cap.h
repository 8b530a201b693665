#pragma once

// Lab mode's guardrail on job submission: the partition's cap on the GPUs one user holds at
// once (Partition::max_gpus_per_user), checked before a job is submitted.

#include <string>

#include "common/result.h"
#include "core/cluster.h"
#include "core/job_shape.h"
#include "slurm/rest_client.h"

namespace bmas {

// Ok when `user` may submit a job of `shape`: the partition has no cap (or the cluster no
// accounting, which Slurm's QOS needs), or the user's running and pending jobs in it plus this
// one stay within it. InvalidArgument when the job alone is over the cap (naming a partition
// that would take it); Unavailable when the user's other jobs leave too little (naming them).
// Asks `slurm` for the jobs only when a cap applies.
Result<void> CheckGpuCap(SlurmApi& slurm, const Cluster& inventory, const JobShape& shape,
                         const std::string& user);

}  // namespace bmas
