#pragma once

// Lab and research modes as Slurm sees them. Research mode is one reservation, kResearch:
// its users get its nodes to themselves; lab mode is its absence. The reservation is the
// state: nothing else records the mode, so Slurm and bmas can never disagree about it.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bmas::slurm {

inline constexpr std::string_view kResearchReservation = "bmas_research";

struct Mode {
  bool research = false;
  std::vector<std::string> users;  // research: who owns the nodes
  std::vector<std::string> nodes;  // research: expanded node names
  std::string start_time;          // as Slurm prints it
};

// The mode from `scontrol -o show reservation` output (all reservations, one per line).
// Errors: InvalidArgument when a bmas reservation line cannot be read.
Result<Mode> ParseMode(std::string_view scontrol_output);

// `scontrol` arguments that create the research reservation for `users` on `nodes`, now and
// until lab mode. IGNORE_JOBS lets it start over running jobs, which then finish.
std::vector<std::string> CreateResearchArgs(const std::vector<std::string>& users,
                                            const std::vector<std::string>& nodes);

}  // namespace bmas::slurm
