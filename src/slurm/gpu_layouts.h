#pragma once

// The present layouts of a cluster's GPUs whose MIG layout follows demand (core/cluster.h's
// FlexibleGpus), kept beside Slurm's config in a file `gpu-layouts`: one line per GPU that
// changed, "<group> <unix seconds of the change> <layout>", the layout as core/mig_relayout.h
// writes it ("whole", "1g.10gb + 1g.10gb + ..."). A GPU not in it is in its first layout. The
// layout says which of the group's layout nodes is active (runs a slurmd).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "core/cluster.h"

namespace bmas::slurm {

struct SavedLayout {
  std::vector<std::string> layout;
  int64_t changed_at = 0;
};

// The file's entries; empty when it does not exist. InvalidArgument naming the line when a
// line does not read.
Result<std::map<std::string, SavedLayout>> ReadGpuLayouts(const std::string& path);

// Writes them (atomically: a new file renamed over the old).
Result<void> WriteGpuLayouts(const std::string& path, const std::map<std::string, SavedLayout>& saved);

// Each group's active layout node's name, from `saved` (the first layout's node when the group has no
// entry). An entry for a group that does not exist, or a layout that is no longer among its
// layouts, is an error naming the file (`path`) and the fix.
Result<std::map<std::string, std::string>> ActiveLayoutNodes(
    const Cluster& cluster, const std::map<std::string, SavedLayout>& saved,
    const std::string& path);

// The layout nodes that are not active, by name.
std::vector<std::string> StandbyLayoutNodes(const Cluster& cluster,
                                            const std::map<std::string, std::string>& active);

}  // namespace bmas::slurm
