#include "cli/mode_commands.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "cli/slurm_target.h"
#include "common/process.h"
#include "core/hostlist.h"
#include "slurm/modes.h"

namespace bmas {
namespace {

using Clock = std::chrono::steady_clock;

// `scontrol ARGS...` against the target's Slurm; its stderr becomes the error.
Result<std::string> Scontrol(const SlurmTarget& t, std::vector<std::string> args) {
  args.insert(args.begin(), "scontrol");
  auto r = RunCommand(args, t.env, std::chrono::seconds(15));
  if (!r) return r.error();
  if (r->exit_code != 0) {
    std::string err = r->err.empty() ? r->out : r->err;
    while (!err.empty() && err.back() == '\n') err.pop_back();
    return Error{ErrorCode::kUnavailable, fmt::format("scontrol {}: {}", args[1], err)};
  }
  return r->out;
}

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

Result<slurm::Mode> CurrentMode(const SlurmTarget& t) {
  auto out = Scontrol(t, {"-o", "show", "reservation"});
  if (!out) return out.error();
  return slurm::ParseMode(*out);
}

// Exposed for `bmas run`: research users' jobs go into their reservation.
std::string ReservationFor(const SlurmTarget& target, const std::string& user) {
  auto mode = CurrentMode(target);
  if (!mode || !mode->research) return "";
  const auto& users = mode->users;
  return std::find(users.begin(), users.end(), user) != users.end()
             ? std::string(slurm::kResearchReservation)
             : "";
}

void ModeCommands::Register(CLI::App& app, GlobalOptions& global) {
  mode_ = app.add_subcommand("mode", "Show the cluster's mode: lab (shared) or research (a few "
                                     "users own whole nodes)");
  mode_->add_flag("--json", json_, "One JSON object");
  mode_->require_subcommand(0, 1);
  CLI::App* research = mode_->add_subcommand(
      "research", "Give USERS whole nodes through a Slurm reservation (root only)");
  research->add_option("--users", users_, "Users who own the nodes (comma-separated)")
      ->delimiter(',')
      ->required();
  research->add_option("--nodes", nodes_, "Nodes, as a host list: oss[01-03]");
  research->add_option("--count", count_, "Or this many nodes, idle ones first")
      ->check(kPositive);
  research->add_flag("--add", add_,
                     "Keep the research users and nodes already reserved and add these (without "
                     "it, a new research reservation replaces the one in force)");
  research->add_flag("--force", force_,
                     "Requeue other users' jobs running on those nodes (default: they finish)");
  research->callback([this, &global] { global.exit_code = Research(global); });
  CLI::App* lab = mode_->add_subcommand("lab", "Return every node to sharing (root only)");
  lab->callback([this, &global] { global.exit_code = Lab(global); });
  mode_->callback([this, &global] {
    if (mode_->get_subcommands().empty()) global.exit_code = Show(global);
  });
}

int ModeCommands::Show(GlobalOptions& global) {
  passwd* me = getpwuid(getuid());
  auto target = ResolveSlurm(global, me != nullptr ? me->pw_name : "root");
  if (!target) return ReportFailure("mode", target.error());
  auto mode = CurrentMode(*target);
  if (!mode) return ReportFailure("mode", mode.error());
  if (json_) {
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartObject();
    w.Key("mode");
    w.String(mode->research ? "research" : "lab");
    if (mode->research) {
      w.Key("reservation");
      w.String(std::string(slurm::kResearchReservation).c_str());
      for (const auto& [key, list] : {std::pair{"users", &mode->users}, {"nodes", &mode->nodes}}) {
        w.Key(key);
        w.StartArray();
        for (const std::string& v : *list) w.String(v.c_str());
        w.EndArray();
      }
      w.Key("since");
      w.String(mode->start_time.c_str());
    }
    w.EndObject();
    fmt::print("{}\n", buf.GetString());
  } else if (mode->research) {
    fmt::print("research: {} own {} (reservation {}, since {})\n", fmt::join(mode->users, ","),
               CompressHostlist(mode->nodes), slurm::kResearchReservation, mode->start_time);
  } else {
    fmt::print("lab: every node is shared\n");
  }
  return 0;
}

int ModeCommands::Research(GlobalOptions& global) {
  const auto start = Clock::now();
  if (geteuid() != 0) {
    return ReportFailure("mode research", Error{ErrorCode::kPermissionDenied, "only root switches modes"});
  }
  for (const std::string& u : users_) {
    if (getpwnam(u.c_str()) == nullptr) {
      return ReportFailure("mode research", InvalidArgument(fmt::format(
                                       "there is no Unix account '{}' on this host", u)));
    }
  }
  if (nodes_.empty() == (count_ == 0)) {
    return ReportFailure("mode research", InvalidArgument("give --nodes LIST or --count N"));
  }
  auto target = ResolveSlurm(global, "root");
  if (!target) return ReportFailure("mode research", target.error());
  SlurmRestClient client(target->endpoint);

  std::vector<std::string> nodes;
  if (!nodes_.empty()) {
    auto expanded = ExpandHostlist(nodes_);
    if (!expanded) return ReportFailure("mode research", expanded.error());
    nodes = *expanded;
    for (const std::string& n : nodes) {
      if (target->inventory.FindNode(n) == nullptr) {
        return ReportFailure("mode research",
                    InvalidArgument(fmt::format("node {} is not in the cluster", n)));
      }
    }
  } else {
    auto all = client.Nodes();
    if (!all) return ReportFailure("mode research", all.error());
    std::stable_sort(all->begin(), all->end(), [](const NodeInfo& a, const NodeInfo& b) {
      return (a.state == "idle") > (b.state == "idle");
    });
    if (static_cast<size_t>(count_) > all->size()) {
      return ReportFailure("mode research", InvalidArgument(fmt::format(
                                       "the cluster has {} nodes, not {}", all->size(), count_)));
    }
    for (int i = 0; i < count_; ++i) nodes.push_back((*all)[i].name);
    std::sort(nodes.begin(), nodes.end());
  }

  // One research reservation at a time: a new one replaces it, or with --add takes in its
  // users and nodes.
  auto mode = CurrentMode(*target);
  if (!mode) return ReportFailure("mode research", mode.error());
  std::string replaced;
  if (mode->research && add_) {
    std::vector<std::string> users = mode->users;
    for (const std::string& u : users_) {
      if (std::find(users.begin(), users.end(), u) == users.end()) users.push_back(u);
    }
    users_ = std::move(users);
    for (const std::string& n : mode->nodes) {
      if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
    }
    std::sort(nodes.begin(), nodes.end());
  } else if (mode->research) {
    replaced = fmt::format("; this replaces {} on {} (--add keeps them)",
                           fmt::join(mode->users, ","), CompressHostlist(mode->nodes));
  }
  if (mode->research) {
    auto deleted = Scontrol(*target, {"delete", fmt::format("ReservationName={}",
                                                              slurm::kResearchReservation)});
    if (!deleted) return ReportFailure("mode research", deleted.error());
  }
  auto created = Scontrol(*target, slurm::CreateResearchArgs(users_, nodes));
  if (!created) return ReportFailure("mode research", created.error());

  int requeued = 0;
  if (force_) {
    auto jobs = client.Jobs();
    if (!jobs) return ReportFailure("mode research", jobs.error());
    for (const JobInfo& j : *jobs) {
      const bool theirs = std::find(users_.begin(), users_.end(), j.user) != users_.end();
      const bool there = std::any_of(j.nodes.begin(), j.nodes.end(), [&](const std::string& n) {
        return std::find(nodes.begin(), nodes.end(), n) != nodes.end();
      });
      if (j.state == "RUNNING" && there && !theirs) {
        if (Scontrol(*target, {"requeue", std::to_string(j.id)})) ++requeued;
      }
    }
  }
  fmt::print("research: {} own {} (reservation {}); {}switched in {:.2f} s{}\n",
             fmt::join(users_, ","), CompressHostlist(nodes), slurm::kResearchReservation,
             force_ ? fmt::format("{} job(s) of others requeued; ", requeued) : "",
             Since(start), replaced);
  return 0;
}

int ModeCommands::Lab(GlobalOptions& global) {
  const auto start = Clock::now();
  if (geteuid() != 0) {
    return ReportFailure("mode lab", Error{ErrorCode::kPermissionDenied, "only root switches modes"});
  }
  auto target = ResolveSlurm(global, "root");
  if (!target) return ReportFailure("mode lab", target.error());
  auto mode = CurrentMode(*target);
  if (!mode) return ReportFailure("mode lab", mode.error());
  if (!mode->research) {
    fmt::print("lab: already; every node is shared\n");
    return 0;
  }
  auto deleted = Scontrol(
      *target, {"delete", fmt::format("ReservationName={}", slurm::kResearchReservation)});
  if (!deleted) return ReportFailure("mode lab", deleted.error());
  fmt::print("lab: {} shared again; switched in {:.2f} s\n", CompressHostlist(mode->nodes),
             Since(start));
  return 0;
}

}  // namespace bmas
