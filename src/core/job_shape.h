#pragma once

// How a GPU job is laid out on the cluster, decided before Slurm sees it: GPUs that fit in one
// node stay in one node (one NVLink island); more take whole nodes. And the environment a
// launcher (torchrun, MPI) needs to join the job's processes up, NCCL's included. Pure: takes
// the inventory and the request, returns the decision.

#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "core/cluster.h"

namespace bmas {

enum class Launcher { kNone, kTorchrun, kMpi };

Result<Launcher> ParseLauncher(std::string_view name);
std::string_view LauncherName(Launcher launcher);

struct ShapeRequest {
  int gpus = 0;           // --gpus N: the whole job's GPUs (0 with nodes/gpus_per_node)
  int nodes = 0;          // --nodes N
  int gpus_per_node = 0;  // --gpus-per-node M
  std::string partition;  // "" = the default partition
  Launcher launcher = Launcher::kNone;
  // --gpus 2x3g.40gb: MIG slices of this profile rather than whole GPUs ("" = whole GPUs).
  std::string mig_profile;
  // --gpus 1 --share N: a 1/N share of one shared GPU, as Slurm shards (0 = not shared).
  int share = 0;
};

struct JobShape {
  std::string partition;
  int nodes = 1;
  int gpus_per_node = 0;
  int tasks_per_node = 1;  // mpi: one per GPU; torchrun and none: one per node
  std::string gpu_type;    // the nodes' GPU type, or the MIG profile of a job on slices
  // The GPU type to ask Slurm for ("" = any): a job on slices names their profile, and on a
  // partition with MIG slices a job of whole GPUs names the whole GPUs' type, since Slurm would
  // give an untyped request a slice.
  std::string gres_type;
  bool mig = false;        // on MIG slices: no NVLink, no peer-to-peer between them
  // A share of one GPU: the Slurm shards to ask for (--gres=shard:N) instead of GPUs; 0 = none.
  // gpus_per_node is 1 (what the job sees) and gpu_type the shared GPUs' type.
  int shards = 0;
  Launcher launcher = Launcher::kNone;
};

// What `bmas run --gpus` takes: "4" (whole GPUs), "1g.10gb" (one MIG slice) or "2x3g.40gb"
// (two slices of that profile). Sets request.gpus and request.mig_profile.
Result<void> ParseGpusOption(std::string_view text, ShapeRequest& request);

// The shape for `request` on the partition's nodes. Whole GPUs count only the GPUs no MIG layout
// splits and none shared; a job on MIG slices takes them on one node; a share takes shards of
// one shared GPU (`share` must divide the cluster's shards per GPU). InvalidArgument, saying why and what
// would fit, when it cannot be satisfied (more GPUs than the partition has, a per-node count
// over a node's GPUs, N GPUs that do not split into whole nodes, ...).
Result<JobShape> PlanJobShape(const Cluster& cluster, const ShapeRequest& request);

// A partition other than `current` (and other than bmas's own `inference`) whose per-user GPU
// cap lets one user hold `gpus`, for a refusal's hint: "training" when it qualifies, else the
// first in the inventory; "" when there is none.
std::string PartitionThatAllows(const Cluster& cluster, const std::string& current, int gpus);

// The environment every task of the job starts with, before the launcher adds per-rank
// variables: WORLD_SIZE (processes in all), NNODES, GPUS_PER_NODE and NCCL_* / OpenMPI
// settings from the nodes' NICs. MASTER_ADDR, MASTER_PORT (from the job id) and
// NODE_RANK/RANK are only known once Slurm has placed the job: the batch script sets them.
std::map<std::string, std::string> DistributedEnvironment(const Cluster& cluster,
                                                          const JobShape& shape);

// The batch script that runs `command` (argv, quoted for the shell) with the shape's launcher:
// none runs it once per node, torchrun once per node under torchrun (one process per GPU),
// mpi once per task under `srun --mpi=pmix`. `wrapper` (argv, may be empty) goes in front of
// what each node runs, torchrun included (`bmas agent exec --`: into the user's workspace);
// MPI's tasks run without it, since PMIx reaches them through sockets in slurmd's spool,
// which a workspace does not see.
std::string BatchScript(const JobShape& shape, const std::vector<std::string>& command,
                        const std::vector<std::string>& wrapper = {});

// `arg` quoted for a POSIX shell.
std::string ShellQuote(const std::string& arg);

}  // namespace bmas
