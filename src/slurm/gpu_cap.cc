#include "slurm/gpu_cap.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace bmas {

// Lab-mode guardrail: the partition's cap on GPUs one user holds at once. Slurm enforces it
// too (the partition QOS), but would leave a job over the cap pending with a terse reason;
// this says why at once and what would fit. Running and pending jobs both count: a pending
// one holds its GPUs as soon as it starts.
Result<void> CheckGpuCap(SlurmApi& slurm, const Cluster& inventory, const JobShape& shape,
                         const std::string& user) {
  const auto partition =
      std::find_if(inventory.partitions.begin(), inventory.partitions.end(),
                   [&](const Partition& p) { return p.name == shape.partition; });
  if (partition == inventory.partitions.end() || partition->max_gpus_per_user <= 0 ||
      !inventory.slurm.accounting) {
    return {};
  }
  const int cap = partition->max_gpus_per_user;
  const int asked = shape.nodes * shape.gpus_per_node;
  if (asked > cap) {
    const std::string other = PartitionThatAllows(inventory, shape.partition, asked);
    return InvalidArgument(fmt::format(
        "partition {} lets one user hold at most {} GPU(s) at once and this job asks for {}: "
        "ask for at most {}{}",
        shape.partition, cap, asked, cap,
        other.empty() ? "" : fmt::format(", or use another partition (--partition {})", other)));
  }
  auto jobs = slurm.Jobs();
  if (!jobs) return jobs.error();
  int held = 0;
  std::vector<std::string> ids;
  for (const JobInfo& j : *jobs) {
    if (j.user != user || j.partition != shape.partition || IsFinal(j.state)) continue;
    if (j.gpus == 0) continue;
    held += j.gpus;
    ids.push_back(fmt::format("{}", j.id));
  }
  if (held + asked > cap) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("partition {} lets one user hold at most {} GPU(s) at once; {} "
                             "holds or waits for {} (job(s) {}) and this job asks for {}: wait "
                             "for one to end (`bmas jobs`), cancel one, or ask for at most {}",
                             shape.partition, cap, user, held, fmt::join(ids, ", "), asked,
                             std::max(0, cap - held))};
  }
  return {};
}

}  // namespace bmas
