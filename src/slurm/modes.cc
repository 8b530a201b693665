#include "slurm/modes.h"

#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/hostlist.h"

namespace bmas::slurm {
namespace {

// Splits "a,b,c"; "" and "(null)" give nothing.
std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty() || text == "(null)") return out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

Result<Mode> ParseMode(std::string_view output) {
  Mode mode;
  std::istringstream lines{std::string(output)};
  for (std::string line; std::getline(lines, line);) {
    // One reservation per line: Key=Value pairs separated by spaces.
    std::istringstream fields(line);
    std::string name, nodes, users, start;
    for (std::string field; fields >> field;) {
      const size_t eq = field.find('=');
      if (eq == std::string::npos) continue;
      const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
      if (key == "ReservationName") name = value;
      if (key == "Nodes") nodes = value;
      if (key == "Users") users = value;
      if (key == "StartTime") start = value;
    }
    if (name != kResearchReservation) continue;
    auto expanded = nodes.empty() || nodes == "(null)" ? Result<std::vector<std::string>>(
                                                             std::vector<std::string>{})
                                                       : ExpandHostlist(nodes);
    if (!expanded) {
      return InvalidArgument(fmt::format("reservation {}: cannot read its nodes '{}': {}", name,
                                         nodes, expanded.error().message));
    }
    mode.research = true;
    mode.nodes = std::move(*expanded);
    mode.users = SplitList(users);
    mode.start_time = start;
  }
  return mode;
}

std::vector<std::string> CreateResearchArgs(const std::vector<std::string>& users,
                                            const std::vector<std::string>& nodes) {
  return {"create",
          "reservation",
          fmt::format("ReservationName={}", kResearchReservation),
          fmt::format("Users={}", fmt::join(users, ",")),
          fmt::format("Nodes={}", CompressHostlist(nodes)),
          "StartTime=now",
          "Duration=infinite",
          "Flags=IGNORE_JOBS"};
}

}  // namespace bmas::slurm
