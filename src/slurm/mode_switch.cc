#include "slurm/mode_switch.h"

#include <algorithm>

#include <fmt/format.h>

namespace bmas::slurm {
namespace {

bool Contains(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

Result<std::string> DeleteResearch(const Scontrol& scontrol) {
  return scontrol({"delete", fmt::format("ReservationName={}", kResearchReservation)});
}

// The nodes `request` names, or its count of them with idle ones first.
Result<std::vector<std::string>> ChooseNodes(SlurmApi& slurm, const Cluster& inventory,
                                             const ResearchRequest& request) {
  if (!request.nodes.empty()) {
    for (const std::string& n : request.nodes) {
      if (inventory.FindNode(n) == nullptr) {
        return InvalidArgument(fmt::format("node {} is not in the cluster", n));
      }
    }
    return request.nodes;
  }
  auto all = slurm.Nodes();
  if (!all) return all.error();
  std::stable_sort(all->begin(), all->end(), [](const NodeInfo& a, const NodeInfo& b) {
    return (a.state == "idle") > (b.state == "idle");
  });
  if (static_cast<size_t>(request.count) > all->size()) {
    return InvalidArgument(
        fmt::format("the cluster has {} nodes, not {}", all->size(), request.count));
  }
  std::vector<std::string> nodes;
  for (int i = 0; i < request.count; ++i) nodes.push_back((*all)[i].name);
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

}  // namespace

Result<Mode> CurrentMode(const Scontrol& scontrol) {
  auto out = scontrol({"-o", "show", "reservation"});
  if (!out) return out.error();
  return ParseMode(*out);
}

Result<ResearchSwitched> SwitchToResearch(SlurmApi& slurm, const Scontrol& scontrol,
                                          const Cluster& inventory, ResearchRequest request) {
  if (request.nodes.empty() == (request.count == 0)) {
    return InvalidArgument("give --nodes LIST or --count N");
  }
  auto chosen = ChooseNodes(slurm, inventory, request);
  if (!chosen) return chosen.error();
  ResearchSwitched done;
  done.users = std::move(request.users);
  done.nodes = std::move(*chosen);

  auto mode = CurrentMode(scontrol);
  if (!mode) return mode.error();
  if (mode->research && request.add) {
    std::vector<std::string> users = mode->users;
    for (const std::string& u : done.users) {
      if (!Contains(users, u)) users.push_back(u);
    }
    done.users = std::move(users);
    for (const std::string& n : mode->nodes) {
      if (!Contains(done.nodes, n)) done.nodes.push_back(n);
    }
    std::sort(done.nodes.begin(), done.nodes.end());
  } else if (mode->research) {
    done.replaced = *mode;
  }
  if (mode->research) {
    if (auto deleted = DeleteResearch(scontrol); !deleted) return deleted.error();
  }
  if (auto created = scontrol(CreateResearchArgs(done.users, done.nodes)); !created) {
    return created.error();
  }
  if (request.force) {
    auto jobs = slurm.Jobs();
    if (!jobs) return jobs.error();
    for (const JobInfo& j : *jobs) {
      const bool there = std::any_of(j.nodes.begin(), j.nodes.end(), [&](const std::string& n) {
        return Contains(done.nodes, n);
      });
      if (j.state == JobState::kRunning && there && !Contains(done.users, j.user)) {
        if (scontrol({"requeue", std::to_string(j.id)})) ++done.requeued;
      }
    }
  }
  return done;
}

Result<Mode> SwitchToLab(const Scontrol& scontrol) {
  auto mode = CurrentMode(scontrol);
  if (!mode) return mode.error();
  if (!mode->research) return mode;
  if (auto deleted = DeleteResearch(scontrol); !deleted) return deleted.error();
  return mode;
}

}  // namespace bmas::slurm
